// The toolpilot console: runs, a run's timeline (live), and approvals with buttons.
// Everything is rendered with textContent: nothing from a run is ever parsed as HTML.
"use strict";

// With a bearer token configured, open the console as /#token=THE_TOKEN.
const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? { Authorization: "Bearer " + token } : {};

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

async function api(path, options) {
  const r = await fetch(path, { ...options, headers: { ...headers, ...(options && options.headers) } });
  const text = await r.text();
  let body = null;
  try { body = JSON.parse(text); } catch (_) { body = text; }
  if (!r.ok) throw new Error((body && body.error && body.error.message) || ("HTTP " + r.status));
  return body;
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
      el("div", { class: "muted" }, a.rules.length ? "Always adds: " + a.rules.join(", ") : ""),
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
  if (follow) follow.close();
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
  if (token) {
    // EventSource cannot send headers: fetch the events once instead.
    api("/v1/runs/" + encodeURIComponent(id)).then((r) => r.events.forEach(add));
    return;
  }
  follow = new EventSource("/v1/runs/" + encodeURIComponent(id) + "/events");
  follow.onmessage = (m) => { add(JSON.parse(m.data)); };
  follow.addEventListener("end", () => { follow.close(); refreshRuns(); });
  follow.onerror = () => {
    // Not in memory any more (or the server restarted): show what was recorded.
    follow.close();
    if (!ol.children.length) api("/v1/runs/" + encodeURIComponent(id)).then((r) => r.events.forEach(add)).catch(() => {});
  };
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
refreshHealth();
tick();
setInterval(tick, 1000);
setInterval(refreshHealth, 10000);
