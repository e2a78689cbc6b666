//! In-band approvals (`approvals.mode = "pause"`): a run that reaches a call needing approval
//! stops before running its round, answers with a question (what waits and how to reply), and
//! saves where it stopped in the state directory (so it survives a restart). The next request
//! whose last assistant message carries that question and its marker, and whose last user
//! message is the answer, resumes it exactly there.
//!
//! A resume is bound to the question that was shown. The marker, `(toolpilot approval
//! pause-ID.MAC)`, carries a keyed hash (HMAC-SHA256, with a key kept in the workspace's state
//! folder, `pause.key`, mode 0600, made once) of the saved pause: its calls, the question text,
//! the conversation it belongs to and everything else resumed. On resume the hash must verify,
//! the assistant message must contain the question word for word, and the pause must be the
//! newest one of the conversation the request carries. The conversation is identified by a
//! hash of the messages the client sent with the request that paused (roles, text, tool call
//! ids and names; system messages left out, since clients rewrite them): the request that
//! answers sends those same messages, then the question, then the reply. So an old marker
//! pasted under a new question, a question changed after it was shown, or a question from
//! another point of the conversation resumes nothing, and the user is told why.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::hmac;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::bounded::{self, Links};
use crate::openai::{ToolCall, Usage};
use crate::text::content_text;

/// A call of the paused round that needs approval.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ask {
    pub call_id: String,
    pub tool: String,
    pub arguments: String,
    pub reason: String,
    pub rules: Vec<String>,
}

/// Where a paused run stopped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Paused {
    pub id: String,
    pub run_id: String,
    pub created_at: u64,
    pub expires_at: u64,
    /// The conversation it belongs to: [`conversation_id`] of the messages the client sent
    /// with the request that paused.
    pub conversation: String,
    /// The question shown to the user (without its marker), set by [`PauseStore::save`].
    pub question: String,
    /// The conversation up to and including the assistant message of the paused round.
    pub messages: Vec<Value>,
    /// The server-side calls of that round, in order (run on resume).
    pub calls: Vec<ToolCall>,
    pub asks: Vec<Ask>,
    pub usage: Usage,
    pub round_no: u32,
}

/// The user's answer to a pause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Approve {
        always: bool,
    },
    Deny {
        reason: Option<String>,
    },
    /// Not an answer: the user said something else; the calls are not run and the message is
    /// passed on.
    Other(String),
}

const MARKER: &str = "toolpilot approval ";
/// Bytes of the HMAC tag in a marker (128 bits, as hex).
const TAG_BYTES: usize = 16;
/// A saved pause holds a conversation; one larger than this is not paused (nor read back).
const MAX_PAUSE_BYTES: u64 = 64 << 20;
/// What the tag covers besides the saved pause, so it means nothing anywhere else.
const TAG_CONTEXT: &[u8] = b"toolpilot pause v1\0";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Paused runs on disk, one JSON file each, and the newest pause of each conversation.
pub struct PauseStore {
    dir: PathBuf,
    key_file: PathBuf,
    ttl: Duration,
    /// Loaded (or made) on first use, so servers that never pause never make one.
    key: OnceLock<Result<hmac::Key, String>>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Identifies a conversation by the messages a client sent: a SHA-256 over each message's
/// role, text, `tool_call_id` and the ids and names of its tool calls, in order. System and
/// developer messages are left out (clients rebuild them per request).
pub fn conversation_id(messages: &[Value]) -> String {
    let mut h = ring::digest::Context::new(&ring::digest::SHA256);
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        if matches!(role, "system" | "developer") {
            continue;
        }
        let calls: Vec<Value> = m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| json!([c.get("id"), c.pointer("/function/name")]))
            .collect();
        let item = json!([
            role,
            content_text(m.get("content"), " "),
            m.get("tool_call_id"),
            calls
        ]);
        h.update(item.to_string().as_bytes());
        h.update(b"\n");
    }
    hex(h.finish().as_ref())
}

/// The key that signs pauses: 32 random bytes in `path` (mode 0600), made once; a file of
/// another size is replaced (pauses signed with it can then no longer be resumed).
fn load_or_make_key(path: &Path) -> Result<hmac::Key, String> {
    match bounded::read_file(path, 64, Links::Refuse) {
        Ok(bytes) if bytes.len() == 32 => return Ok(hmac::Key::new(hmac::HMAC_SHA256, &bytes)),
        Ok(_) => {
            tracing::warn!(file = %path.display(), "the pause key is damaged; making a new one")
        }
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    }
    let mut bytes = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| "the system's random source failed".to_string())?;
    crate::private_file::write(path, &bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(hmac::Key::new(hmac::HMAC_SHA256, &bytes))
}

