//! Tool calls waiting for a person's approval, and the allow rules that "always allow" writes.
//!
//! A run whose call needs approval registers it here ([`Approvals::ask`]) and waits on the
//! returned [`Ticket`]; `GET /v1/approvals` lists what waits and `POST /v1/approvals/{id}`
//! answers it ([`Approvals::answer`]). A ticket that is dropped (the run was cancelled, or its
//! wait timed out) removes its entry, so the list only ever shows calls someone still waits on.
//!
//! Rules written by "always allow" are kept per workspace in the state directory
//! (`approved-rules.toml`, the same `allow = [...]` syntax as the config) and loaded on start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::tools::Target;

/// What someone answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approve {
        /// Also write [`PendingInfo::rules`] so that such calls no longer ask.
        always: bool,
    },
    Deny {
        /// Passed on to the model.
        reason: Option<String>,
    },
}

/// A call waiting for approval, as the API and the console show it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingInfo {
    pub id: String,
    pub run_id: String,
    pub tool: String,
    /// The call's arguments (JSON text, as the model wrote them).
    pub arguments: String,
    /// Why it needs approval (the rule or default that asked).
    pub reason: String,
    /// The allow rules "always" would add.
    pub rules: Vec<String>,
    /// Unix seconds.
    pub created_at: u64,
    pub expires_at: u64,
}

/// Why an answer was not taken.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "no tool call is waiting for approval under the id {0:?} (it was answered, timed out, or its run ended); GET /v1/approvals lists the waiting ones"
    )]
    NotFound(String),
    #[error("the approval was taken, but the rule could not be saved in {path}: {error}")]
    SaveRule { path: String, error: String },
}

struct Pending {
    info: PendingInfo,
    answer: oneshot::Sender<Verdict>,
}

/// The server's waiting calls.
pub struct Approvals {
    pending: Mutex<BTreeMap<String, Pending>>,
    rules_file: PathBuf,
}

/// A registered wait; dropping it withdraws the call from the list.
pub struct Ticket {
    pub info: PendingInfo,
    approvals: Arc<Approvals>,
    answer: Option<oneshot::Receiver<Verdict>>,
}

impl Ticket {
    /// The answer, or `None` when nobody answered within `timeout`.
    pub async fn wait(mut self, timeout: Duration) -> Option<Verdict> {
        let rx = self.answer.take()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut p) = self.approvals.pending.lock() {
            p.remove(&self.info.id);
        }
    }
}

