//! `[approvals]`: what happens to a call that needs approval, and for how long.

use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, err, positive, secs};

/// What happens to a call whose policy is `ask` (unless `--yes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMode {
    /// `wait` when someone can see what waits (a stream whose progress channel the client
    /// shows, or someone following `/v1/approvals` or the console), else `pause`: a call never
    /// waits where nobody sees it.
    Auto,
    /// The run waits for an approval over HTTP (`/v1/approvals`) or in the console, up to
    /// `timeout`; then the call is denied and the model told why.
    Wait,
    /// The run stops before the call and answers with what waits and how to reply; the next
    /// message ("approve", "deny …") resumes it exactly there.
    Pause,
    /// The call is refused at once; the model is told it needs approval.
    Deny,
}

#[derive(Debug, Clone)]
pub struct ApprovalsConfig {
    pub mode: ApprovalMode,
    pub timeout: Duration,
    /// Hand calls that need approval to a client that declared the same tool.
    pub handoff: bool,
    /// How long, and how many bytes of, conversations handed to a client are kept to restore
    /// the rounds it did not see.
    pub handoff_max_age: Duration,
    pub handoff_max_bytes: usize,
    /// How long a paused run can be resumed.
    pub pause_expiry: Duration,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalsFile {
    pub(super) mode: Option<String>,
    pub(super) timeout_secs: Option<f64>,
    pub(super) handoff: Option<bool>,
    pub(super) handoff_max_age_secs: Option<f64>,
    pub(super) handoff_max_bytes: Option<usize>,
    pub(super) pause_expiry_secs: Option<f64>,
}

pub(super) fn resolve(ap: ApprovalsFile) -> Result<ApprovalsConfig, ConfigError> {
    Ok(ApprovalsConfig {
        mode: match ap.mode.as_deref() {
            None | Some("auto") => ApprovalMode::Auto,
            Some("wait") => ApprovalMode::Wait,
            Some("deny") => ApprovalMode::Deny,
            Some("pause") => ApprovalMode::Pause,
            Some(other) => {
                return Err(err(format!(
                    "approvals.mode: {other:?} is not one of \"auto\", \"wait\", \"pause\", \"deny\""
                )));
            }
        },
        timeout: secs("approvals.timeout_secs", ap.timeout_secs, 120.0)?,
        handoff: ap.handoff.unwrap_or(true),
        handoff_max_age: secs(
            "approvals.handoff_max_age_secs",
            ap.handoff_max_age_secs,
            3600.0,
        )?,
        handoff_max_bytes: positive(
            "approvals.handoff_max_bytes",
            ap.handoff_max_bytes,
            64 << 20,
        )?,
        pause_expiry: secs("approvals.pause_expiry_secs", ap.pause_expiry_secs, 3600.0)?,
    })
}
