//! How a run resolves the calls the policy asks about: `RunApprover` (`--yes`, the configured
//! mode, an approval waited for over HTTP) and `Preset` (the user's in-band answer to a
//! paused run).

use std::future::Future;
use std::pin::Pin;

use serde_json::json;
use tokio::sync::mpsc;

use super::pause::Reply;
use super::{Engine, RunEvent};
use crate::approvals::Verdict;
use crate::config::ApprovalMode;
use crate::openai::ToolCall;
use crate::policy::Target;
use crate::tools::registry::{
    Approval, Approver, Ask, Grant, NoApprover, Status, person_only_refusal,
};

/// The user's in-band answer, applied to the calls of a resumed round.
pub(super) struct Preset(pub(super) Reply);

impl Approver for Preset {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        _: &'a Ask,
        _: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        let name = &call.name;
        let a = match &self.0 {
            Reply::Approve { .. } => {
                Approval::Approved("the user, in the chat".into(), Grant::Person)
            }
            Reply::Deny { reason } => denied(name, reason.as_deref()),
            Reply::Other(_) => Approval::Refused(
                format!(
                    "{name} was not run: the user did not approve it and wrote something else \
                     instead (their message follows). Do what they ask now."
                ),
                Status::Denied,
            ),
        };
        Box::pin(std::future::ready(a))
    }
}

/// The user said no (`why`, when they said why).
fn denied(name: &str, why: Option<&str>) -> Approval {
    Approval::Refused(
        format!(
            "{name} was not run: the user denied it{}. Do not retry it; do without it, or ask \
             the user how to proceed.",
            why.map(|w| format!(" (\"{w}\")")).unwrap_or_default()
        ),
        Status::Denied,
    )
}

/// How one run resolves calls the policy asks about: `--yes`, else the configured mode, and
/// whether anyone can answer at all.
pub(super) struct RunApprover<'r> {
    pub(super) engine: &'r Engine,
    pub(super) run_id: &'r str,
    pub(super) tx: &'r mpsc::Sender<RunEvent>,
    pub(super) reachable: bool,
    /// Someone sees what waits (`approvals.mode = "auto"` waits only then).
    pub(super) seen: bool,
}

impl Approver for RunApprover<'_> {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        ask: &'a Ask,
        targets: &'a [Target],
    ) -> Pin<Box<dyn Future<Output = Approval> + Send + 'a>> {
        Box::pin(async move {
            let cfg = &self.engine.config;
            let name = &call.name;
            let reason = ask.reason.as_str();
            if cfg.agent.approve_asks && !ask.person_only {
                return Approval::Approved("--yes".into(), Grant::Yes);
            }
            // `auto` with nobody looking: the run pauses before such calls; one that still
            // gets here (a round that also handed calls to the client) is refused, never
            // left waiting where nobody sees it.
            let no_wait = match cfg.approvals.mode {
                ApprovalMode::Deny | ApprovalMode::Pause => true,
                ApprovalMode::Auto => !self.seen,
                ApprovalMode::Wait => false,
            };
            let nobody = no_wait || !self.reachable;
            if ask.person_only && nobody {
                return person_only_refusal(call, reason);
            }
            if no_wait {
                // (Pause stops runs before such calls; one that still gets here is refused.)
                return NoApprover.approve(call, ask, targets).await;
            }
            if !self.reachable {
                return Approval::Refused(
                    format!(
                        "{name} was not run: it needs the user's approval ({reason}), and nobody \
                         can approve it here (`toolpilot run` has no approval API; the user can \
                         rerun with --yes or add an allow rule). Continue without it, or tell \
                         the user what you wanted to do."
                    ),
                    Status::NeedsApproval,
                );
            }
            let timeout = cfg.approvals.timeout;
            let ticket = self.engine.approvals.ask(
                self.run_id,
                name,
                &call.arguments,
                reason,
                crate::approvals::rules_for(name, targets),
                timeout,
            );
            let id = ticket.info.id.clone();
            tracing::info!(tool = %name, approval = %id, "waiting for approval");
            self.engine.runs.event(
                self.run_id,
                "approval",
                json!({"approval": id, "tool": name, "outcome": "waiting", "reason": reason}),
            );
            if self
                .tx
                .send(RunEvent::ApprovalPending(ticket.info.clone()))
                .await
                .is_err()
            {
                return Approval::Refused("the client went away".into(), Status::Error);
            }
            let (outcome, approval) = match ticket.wait(timeout).await {
                Some(Verdict::Approve { always }) => (
                    "approved",
                    Approval::Approved(
                        if always {
                            "the user (always)".into()
                        } else {
                            "the user".into()
                        },
                        Grant::Person,
                    ),
                ),
                Some(Verdict::Deny { reason: why }) => ("denied", denied(name, why.as_deref())),
                None => (
                    "timed out",
                    Approval::Refused(
                        format!(
                            "{name} was not run: it needs the user's approval ({reason}), and \
                             nobody approved it within {} s (approvals.timeout_secs). Continue \
                             without it, or tell the user what you wanted to do so they can \
                             allow it.",
                            timeout.as_secs_f64()
                        ),
                        Status::NeedsApproval,
                    ),
                ),
            };
            tracing::info!(tool = %name, approval = %id, outcome, "approval answered");
            self.engine.runs.event(
                self.run_id,
                "approval",
                json!({"approval": id, "tool": name, "outcome": outcome}),
            );
            let _ = self
                .tx
                .send(RunEvent::ApprovalResolved {
                    id,
                    tool: name.clone(),
                    outcome,
                })
                .await;
            approval
        })
    }
}