#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    allow: Vec<String>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Approvals {
    /// `state_dir` is the workspace's folder in the state directory.
    pub fn new(state_dir: &Path) -> Approvals {
        Approvals {
            pending: Mutex::default(),
            rules_file: state_dir.join("approved-rules.toml"),
        }
    }

    /// The file "always allow" writes to.
    pub fn rules_file(&self) -> &Path {
        &self.rules_file
    }

    /// The rules saved by earlier "always allow" answers.
    pub fn saved_rules(&self) -> Result<Vec<String>, String> {
        match std::fs::read_to_string(&self.rules_file) {
            Ok(text) => toml::from_str::<RulesFile>(&text)
                .map(|f| f.allow)
                .map_err(|e| format!("{} is not valid: {e}", self.rules_file.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(format!("cannot read {}: {e}", self.rules_file.display())),
        }
    }

    /// Appends rules to the saved ones (atomically: temporary file, then rename).
    pub fn save_rules(&self, rules: &[String]) -> Result<(), String> {
        let mut all = self.saved_rules()?;
        for r in rules {
            if !all.contains(r) {
                all.push(r.clone());
            }
        }
        let text = format!(
            "# Allow rules added by \"always allow\" answers to approvals (same syntax as\n\
             # policy.allow in the config). Delete a line to take it back.\n{}",
            toml::to_string(&RulesFile { allow: all }).map_err(|e| e.to_string())?
        );
        let dir = self.rules_file.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let tmp = self.rules_file.with_extension("toml.tmp");
        std::fs::write(&tmp, text).map_err(|e| e.to_string())?;
        std::fs::rename(&tmp, &self.rules_file).map_err(|e| e.to_string())
    }

    /// Registers a call that waits for approval.
    pub fn ask(
        self: &Arc<Self>,
        run_id: &str,
        tool: &str,
        arguments: &str,
        reason: &str,
        rules: Vec<String>,
        timeout: Duration,
    ) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let created_at = now();
        let info = PendingInfo {
            id: format!("ap-{}{:08x}", run_id, fastrand::u32(..)),
            run_id: run_id.to_string(),
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            reason: reason.to_string(),
            rules,
            created_at,
            expires_at: created_at + timeout.as_secs(),
        };
        if let Ok(mut p) = self.pending.lock() {
            p.insert(
                info.id.clone(),
                Pending {
                    info: info.clone(),
                    answer: tx,
                },
            );
        }
        Ticket {
            info,
            approvals: Arc::clone(self),
            answer: Some(rx),
        }
    }

    /// Every call waiting now, oldest first.
    pub fn list(&self) -> Vec<PendingInfo> {
        let Ok(p) = self.pending.lock() else {
            return Vec::new();
        };
        let mut v: Vec<PendingInfo> = p.values().map(|p| p.info.clone()).collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        v
    }

    /// Answers a waiting call. With "always", the rules are saved first, so that an approval
    /// whose rule cannot be saved is reported (the call still runs).
    pub fn answer(&self, id: &str, verdict: Verdict) -> Result<PendingInfo, AnswerError> {
        let pending = self
            .pending
            .lock()
            .ok()
            .and_then(|mut p| p.remove(id))
            .ok_or_else(|| AnswerError::NotFound(id.to_string()))?;
        let save = match verdict {
            Verdict::Approve { always: true } => self.save_rules(&pending.info.rules),
            _ => Ok(()),
        };
        // The run may have gone in the meantime; then nobody waits for the answer.
        let _ = pending.answer.send(verdict);
        save.map_err(|error| AnswerError::SaveRule {
            path: self.rules_file.display().to_string(),
            error,
        })?;
        Ok(pending.info)
    }
}

/// The allow rules that make calls like this one run without asking: the exact command of
/// each part of a command line, the exact path(s) of a file tool, the host of a URL, else the
/// whole tool.
pub fn rules_for(tool: &str, targets: &[Target]) -> Vec<String> {
    if let Some(Target::Command { line, .. }) = targets.first() {
        return match crate::policy::command::parse(line) {
            Ok(parts) => parts
                .iter()
                .map(|p| p.full_text())
                .filter(|t| !t.trim().is_empty())
                .map(|t| format!("run_terminal_command({})", globset::escape(&t)))
                .collect(),
            Err(_) => vec![format!("run_terminal_command({})", globset::escape(line))],
        };
    }
    let hosts: Vec<&str> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Url { host, .. } => Some(host.as_str()),
            _ => None,
        })
        .collect();
    if let Some(host) = hosts.first() {
        return vec![format!("{tool}(domain:{host})")];
    }
    let paths: Vec<String> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Path { path, .. } => Some(globset::escape(&path.rel().to_string_lossy())),
            _ => None,
        })
        .collect();
    match paths.len() {
        0 => vec![tool.to_string()],
        1 => vec![format!("{tool}({})", paths[0])],
        _ => vec![format!("{tool}({{{}}})", paths.join(","))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn always_allowing_a_fetch_saves_a_domain_rule_that_compiles() {
        for (url, host) in [
            ("https://docs.rs/serde", "docs.rs"),
            ("http://127.0.0.1:8080/x", "127.0.0.1"),
            ("http://[::1]:8080/x", "[::1]"),
        ] {
            let rules = rules_for(
                "fetch_url_content",
                &[Target::Url {
                    url: url.into(),
                    host: host.into(),
                }],
            );
            assert_eq!(rules, [format!("fetch_url_content(domain:{host})")]);
            let cfg = crate::config::PolicyConfig {
                approved: rules,
                ..Default::default()
            };
            assert!(crate::policy::Policy::new(&cfg).is_ok(), "{url}");
        }
    }
}
