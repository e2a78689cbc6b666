//! What toolpilot tells the model besides the conversation: its system message (workspace,
//! OS, date, a top-level listing, the rules that apply, when to stop calling tools), the
//! workspace's rules and skills, and the descriptions of `request_rule` and `read_skill`
//! that list them.
//!
//! Rules and skills are loaded from disk into a [`Snapshot`], cached for
//! [`SNAPSHOT_TTL`] (so a busy server does not re-read them on every request) and reloaded at
//! once when toolpilot writes a rule itself. Loading reads files: a run refreshes the
//! snapshot on a blocking thread ([`Prompt::refresh`]); tools read the latest one
//! ([`Prompt::latest`]), which never touches the disk once the server has started. The system message is computed per upstream round
//! from the run's clean conversation ([`RunPrompt`]) and spliced into the request body only
//! ([`splice_system`], [`unsplice_system`]), so it is never stored in the conversation, never duplicated, and a rule
//! that starts to apply mid-run (the model read a matching file) is in the next round's
//! system message.

pub mod frontmatter;
pub mod rules;
pub mod skills;

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

pub use crate::config::PromptConfig;
use crate::text::content_text;
use crate::workspace::Workspace;
use crate::workspace::walk::{self, Visibility};
use rules::{Kind, Rules};
use skills::Skills;

/// How long loaded rules, skills and the top-level listing are reused before being read
/// again.
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(2);

/// Rules, skills and the top-level listing as read at one moment.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub rules: Rules,
    pub skills: Skills,
    /// Top-level entries (folders end in `/`), at most `listing_entries`.
    pub listing: Vec<String>,
    pub listing_total: usize,
    /// A hash of the generated tool descriptions: equal fingerprints, equal tool specs.
    pub fingerprint: u64,
    /// The environment part of the system message (workspace, OS, date, listing).
    pub head: String,
    /// Whether any rule is auto-attached (only then do touched files matter).
    pub has_auto_attached: bool,
}

impl Snapshot {
    /// The description of `request_rule`: Continue's fixed prefix, then `name: description`
    /// for every requestable rule, or "No rules available.".
    pub fn request_rule_description(&self) -> String {
        let mut out = String::from(
            "Use this tool to retrieve additional 'rules' that contain more context or \
             instructions, based on their descriptions. Call it with the exact name of a rule \
             when its description says it is relevant to the task. Available rules:\n",
        );
        let mut any = false;
        for r in self.rules.requestable() {
            any = true;
            match &r.description {
                Some(d) => out.push_str(&format!("{}: {}\n", r.name, one_line(d))),
                None => out.push_str(&format!("{}\n", r.name)),
            }
        }
        if !any {
            out.push_str("No rules available.\n");
        }
        out
    }

