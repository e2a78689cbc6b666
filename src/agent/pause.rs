//! In-band approvals (`approvals.mode = "pause"`): a run that reaches a call needing approval
//! stops before running its round, answers with what waits and how to reply, and saves where
//! it stopped in the state directory (so it survives a restart). The next request whose
//! previous assistant message carries the pause's marker and whose last user message is the
//! answer resumes it exactly there.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::openai::{ToolCall, Usage};

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

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Paused runs on disk, one JSON file each.
pub struct PauseStore {
    dir: PathBuf,
    ttl: Duration,
}

fn text_of(msg: &Value) -> String {
    match msg.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

impl PauseStore {
    pub fn new(state_dir: &Path, ttl: Duration) -> PauseStore {
        PauseStore {
            dir: state_dir.join("paused"),
            ttl,
        }
    }

    fn path(&self, id: &str) -> Option<PathBuf> {
        // Ids are ours (`pause-` + hex); anything else never names a file.
        let ok = id.starts_with("pause-")
            && id.len() <= 64
            && id[6..].chars().all(|c| c.is_ascii_alphanumeric());
        ok.then(|| self.dir.join(format!("{id}.json")))
    }

    /// Saves a paused run; returns it with its id and expiry set.
    pub fn save(&self, mut p: Paused) -> std::io::Result<Paused> {
        p.id = format!("pause-{}{:08x}", p.run_id, fastrand::u32(..));
        p.created_at = now();
        p.expires_at = p.created_at + self.ttl.as_secs();
        std::fs::create_dir_all(&self.dir)?;
        let path = self
            .path(&p.id)
            .ok_or_else(|| std::io::Error::other("bad pause id"))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&p)?)?;
        std::fs::rename(&tmp, &path)?;
        Ok(p)
    }

    /// The text that answers the client: what waits and how to reply. Ends with the marker the
    /// next request is matched by.
    pub fn question(p: &Paused) -> String {
        let mut s = String::from("toolpilot needs your approval before it continues:\n\n");
        for a in &p.asks {
            s.push_str(&format!(
                "- `{}` {} ({})\n",
                a.tool,
                crate::tools::args::preview(&a.arguments, 300),
                a.reason
            ));
        }
        s.push_str(&format!(
            "\nReply **approve** to run {}, **always** to run it and allow such calls from now \
             on, or **deny** (optionally with a reason, e.g. `deny: not on main`). This request \
             expires in {} minutes.\n\n({MARKER}{})",
            if p.asks.len() == 1 { "it" } else { "them" },
            (p.expires_at - p.created_at).div_ceil(60),
            p.id
        ));
        s
    }

    /// The paused run a request answers, and the answer: the last message is the user's and
    /// the assistant message before it carries a pause marker. The pause is removed (it is
    /// resumed once). `Err` explains a pause that cannot be resumed (expired, unknown).
    pub fn take_for(&self, messages: &[Value]) -> Option<Result<(Paused, Reply), String>> {
        let last = messages.last()?;
        if last.get("role").and_then(Value::as_str) != Some("user") {
            return None;
        }
        let prev = messages[..messages.len() - 1]
            .iter()
            .rev()
            .find(|m| m.get("role").and_then(Value::as_str) != Some("user"))?;
        if prev.get("role").and_then(Value::as_str) != Some("assistant") {
            return None;
        }
        let text = text_of(prev);
        let at = text.rfind(MARKER)?;
        let id: String = text[at + MARKER.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let path = self.path(&id)?;
        let loaded = std::fs::read(&path)
            .map_err(|_| {
                format!(
                    "the approval request {id} is no longer open (it was answered, or has \
                     expired and been removed)"
                )
            })
            .and_then(|b| {
                serde_json::from_slice::<Paused>(&b)
                    .map_err(|e| format!("the saved approval request {id} is unreadable: {e}"))
            });
        let _ = std::fs::remove_file(&path);
        Some(loaded.and_then(|p| {
            if now() > p.expires_at {
                Err(format!("the approval request {id} has expired"))
            } else {
                Ok((p, parse_reply(&text_of(last))))
            }
        }))
    }

    /// Removes expired pauses (at start-up).
    pub fn sweep(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for e in entries.flatten() {
            let expired = std::fs::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<Paused>(&b).ok())
                .is_none_or(|p| now() > p.expires_at);
            if expired {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Reads the user's answer: approve / always / deny [reason], in the usual words.
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
