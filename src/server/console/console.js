// The toolpilot console: runs, a run's timeline (live), and approvals with buttons.
// Everything is rendered with textContent: nothing from a run is ever parsed as HTML.
"use strict";

// The admin token comes in the address's fragment, /#admin=TOKEN, as the serve log prints it
// (a fragment is never sent to a server, so the token stays out of logs and Referer headers).
// It goes with every API call in a header; never in a query string. /#token=THE_TOKEN is the
// bearer token, for a server that requires one (the admin token also opens everything).
const fragment = new URLSearchParams(location.hash.slice(1));
const admin = fragment.get("admin");
const token = fragment.get("token");
const headers = {};
if (admin) headers["X-Toolpilot-Admin-Token"] = admin;
if (token) headers.Authorization = "Bearer " + token;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

// Shown when the server refuses the token (or there is none): what to open instead.
function showAuth(message) {
  const p = document.getElementById("auth");
  p.textContent = message;
  p.hidden = false;
}

async function api(path, options) {
  const r = await fetch(path, { ...options, headers: { ...headers, ...(options && options.headers) } });
  const text = await r.text();
  let body = null;
  try { body = JSON.parse(text); } catch (_) { body = text; }
  const message = (body && body.error && body.error.message) || ("HTTP " + r.status);
  if (r.status === 401) showAuth(message);
  if (!r.ok) throw new Error(message);
  return body;
}

// Follows a run's events (SSE) with fetch, which, unlike EventSource, can send the token in a
// header. Calls add(event) for each, then done(true) at the end of the run, or done(false) if
// the stream could not be opened or broke. Returns an AbortController that stops it.
function followEvents(path, add, done) {
  const stop = new AbortController();
  (async () => {
    let r;
    try {
      r = await fetch(path, { headers, signal: stop.signal });
    } catch (_) {
      if (!stop.signal.aborted) done(false);
      return;
    }
    if (!r.ok || !r.body) { done(false); return; }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    try {
      for (;;) {
        const { value, done: eof } = await reader.read();
        if (eof) break;
        buf += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let name = "message";
          const data = [];
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) name = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
          }
          if (name === "end") { done(true); return; }
          if (data.length) add(JSON.parse(data.join("\n")));
        }
      }
    } catch (_) {
      if (stop.signal.aborted) return;
    }
    if (!stop.signal.aborted) done(false);
  })();
  return stop;
}

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  return s < 60 ? s + " s ago" : Math.round(s / 60) + " min ago";
}

// ---- approvals ----
async function answer(id, body, li) {
  for (const b of li.querySelectorAll("button")) b.disabled = true;
  try {
    await api("/v1/approvals/" + encodeURIComponent(id), {
      method: "POST", body: JSON.stringify(body), headers: { "Content-Type": "application/json" },
    });
    li.remove();
  } catch (e) {
    li.append(el("p", { class: "error" }, e.message));
  }
  refreshApprovals();
}

async function refreshApprovals() {
  let list;
  try { list = (await api("/v1/approvals")).data; } catch (e) { return; }
  const ul = document.getElementById("approvals");
  const count = document.getElementById("approvals-count");
  count.textContent = list.length;
  count.classList.toggle("active", list.length > 0);
  document.getElementById("approvals-empty").hidden = list.length > 0;
  const shown = new Set([...ul.children].map((li) => li.dataset.id));
  const wanted = new Set(list.map((a) => a.id));
  for (const li of [...ul.children]) if (!wanted.has(li.dataset.id)) li.remove();
  for (const a of list) {
    if (shown.has(a.id)) continue;
    const li = el("li", { "data-id": a.id, class: "approval" });
    li.append(
      el("div", { class: "what" }, el("strong", {}, a.tool), " in run ", el("span", { class: "mono" }, a.run_id),
        el("span", { class: "muted" }, " · denied automatically " + new Date(a.expires_at * 1000).toLocaleTimeString())),
      el("pre", {}, a.arguments),
      el("div", { class: "muted" }, a.reason),
      el("div", { class: "muted" }, a.rules.length ? "Always adds: " + a.rules.join(", ")
        : "Always adds no rule: none allows exactly this call, so it is approved this once"),
      el("div", {},
        el("button", { class: "approve", onclick: () => answer(a.id, { decision: "approve" }, li) }, "Approve"),
        el("button", { class: "approve", onclick: () => answer(a.id, { decision: "approve", always: true }, li) }, "Always allow"),
        el("button", { class: "deny", onclick: () => answer(a.id, { decision: "deny" }, li) }, "Deny")),
    );
    ul.append(li);
  }
}