    /// The description of `read_skill`: what skills are, then `name:`/`description:` pairs.
    pub fn read_skill_description(&self) -> String {
        let mut out = String::from(
            "Read a skill: instructions (and supporting files) for a specific kind of task. \
             When a skill's description matches the task, read it before starting and follow \
             it. Call with the exact skillName. Available skills:\n",
        );
        if self.skills.skills.is_empty() {
            out.push_str("No skills available.\n");
        }
        for s in &self.skills.skills {
            out.push_str(&format!(
                "name: {}\ndescription: {}\n",
                s.name,
                one_line(&s.description)
            ));
        }
        out
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Loads and caches [`Snapshot`]s for one workspace. One per engine.
pub struct Prompt {
    workspace: Arc<Workspace>,
    pub config: PromptConfig,
    cache: Mutex<Option<(Instant, Arc<Snapshot>)>>,
    /// Held while a run loads the snapshot, so that the runs that find it stale meanwhile wait
    /// for that load instead of each starting its own.
    loading: tokio::sync::Mutex<()>,
}

impl Prompt {
    pub fn new(workspace: Arc<Workspace>, config: PromptConfig) -> Prompt {
        Prompt {
            workspace,
            config,
            cache: Mutex::new(None),
            loading: tokio::sync::Mutex::new(()),
        }
    }

    /// The current snapshot: the cached one when it is younger than [`SNAPSHOT_TTL`].
    pub fn snapshot(&self) -> Arc<Snapshot> {
        if let Ok(c) = self.cache.lock()
            && let Some((at, snap)) = c.as_ref()
            && at.elapsed() < SNAPSHOT_TTL
        {
            return Arc::clone(snap);
        }
        let snap = Arc::new(self.load());
        if let Ok(mut c) = self.cache.lock() {
            *c = Some((Instant::now(), Arc::clone(&snap)));
        }
        snap
    }

    /// The current snapshot, loaded on a blocking thread when the cached one is older than
    /// [`SNAPSHOT_TTL`] (rules and skills are files: reading them must not hold up the async
    /// threads that serve other requests).
    pub async fn refresh(self: &Arc<Self>) -> Arc<Snapshot> {
        if let Some(snap) = self.cached(SNAPSHOT_TTL) {
            return snap;
        }
        // One load at a time: on a busy server every request in flight finds the snapshot
        // stale at the same moment, and as many loads at once (each reading the rules and
        // listing the workspace's top level) held them all up for seconds on a large
        // workspace. The first loads; the others wait for it and take its snapshot.
        let _loading = self.loading.lock().await;
        if let Some(snap) = self.cached(SNAPSHOT_TTL) {
            return snap;
        }
        let this = Arc::clone(self);
        match tokio::task::spawn_blocking(move || this.snapshot()).await {
            Ok(snap) => snap,
            // The load panicked: the last snapshot is better than none.
            Err(_) => self.latest(),
        }
    }

    /// The snapshot loaded last, however old (the run's own refresh just made it current);
    /// loads one only if there is none yet, which `Engine::new` prevents.
    pub fn latest(&self) -> Arc<Snapshot> {
        match self.cached(Duration::MAX) {
            Some(snap) => snap,
            None => self.snapshot(),
        }
    }

    fn cached(&self, ttl: Duration) -> Option<Arc<Snapshot>> {
        let c = self.cache.lock().ok()?;
        let (at, snap) = c.as_ref()?;
        (at.elapsed() < ttl).then(|| Arc::clone(snap))
    }

    /// Loads the snapshot again now (a rule was just written; call off the async threads).
    pub fn reload(&self) {
        let snap = Arc::new(self.load());
        if let Ok(mut c) = self.cache.lock() {
            *c = Some((Instant::now(), snap));
        }
    }

    fn load(&self) -> Snapshot {
        let ws = &self.workspace;
        let global = self.config.global_dir.as_deref();
        let rules = Rules::load(ws, global, self.config.agents_md);
        let skills = Skills::load(ws, global);
        let (listing, listing_total) = if self.config.system_message {
            top_level(ws, self.config.listing_entries)
        } else {
            (Vec::new(), 0)
        };
        let mut snap = Snapshot {
            rules,
            skills,
            listing,
            listing_total,
            fingerprint: 0,
            head: String::new(),
            has_auto_attached: false,
        };
        snap.has_auto_attached = snap
            .rules
            .rules
            .iter()
            .any(|r| r.kind() == Kind::AutoAttached);
        if self.config.system_message {
            snap.head = environment(ws, &snap);
        }
        let mut h = DefaultHasher::new();
        snap.request_rule_description().hash(&mut h);
        snap.read_skill_description().hash(&mut h);
        snap.fingerprint = h.finish();
        snap
    }
}

/// The environment part of the system message.
fn environment(ws: &Workspace, snapshot: &Snapshot) -> String {
    let mut head = String::from("<toolpilot_environment>\n");
    head.push_str(&format!(
        "You work in the workspace \"{}\" at {} through the tools you are given; tool paths \
         are relative to that root.\n",
        ws.name(),
        ws.root().display()
    ));
    head.push_str(&format!(
        "Operating system: {} ({}). Today's date: {}.\n",
        std::env::consts::OS,
        std::env::consts::ARCH,
        today()
    ));
    if !snapshot.listing.is_empty() {
        head.push_str("Top level of the workspace:\n");
        for e in &snapshot.listing {
            head.push_str(&format!("  {e}\n"));
        }
        if snapshot.listing_total > snapshot.listing.len() {
            head.push_str(&format!(
                "  … and {} more entries (list them with ls)\n",
                snapshot.listing_total - snapshot.listing.len()
            ));
        }
    }
    head.push_str("</toolpilot_environment>");
    head
}

/// The workspace's top-level entries, sorted, folders with `/`, without `.git`.
fn top_level(ws: &Workspace, max: usize) -> (Vec<String>, usize) {
    let Ok(mut b) = walk::builder(ws, &ws.root_path(), &[], Visibility::Listing) else {
        return (Vec::new(), 0);
    };
    b.max_depth(Some(1)).sort_by_file_name(|a, b| a.cmp(b));
    let mut out = Vec::new();
    let mut total = 0;
    for e in b.build().flatten() {
        if e.depth() == 0 || e.file_name() == ".git" {
            continue;
        }
        total += 1;
        if out.len() < max {
            let mut name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().is_some_and(|t| t.is_dir()) {
                name.push('/');
            }
            out.push(name);
        }
        if total > 10_000 {
            break;
        }
    }
    (out, total)
}

/// The system message of one run, recomputed per round from the conversation.
#[derive(Clone)]
pub struct RunPrompt {
    snapshot: Arc<Snapshot>,
    config: PromptConfig,
    /// Whether `request_rule` is offered (then its rules are mentioned).
    offers_request_rule: bool,
    /// The environment part (fixed for the run).
    head: String,
    /// Rules (by index) applied so far, and the block built for them.
    applied: Vec<(usize, Option<String>)>,
    block: Option<String>,
}

impl RunPrompt {
    pub fn new(
        snapshot: Arc<Snapshot>,
        config: &PromptConfig,
        offers_request_rule: bool,
    ) -> RunPrompt {
        let head = snapshot.head.clone();
        RunPrompt {
            snapshot,
            config: config.clone(),
            offers_request_rule,
            head,
            applied: Vec::new(),
            block: None,
        }
    }

    /// The names of the rules applied so far (for the run's record).
    pub fn applied_names(&self) -> Vec<String> {
        self.applied
            .iter()
            .map(|(i, _)| self.snapshot.rules.rules[*i].name.clone())
            .collect()
    }

    /// The system text for the next round, given the conversation so far; `None` when the
    /// system message is off. Rules already in the client's system message (Continue applies
    /// the same files itself) are not repeated.
    /// Whether [`RunPrompt::block`] looks at files (the touched files, for auto-attached
    /// rules): then it belongs on a blocking thread.
    pub fn reads_files(&self) -> bool {
        self.config.system_message && self.snapshot.has_auto_attached
    }

    pub fn block(&mut self, ws: &Workspace, messages: &[Value]) -> Option<&str> {
        if !self.config.system_message {
            return None;
        }
        // Without auto-attached rules the touched files change nothing: skip the stats.
        let touched = if self.snapshot.has_auto_attached {
            touched_files(ws, messages)
        } else {
            Vec::new()
        };
        let client_system = messages
            .first()
            .filter(|m| is_system(m))
            .map(|m| content_text(m.get("content"), "\n"))
            .unwrap_or_default();
        let rules = &self.snapshot.rules;
        let mut now: Vec<(usize, Option<String>)> = self.applied.clone();
        for (rule, file) in rules.applicable(ws, &touched) {
            if !rule.body.is_empty() && client_system.contains(&rule.body) {
                continue;
            }
            if let Some(i) = rules.rules.iter().position(|r| std::ptr::eq(r, rule)) {
                // Once applied, a rule stays for the rest of the run (the model may rely on it).
                if !now.iter().any(|(j, _)| *j == i) {
                    now.push((i, file));
                }
            }
        }
        if self.block.is_some() && now.len() == self.applied.len() {
            return self.block.as_deref();
        }
        now.sort_by_key(|(i, _)| *i);
        self.applied = now;
        if !self.applied.is_empty() {
            tracing::info!(rules = ?self.applied_names(), "rules applied to the system message");
        }
        let order = &self.applied;
        let mut text = self.head.clone();
        if !order.is_empty() {
            text.push_str("\n\n<rules>\nRules of this workspace. Follow them:\n");
            for (i, file) in order {
                let r = &rules.rules[*i];
                let why = match (r.kind(), file) {
                    (Kind::AutoAttached, Some(f)) => format!(", applies because {f} is involved"),
                    _ => String::new(),
                };
                text.push_str(&format!(
                    "\n## {} ({}{why})\n\n{}\n",
                    r.name,
                    r.location(),
                    r.body
                ));
            }
            text.push_str("</rules>");
        }
        if self.offers_request_rule {
            let more: Vec<String> = rules
                .requestable()
                .filter(|r| r.description.is_some())
                .map(|r| {
                    format!(
                        "- {}: {}",
                        r.name,
                        one_line(r.description.as_deref().unwrap_or_default())
                    )
                })
                .collect();
            if !more.is_empty() {
                text.push_str(
                    "\n\nMore rules exist; load one with request_rule when its description fits \
                     the task:\n",
                );
                text.push_str(&more.join("\n"));
            }
        }
        text.push_str(
            "\n\nCall tools only while you need information you do not have yet or need to change \
             something. Do not repeat a call whose result you already have. As soon as you can \
             answer, or when the task is done, reply to the user in plain text without calling \
             any tool: a reply without tool calls ends your turn.",
        );
        if let Some(extra) = &self.config.extra {
            text.push_str("\n\n");
            text.push_str(extra.trim());
        }
        self.block = Some(text);
        self.block.as_deref()
    }
}

fn is_system(m: &Value) -> bool {
    matches!(
        m.get("role").and_then(Value::as_str),
        Some("system" | "developer")
    )
}

/// How [`splice_system`] changed a conversation, for [`unsplice_system`].
#[must_use = "the conversation must be restored with unsplice_system"]
pub enum Spliced {
    Nothing,
    /// A system message was inserted at the front.
    Inserted,
    /// The block was appended to the first message, whose content was this.
    Appended(Option<Value>),
}

/// Adds `block` to the conversation's system message: appended (after a blank line) to the
/// first message when that is a system/developer message, else inserted as a new first system
/// message. [`unsplice_system`] undoes it, so the block is never stored in the conversation.
pub fn splice_system(messages: &mut Vec<Value>, block: Option<&str>) -> Spliced {
    let Some(block) = block else {
        return Spliced::Nothing;
    };
    if messages.first().is_some_and(is_system) {
        let original = messages[0].get("content").cloned();
        let merged = match &original {
            Some(Value::String(s)) if !s.is_empty() => Value::String(format!("{s}\n\n{block}")),
            Some(Value::Array(parts)) => {
                let mut parts = parts.clone();
                parts.push(serde_json::json!({"type": "text", "text": block}));
                Value::Array(parts)
            }
            _ => Value::String(block.to_string()),
        };
        messages[0]["content"] = merged;
        Spliced::Appended(original)
    } else {
        messages.insert(0, serde_json::json!({"role": "system", "content": block}));
        Spliced::Inserted
    }
}

/// Restores the conversation [`splice_system`] changed.
pub fn unsplice_system(messages: &mut Vec<Value>, spliced: Spliced) {
    match spliced {
        Spliced::Nothing => {}
        Spliced::Inserted => {
            messages.remove(0);
        }
        Spliced::Appended(Some(c)) => messages[0]["content"] = c,
        Spliced::Appended(None) => {
            if let Some(o) = messages[0].as_object_mut() {
                o.remove("content");
            }
        }
    }
}

/// Runs `f` on the conversation with `block` spliced into its system message, then restores it.
pub fn with_system<R>(
    messages: &mut Vec<Value>,
    block: Option<&str>,
    f: impl FnOnce(&[Value]) -> R,
) -> R {
    let spliced = splice_system(messages, block);
    let r = f(messages);
    unsplice_system(messages, spliced);
    r
}

/// Workspace-relative paths the conversation since the last user message involves: paths in
/// the arguments of tool calls (`filepath` and other `*path*` arguments), code-block info
/// strings and path-like words of the last user message that name existing files.
pub fn touched_files(ws: &Workspace, messages: &[Value]) -> Vec<String> {
    let start = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .unwrap_or(0);
    let mut out: Vec<String> = Vec::new();
    let mut add = |raw: &str, must_exist: bool| {
        let raw = raw.trim_matches(|c: char| "`'\"()[]{}<>,;:!?".contains(c));
        let raw = raw.trim_end_matches('.');
        if raw.is_empty() || raw.len() > 512 {
            return;
        }
        let Ok(p) = ws.resolve(raw) else { return };
        if p.is_root() || (must_exist && ws.version(&p).is_none()) {
            return;
        }
        let d = p.display();
        if !out.contains(&d) && out.len() < 256 {
            out.push(d);
        }
    };
    for m in &messages[start..] {
        match m.get("role").and_then(Value::as_str) {
            Some("user") => {
                let text = content_text(m.get("content"), "\n");
                let mut candidates = 0;
                for line in text.lines() {
                    if let Some(info) = line.trim_start().strip_prefix("```") {
                        for w in info.split_whitespace() {
                            if w.contains('/') || w.contains('.') {
                                add(w, false);
                            }
                        }
                        continue;
                    }
                    for w in line.split_whitespace() {
                        if candidates < 64 && (w.contains('/') || w.contains('.')) {
                            candidates += 1;
                            add(w, true);
                        }
                    }
                }
            }
            Some("assistant") => {
                let Some(calls) = m.get("tool_calls").and_then(Value::as_array) else {
                    continue;
                };
                for c in calls {
                    let raw = c.pointer("/function/arguments");
                    let args: Option<Value> = match raw {
                        Some(Value::String(s)) => serde_json::from_str(s).ok(),
                        Some(v @ Value::Object(_)) => Some(v.clone()),
                        _ => None,
                    };
                    let Some(Value::Object(map)) = args else {
                        continue;
                    };
                    for (k, v) in &map {
                        let key = k.to_ascii_lowercase();
                        if (key.contains("path") || key == "file")
                            && !key.contains("dir")
                            && let Some(s) = v.as_str()
                        {
                            add(s, false);
                        }
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Today's date (UTC), `YYYY-MM-DD`.
pub fn today() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_that_find_the_snapshot_stale_together_share_one_load() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..300 {
            std::fs::write(tmp.path().join(format!("f{i}")), "x").unwrap();
        }
        let ws = Arc::new(crate::workspace::Workspace::open(tmp.path(), &[]).unwrap());
        let prompt = Arc::new(Prompt::new(ws, PromptConfig::default()));
        // Nothing is cached yet: every one of these finds the snapshot stale.
        let waits: Vec<_> = (0..16)
            .map(|_| {
                let p = Arc::clone(&prompt);
                tokio::spawn(async move { p.refresh().await })
            })
            .collect();
        let mut snaps = Vec::new();
        for w in waits {
            snaps.push(w.await.unwrap());
        }
        assert!(
            snaps.iter().all(|s| Arc::ptr_eq(s, &snaps[0])),
            "each run loaded its own snapshot"
        );
        assert_eq!(snaps[0].listing_total, 300);
    }

    #[test]
    fn dates_are_civil() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(20_415), (2025, 11, 23));
    }

    #[test]
    fn the_block_is_spliced_in_and_taken_out_again() {
        let mut msgs = vec![json!({"role": "user", "content": "hi"})];
        let seen = with_system(&mut msgs, Some("B"), |m| serde_json::to_string(m).unwrap());
        assert_eq!(
            seen,
            r#"[{"content":"B","role":"system"},{"content":"hi","role":"user"}]"#
        );
        assert_eq!(msgs.len(), 1);
        let mut msgs = vec![
            json!({"role": "system", "content": "client"}),
            json!({"role": "user", "content": "hi"}),
        ];
        let first = with_system(&mut msgs, Some("B"), |m| m[0]["content"].clone());
        assert_eq!(first, "client\n\nB");
        assert_eq!(msgs[0]["content"], "client");
        let mut parts = vec![json!({"role": "system", "content": [{"type": "text", "text": "c"}]})];
        let n = with_system(&mut parts, Some("B"), |m| {
            m[0]["content"].as_array().unwrap().len()
        });
        assert_eq!(n, 2);
        assert_eq!(parts[0]["content"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn touched_files_come_from_calls_and_the_last_user_message() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("src")).unwrap();
        std::fs::write(tmp.path().join("src/a.rs"), "x").unwrap();
        std::fs::write(tmp.path().join("README.md"), "x").unwrap();
        let ws = Workspace::open(tmp.path(), &[]).unwrap();
        let msgs = vec![
            json!({"role": "user", "content": "old: look at README.md"}),
            json!({"role": "user", "content": "Fix src/a.rs, not nothere.rs.\n```ts web/app.ts\nx\n```"}),
            json!({"role": "assistant", "content": "", "tool_calls": [
                {"id": "1", "type": "function", "function": {"name": "read_file", "arguments": "{\"filepath\":\"lib/b.py\"}"}},
                {"id": "2", "type": "function", "function": {"name": "ls", "arguments": "{\"dirPath\":\"src\"}"}},
                {"id": "3", "type": "function", "function": {"name": "x", "arguments": "{\"filepath\":\"../out\"}"}}]}),
        ];
        assert_eq!(
            touched_files(&ws, &msgs),
            ["src/a.rs", "web/app.ts", "lib/b.py"]
        );
    }
}