/// Shows a text with the characters that hide or reorder text made visible (`⟨U+202E⟩`):
/// control characters other than newline and tab, bidirectional controls, zero-width and
/// other invisible format characters.
fn visible(s: &str) -> String {
    let hidden = |c: char| {
        (c.is_control() && c != '\n' && c != '\t')
            || matches!(c,
                '\u{00AD}' | '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FE00}'..='\u{FE0F}'
                | '\u{FEFF}' | '\u{E0000}'..='\u{E007F}')
    };
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if hidden(c) {
            out.push_str(&format!("⟨U+{:04X}⟩", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// The longest run of backticks in `s`.
fn longest_backtick_run(s: &str) -> usize {
    s.split(|c| c != '`').map(str::len).max().unwrap_or(0)
}

/// `s` as inline code if it fits on one line and keeps its spaces there, else `None`.
fn code_span(s: &str) -> Option<String> {
    if s.is_empty() || s.contains('\n') || s.starts_with(' ') || s.ends_with(' ') {
        return None;
    }
    let fence = "`".repeat(longest_backtick_run(s) + 1);
    let pad = if s.starts_with('`') || s.ends_with('`') {
        " "
    } else {
        ""
    };
    Some(format!("{fence}{pad}{s}{pad}{fence}"))
}

/// `s` as a fenced code block at the top level (its content is shown as it is, whatever it
/// contains: the fence is longer than any run of backticks in it).
fn code_block(s: &str) -> String {
    let fence = "`".repeat(longest_backtick_run(s).max(2) + 1);
    format!("{fence}\n{s}\n{fence}")
}

/// The arguments that name what a call acts on: shown first and in full.
const TARGET_ARGUMENTS: &[&str] = &[
    "command",
    "filepath",
    "path",
    "file_path",
    "dirPath",
    "dir_path",
    "directory_path",
    "url",
];

/// One waiting call, for the question: the tool, the arguments that name what it acts on in
/// full (a command, a path, a URL), the others previewed, and why it needs approval.
fn describe(a: &Ask) -> String {
    let reason = visible(&a.reason).replace('\n', " ");
    let Ok(Value::Object(mut args)) = serde_json::from_str::<Value>(&a.arguments) else {
        let raw = visible(&crate::text::preview(&a.arguments, 300));
        let shown = code_span(&raw).unwrap_or_else(|| format!("\n\n{}\n", code_block(&raw)));
        return format!("- `{}` {shown} ({reason})\n", a.tool);
    };
    let mut inline = Vec::new();
    let mut blocks = Vec::new();
    for key in TARGET_ARGUMENTS {
        let Some(v) = args.remove(*key) else {
            continue;
        };
        let text = match &v {
            Value::String(s) => visible(s),
            other => other.to_string(),
        };
        match code_span(&text) {
            Some(span) => inline.push(format!("{key} {span}")),
            None => blocks.push(format!(
                "its {key} (between the lines of backticks):\n\n{}",
                code_block(&text)
            )),
        }
    }
    if !args.is_empty() {
        let rest = Value::Object(args).to_string();
        let rest = visible(&crate::text::preview(&rest, 300));
        if let Some(span) = code_span(&rest) {
            inline.push(format!("other arguments {span}"));
        }
    }
    let mut out = format!("- `{}`", a.tool);
    if !inline.is_empty() {
        out.push(' ');
        out.push_str(&inline.join(", "));
    }
    out.push_str(&format!(" ({reason})\n"));
    for b in blocks {
        out.push_str(&format!("\n{b}\n\n"));
    }
    out
}

impl PauseStore {
    pub fn new(state_dir: &Path, ttl: Duration) -> PauseStore {
        PauseStore {
            dir: state_dir.join("paused"),
            key_file: state_dir.join("pause.key"),
            ttl,
            key: OnceLock::new(),
        }
    }

    fn key(&self) -> Result<&hmac::Key, String> {
        self.key
            .get_or_init(|| load_or_make_key(&self.key_file))
            .as_ref()
            .map_err(|e| format!("the key that signs approval requests is unusable: {e}"))
    }

    fn path(&self, id: &str) -> Option<PathBuf> {
        // Ids are ours (`pause-` + hex); anything else never names a file.
        let ok = id.starts_with("pause-")
            && id.len() <= 64
            && id[6..].chars().all(|c| c.is_ascii_alphanumeric());
        ok.then(|| self.dir.join(format!("{id}.json")))
    }

    /// The file that names the newest pause of a conversation.
    fn latest_path(&self, conversation: &str) -> Option<PathBuf> {
        let ok = !conversation.is_empty() && conversation.chars().all(|c| c.is_ascii_hexdigit());
        ok.then(|| self.dir.join("latest").join(conversation))
    }

    fn latest(&self, conversation: &str) -> Option<String> {
        let bytes = bounded::read_file(&self.latest_path(conversation)?, 64, Links::Refuse).ok()?;
        Some(String::from_utf8_lossy(&bytes).trim().to_string())
    }

    /// The tag of a saved pause (its exact bytes, under its id).
    fn tag(&self, id: &str, bytes: &[u8]) -> Result<hmac::Tag, String> {
        let mut ctx = hmac::Context::with_key(self.key()?);
        ctx.update(TAG_CONTEXT);
        ctx.update(id.as_bytes());
        ctx.update(b"\0");
        ctx.update(bytes);
        Ok(ctx.sign())
    }

    /// Saves a paused run, as the newest of its conversation (an older pause of the same
    /// conversation is dropped); returns it with its id, expiry and question set, and the text
    /// that answers the client: the question, then the marker that carries the tag.
    pub fn save(&self, mut p: Paused) -> Result<(Paused, String), String> {
        p.id = format!("pause-{}{:08x}", p.run_id, fastrand::u32(..));
        p.created_at = now();
        p.expires_at = p.created_at + self.ttl.as_secs();
        p.question = Self::question(&p);
        let bytes = serde_json::to_vec(&p).map_err(|e| e.to_string())?;
        if bytes.len() as u64 > MAX_PAUSE_BYTES {
            return Err(format!(
                "the conversation is too large to pause ({} bytes; at most {MAX_PAUSE_BYTES})",
                bytes.len()
            ));
        }
        let tag = self.tag(&p.id, &bytes)?;
        let path = self.path(&p.id).ok_or("bad pause id")?;
        let latest = self
            .latest_path(&p.conversation)
            .ok_or("bad conversation id")?;
        crate::private_file::write(&path, &bytes).map_err(|e| e.to_string())?;
        if let Some(old) = self.latest(&p.conversation).and_then(|id| self.path(&id)) {
            let _ = std::fs::remove_file(old);
        }
        crate::private_file::write(&latest, p.id.as_bytes()).map_err(|e| e.to_string())?;
        let text = format!(
            "{}\n\n({MARKER}{}.{})",
            p.question,
            p.id,
            hex(&tag.as_ref()[..TAG_BYTES])
        );
        Ok((p, text))
    }

    /// The question: what waits (the command, path or URL of each call in full, before any
    /// other argument) and how to reply. The marker is added by [`PauseStore::save`].
    pub fn question(p: &Paused) -> String {
        let mut s = String::from("toolpilot needs your approval before it continues:\n\n");
        for a in &p.asks {
            s.push_str(&describe(a));
        }
        let always = if p.asks.iter().all(|a| a.rules.is_empty()) {
            // rules_for found no rule exactly as narrow as the call.
            "**always** to run it (no rule can allow exactly this, so nothing more is allowed)"
        } else {
            "**always** to run it and allow such calls from now on"
        };
        s.push_str(&format!(
            "\nReply **approve** to run {}, {always}, or **deny** (optionally with a reason, \
             e.g. `deny: not on main`). This request expires in {} minutes.",
            if p.asks.len() == 1 { "it" } else { "them" },
            (p.expires_at - p.created_at).div_ceil(60),
        ));
        s
    }

    /// The paused run a request answers, and the answer: the last message is the user's and
    /// the assistant message before it carries a pause's question and marker. The pause is
    /// removed (it is resumed once). `Err` explains a pause that cannot be resumed: unknown,
    /// expired, a marker that does not verify, a question changed or taken from elsewhere.
    pub fn take_for(&self, messages: &[Value]) -> Option<Result<(Paused, Reply), String>> {
        let last = messages.last()?;
        if last.get("role").and_then(Value::as_str) != Some("user") {
            return None;
        }
        let at = messages[..messages.len() - 1]
            .iter()
            .rposition(|m| m.get("role").and_then(Value::as_str) != Some("user"))?;
        if messages[at].get("role").and_then(Value::as_str) != Some("assistant") {
            return None;
        }
        let text = content_text(messages[at].get("content"), " ");
        let found = text.rfind(MARKER)?;
        let token: String = text[found + MARKER.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
            .collect();
        let (id, tag) = token.split_once('.').unwrap_or((&token, ""));
        let path = self.path(id)?;
        Some(
            self.check(id, tag, &path, &text, &messages[..at])
                .map(|p| (p, parse_reply(&content_text(last.get("content"), " ")))),
        )
    }

    fn check(
        &self,
        id: &str,
        tag: &str,
        path: &Path,
        text: &str,
        history: &[Value],
    ) -> Result<Paused, String> {
        let bytes = match bounded::read_file(path, MAX_PAUSE_BYTES, Links::Refuse) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => {
                return Err(format!(
                    "the approval request {id} is no longer open (it was answered, replaced by a \
                     newer question, or has expired and been removed)"
                ));
            }
            Err(e) => {
                return Err(format!(
                    "the saved approval request {id} cannot be read: {e}"
                ));
            }
        };
        let expected = self.tag(id, &bytes)?;
        let given: Vec<u8> = (0..tag.len() / 2)
            .filter_map(|i| u8::from_str_radix(tag.get(2 * i..2 * i + 2)?, 16).ok())
            .collect();
        let same = given.len() == TAG_BYTES
            && tag.len() == 2 * TAG_BYTES
            && given
                .iter()
                .zip(&expected.as_ref()[..TAG_BYTES])
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if !same {
            return Err(format!(
                "the approval marker for {id} does not match the question toolpilot asked (it \
                 was changed, copied from elsewhere or made up)"
            ));
        }
        let p: Paused = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the saved approval request {id} is unreadable: {e}"))?;
        if p.id != id {
            return Err(format!(
                "the saved approval request {id} is not the one asked"
            ));
        }
        if now() > p.expires_at {
            let _ = std::fs::remove_file(path);
            return Err(format!("the approval request {id} has expired"));
        }
        if p.conversation != conversation_id(history) {
            return Err(format!(
                "the approval request {id} was asked at another point of the conversation: only \
                 the newest question, answered right after it, can be approved"
            ));
        }
        if self.latest(&p.conversation).as_deref() != Some(id) {
            let _ = std::fs::remove_file(path);
            return Err(format!(
                "the approval request {id} was replaced by a newer question in this \
                 conversation; only the newest one can be answered"
            ));
        }
        // The request is used up from here on, whatever the answer.
        let _ = std::fs::remove_file(path);
        if let Some(latest) = self.latest_path(&p.conversation) {
            let _ = std::fs::remove_file(latest);
        }
        if !text.contains(&p.question) {
            return Err(format!(
                "the message that carries the approval request {id} does not show the question \
                 toolpilot asked word for word (it was changed)"
            ));
        }
        Ok(p)
    }

    /// Removes expired pauses (at start-up), and the newest-pause entries they leave behind.
    pub fn sweep(&self) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            for e in entries.flatten() {
                let path = e.path();
                if path.extension().is_none_or(|x| x != "json") {
                    continue;
                }
                let expired = bounded::read_file(&path, MAX_PAUSE_BYTES, Links::Refuse)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Paused>(&b).ok())
                    .is_none_or(|p| now() > p.expires_at);
                if expired {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir(self.dir.join("latest")) {
            for e in entries.flatten() {
                let open = bounded::read_file(&e.path(), 64, Links::Refuse)
                    .ok()
                    .and_then(|b| self.path(String::from_utf8_lossy(&b).trim()))
                    .is_some_and(|p| p.exists());
                if !open {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

/// Reads the user's answer: approve / always / deny [reason], in the usual words.
/// Whether a request may answer a paused run (its last message is the user's, after an
/// assistant message that carries a pause marker): [`PauseStore::take_for`] has something to
/// look up on disk. Reads no file.
pub fn answers_a_pause(messages: &[Value]) -> bool {
    let Some((last, history)) = messages.split_last() else {
        return false;
    };
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return false;
    }
    history
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) != Some("user"))
        .is_some_and(|m| {
            m.get("role").and_then(Value::as_str) == Some("assistant")
                && content_text(m.get("content"), " ").contains(MARKER)
        })
}

pub fn parse_reply(text: &str) -> Reply {
    let t = text.trim();
    let lower = t.to_lowercase();
    let word: String = lower
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == ' ')
        .collect();
    let word = word.trim();
    match word {
        "approve" | "approved" | "yes" | "y" | "ok" | "okay" | "allow" | "go ahead" | "run it"
        | "do it" | "lgtm" => Reply::Approve { always: false },
        "always" | "always allow" | "approve always" | "allow always" => {
            Reply::Approve { always: true }
        }
        _ if [
            "deny", "denied", "no", "n", "reject", "stop", "don't", "dont",
        ]
        .iter()
        .any(|w| word == *w || word.starts_with(&format!("{w} "))) =>
        {
            let first = word.split(' ').next().unwrap_or("");
            let reason = t
                .get(first.len()..)
                .unwrap_or("")
                .trim_start_matches([':', ',', '.', '-', '!', ' '])
                .trim();
            Reply::Deny {
                reason: (!reason.is_empty()).then(|| reason.to_string()),
            }
        }
        _ => Reply::Other(t.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_describe(tool: &str, arguments: Value, expected: &str) {
        let a = Ask {
            call_id: "c".into(),
            tool: tool.into(),
            arguments: arguments.to_string(),
            reason: "needs approval".into(),
            rules: Vec::new(),
        };
        pretty_assert(&describe(&a), expected);
    }

    #[track_caller]
    fn pretty_assert(got: &str, expected: &str) {
        assert_eq!(
            got, expected,
            "\n--- got ---\n{got}\n--- expected ---\n{expected}"
        );
    }

    #[test]
    fn the_question_shows_what_a_call_acts_on_first_and_whole() {
        check_describe(
            "run_terminal_command",
            json!({"waitForCompletion": true, "command": "git push"}),
            "- `run_terminal_command` command `git push`, other arguments \
             `{\"waitForCompletion\":true}` (needs approval)\n",
        );
        // Backticks in a value: a longer fence, padded.
        check_describe(
            "run_terminal_command",
            json!({"command": "echo `id`"}),
            "- `run_terminal_command` command `` echo `id` `` (needs approval)\n",
        );
        // Several lines, or spaces at an end: a block of its own, shown as it is.
        check_describe(
            "run_terminal_command",
            json!({"command": "ls\nrm -rf ~ # ```"}),
            "- `run_terminal_command` (needs approval)\n\nits command (between the lines of \
             backticks):\n\n````\nls\nrm -rf ~ # ```\n````\n\n",
        );
        // Characters that hide or reorder text are made visible.
        check_describe(
            "edit_existing_file",
            json!({"filepath": "src/\u{202E}sr.exe", "changes": "x\u{200B}"}),
            "- `edit_existing_file` filepath `src/⟨U+202E⟩sr.exe`, other arguments \
             `{\"changes\":\"x⟨U+200B⟩\"}` (needs approval)\n",
        );
        // Arguments that are not an object: previewed whole.
        check_describe(
            "ls",
            json!("not an object"),
            "- `ls` `\"not an object\"` (needs approval)\n",
        );
    }

    #[test]
    fn conversations_are_told_apart_by_what_was_said_not_by_system_messages() {
        let a = [
            json!({"role": "system", "content": "v1"}),
            json!({"role": "user", "content": "hi"}),
        ];
        let b = [
            json!({"role": "system", "content": "v2"}),
            json!({"role": "user", "content": "hi"}),
        ];
        let c = [json!({"role": "user", "content": "hi!"})];
        let d = [json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})];
        assert_eq!(conversation_id(&a), conversation_id(&b));
        assert_eq!(conversation_id(&a), conversation_id(&d));
        assert_ne!(conversation_id(&a), conversation_id(&c));
        assert_ne!(conversation_id(&a), conversation_id(&[]));
    }

    #[test]
    fn replies() {
        assert_eq!(parse_reply("approve"), Reply::Approve { always: false });
        assert_eq!(parse_reply("  Yes! "), Reply::Approve { always: false });
        assert_eq!(parse_reply("always"), Reply::Approve { always: true });
        assert_eq!(parse_reply("deny"), Reply::Deny { reason: None });
        assert_eq!(
            parse_reply("deny: not on main"),
            Reply::Deny {
                reason: Some("not on main".into())
            }
        );
        assert_eq!(
            parse_reply("No, use the staging bucket"),
            Reply::Deny {
                reason: Some("use the staging bucket".into())
            }
        );
        assert_eq!(
            parse_reply("actually, list the files first"),
            Reply::Other("actually, list the files first".into())
        );
        assert_eq!(
            parse_reply("nothing like that"),
            Reply::Other("nothing like that".into())
        );
    }
}