// ---- runs ----
let selected = null;
let follow = null;

async function refreshRuns() {
  let list;
  try { list = (await api("/v1/runs")).data; } catch (e) { return; }
  document.getElementById("runs-empty").hidden = list.length > 0;
  const tbody = document.querySelector("#runs tbody");
  tbody.replaceChildren(...list.map((r) => {
    const tr = el("tr", { "data-id": r.id, onclick: () => select(r.id) },
      el("td", { class: "mono" }, r.id, el("div", { class: "muted" }, ago(r.started_ms))),
      el("td", { class: "status status-" + r.status }, r.status),
      el("td", {}, r.rounds),
      el("td", {}, r.tool_calls),
      el("td", {}, r.prompt));
    if (r.id === selected) tr.classList.add("selected");
    return tr;
  }));
}

function describe(ev, t0) {
  const t = el("span", { class: "t" }, "+" + (ev.t - t0) + " ms");
  switch (ev.type) {
    case "request": return [null, t, "request: " + ev.messages + " messages" + (ev.stream ? ", streamed" : "")];
    case "round": return [null, t, "round " + ev.n + ": " + ev.ms + " ms, " + (ev.tool_calls.length ? "calls " + ev.tool_calls.join(", ") : "answer") + (ev.usage ? " · " + ev.usage.total_tokens + " tokens" : "")];
    case "tool_started": return [null, t, "▸ " + ev.tool + " ", el("code", {}, ev.arguments)];
    case "tool": {
      const good = ev.status === "ok";
      const li = [good ? "tool-ok" : "tool-bad", t, ev.tool + ": " + ev.status + " in " + ev.ms + " ms (" + ev.result_bytes + " bytes)"];
      if (ev.result) li.push(el("pre", {}, ev.result));
      return li;
    }
    case "approval": return ["approval", t, "approval for " + ev.tool + ": " + ev.outcome + (ev.reason ? " (" + ev.reason + ")" : "")];
    case "handed_to_client": return [null, t, "handed to the client: " + ev.calls.map((c) => c.tool).join(", ")];
    case "paused": return ["approval", t, "paused for approval in the chat: " + ev.calls.join(", ")];
    case "resumed": return ["approval", t, "resumed: " + ev.reply];
    case "upstream_error": return ["tool-bad", t, "upstream error (" + ev.kind + "): " + ev.message];
    case "done": return ["tool-ok", t, "done: " + ev.finish_reason + ", " + ev.rounds + " rounds, " + ev.ms + " ms"];
    case "failed": return ["tool-bad", t, "failed: " + ev.message];
    case "cancelled": return ["tool-bad", t, "cancelled: " + ev.reason];
    default: return [null, t, ev.type];
  }
}

function select(id) {
  selected = id;
  if (follow) follow.abort();
  document.getElementById("run-id").textContent = id;
  document.getElementById("run-empty").hidden = true;
  const ol = document.getElementById("timeline");
  ol.replaceChildren();
  for (const tr of document.querySelectorAll("#runs tbody tr")) tr.classList.toggle("selected", tr.dataset.id === id);
  let t0 = null;
  const add = (ev) => {
    if (t0 === null) t0 = ev.t;
    const [cls, ...parts] = describe(ev, t0);
    ol.append(el("li", cls ? { class: cls } : {}, ...parts));
  };
  const path = "/v1/runs/" + encodeURIComponent(id);
  const mine = followEvents(path + "/events", add, (ended) => {
    if (follow === mine) follow = null;
    if (ended) { refreshRuns(); return; }
    // Not in memory any more (or the server restarted): show what was recorded.
    if (!ol.children.length) api(path).then((r) => r.events.forEach(add)).catch(() => {});
  });
  follow = mine;
}

async function refreshHealth() {
  const h = document.getElementById("health");
  try {
    const s = await api("/healthz");
    h.textContent = s.workspace + " · upstream " + s.upstream;
    h.classList.remove("error");
  } catch (e) {
    h.textContent = "server unreachable: " + e.message;
    h.classList.add("error");
  }
}

function tick() { refreshApprovals(); refreshRuns(); }
if (!admin) {
  showAuth("This address has no admin token, which approvals and runs need: open the console " +
    "with the address the serve log prints at start-up (http://…/#admin=…).");
}
refreshHealth();
tick();
setInterval(tick, 1000);
setInterval(refreshHealth, 10000);
