//! `run_terminal_command`, and the two small tools for background jobs:
//! `check_background_job` and `stop_background_job`.
//!
//! A foreground command runs under the supervisor (sandboxed when the kernel allows), bounded
//! by the wall-clock and idle timeouts, with its output capped (head and tail kept, ANSI
//! removed); the result always says how it ended, with the exit code and duration. Around it,
//! the workspace is snapshotted so the run's checkpoint covers what the command changed, and
//! `.git/hooks` and `.git/config` are put back if the command changed them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::args::Args;
use super::{Invocation, Target, Tool, ToolEnv, ToolError};
use crate::checkpoint::tree::{BlobError, Shadow};
use crate::policy::{Level, reference_default};
use crate::terminal::exec::{self, Ended};
use crate::terminal::jobs::JobState;
use crate::terminal::{GitGuard, secs};

pub struct RunTerminalCommand;
pub struct CheckBackgroundJob;
pub struct StopBackgroundJob;

/// Most changed files listed in a result.
const MAX_LISTED: usize = 20;

impl Tool for RunTerminalCommand {
    fn name(&self) -> &'static str {
        "run_terminal_command"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/run_terminal_command.md")
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["command"],"properties":{
            "command":{"type":"string","description":"The command to run with sh -c in the workspace root"},
            "waitForCompletion":{"type":"boolean","description":"Wait for the command to finish (default true). false starts it as a background job (a server, a watcher) and returns at once with a job id"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn default_policy(&self) -> Level {
        reference_default(self.name())
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let command = args.string("command")?;
        let wait = args.opt_bool("waitForCompletion")?.unwrap_or(true);
        let targets = vec![Target::Command {
            line: command.clone(),
            sandboxed: env.terminal.sandboxed(),
        }];
        let env = env.clone();
        let job = Box::pin(async move {
            if wait {
                foreground(&env, &command).await
            } else {
                background(&env, &command).await
            }
        });
        Ok(Invocation { targets, job })
    }
}

/// Snapshots the workspace tree (off the async threads).
async fn snapshot(shadow: &Shadow) -> Result<String, String> {
    let s = shadow.clone();
    tokio::task::spawn_blocking(move || s.snapshot())
        .await
        .map_err(|e| e.to_string())?
}

/// Records what changed between two snapshots in the run's checkpoint; returns a summary.
fn record_changes(env: &ToolEnv, before: &str, after: &str) -> Result<Vec<String>, String> {
    let shadow = &env.shadow;
    let changes = shadow.changes(before, after)?;
    let mut listed = Vec::new();
    for c in &changes {
        let prior = match &c.before {
            Some((mode, id)) => match shadow.blob(id, crate::checkpoint::MAX_BLOB_BYTES) {
                Ok(bytes) => Some((bytes, *mode)),
                Err(e @ BlobError::TooLarge { .. }) => {
                    if !env.checkpoint.records(&c.path) {
                        // Not kept: undo leaves this file alone (recording "did not exist"
                        // would make undo delete it).
                        listed.push(format!("modified {} (not recorded for undo: {e})", c.path));
                        continue;
                    }
                    // Already recorded by this run: its first state is kept; only the state
                    // it is left in is noted.
                    None
                }
                Err(BlobError::Git(e)) => return Err(e),
            },
            None => None,
        };
        env.checkpoint
            .tree_change(
                &c.path,
                prior.as_ref().map(|(b, m)| (b.as_slice(), *m)),
                c.after.as_ref().map(|(_, id)| id.as_str()),
            )
            .map_err(|e| format!("cannot record the checkpoint: {e}"))?;
        let mark = match (&c.before, &c.after) {
            (None, _) => "added",
            (_, None) => "deleted",
            _ => "modified",
        };
        listed.push(format!("{mark} {}", c.path));
    }
    Ok(listed)
}

fn changes_note(listed: &[String], run_id: &str) -> String {
    if listed.is_empty() {
        return String::new();
    }
    let shown: Vec<&str> = listed.iter().take(MAX_LISTED).map(String::as_str).collect();
    let more = if listed.len() > MAX_LISTED {
        format!(" and {} more", listed.len() - MAX_LISTED)
    } else {
        String::new()
    };
    format!(
        "\n[Files changed by the command: {}{more}. They are recorded in run {run_id} and can be undone.]",
        shown.join(", ")
    )
}

/// Common prompts of programs waiting for an answer.
fn looks_like_prompt(output: &str) -> Option<String> {
    let last = output.trim_end().lines().last()?.trim();
    let lower = last.to_ascii_lowercase();
    let prompt = lower.ends_with('?')
        || lower.ends_with(':')
            && (lower.contains("password")
                || lower.contains("passphrase")
                || lower.contains("username")
                || lower.contains("enter"))
        || [
            "[y/n]",
            "(y/n)",
            "[y/n]:",
            "yes/no",
            "[yes/no]",
            "press enter",
            "press any key",
            "continue?",
        ]
        .iter()
        .any(|p| lower.contains(p));
    prompt.then(|| last.to_string())
}

async fn foreground(env: &ToolEnv, command: &str) -> Result<String, ToolError> {
    let term = &env.terminal;
    let root = env.workspace.root().to_path_buf();
    let before = if term.config.checkpoint {
        Some(snapshot(&env.shadow).await)
    } else {
        None
    };
    let guard = GitGuard::capture(&root);
    let tmp = term
        .temp_dir()
        .map_err(|e| ToolError::Failed(format!("cannot create a temporary folder: {e}")))?;
    let req = term.request(command, &root, &tmp);
    let mut running = exec::start(&req).map_err(|e| {
        ToolError::Failed(format!(
            "cannot start the command ({e}); is {} executable?",
            req.helper.display()
        ))
    })?;
    let ended = running
        .wait(req.timeout, req.idle_timeout, &env.cancel)
        .await;
    let elapsed = running.started.elapsed();
    let output = running
        .capture
        .lock()
        .map(|c| c.render())
        .unwrap_or_default();
    drop(running);
    let _ = std::fs::remove_dir_all(&tmp);
    let restored = guard.restore(&root);
    if ended == Ended::Cancelled {
        return Err(ToolError::Failed("cancelled".into()));
    }
    let mut out = format!("$ {command}\n");
    out.push_str(&output);
    if !output.is_empty() && !output.ends_with('\n') {
        out.push('\n');
    }
    let status = match ended {
        Ended::Exited(0) => format!("Command completed with exit code 0 in {}", secs(elapsed)),
        Ended::Exited(126) if output.contains("toolpilot sandbox:") => {
            "Command was not run: the sandbox could not be set up (see above)".to_string()
        }
        Ended::Exited(c) => format!("Command failed with exit code {c} in {}", secs(elapsed)),
        Ended::TimedOut => format!(
            "Command was stopped after the {} time limit (terminal.timeout_secs); the output above is partial. For servers and watchers use waitForCompletion: false",
            secs(req.timeout)
        ),
        Ended::Idle => format!(
            "Command was stopped: no output for {} (terminal.idle_timeout_secs); the output above is partial",
            secs(req.idle_timeout)
        ),
        Ended::Cancelled | Ended::Stopped => "Command was stopped".to_string(),
    };
    out.push_str(&format!("[Status: {status} ({})]", term.describe()));
    if !matches!(ended, Ended::Exited(0)) {
        if let Some(p) = looks_like_prompt(&output) {
            out.push_str(&format!(
                "\n[The command seems to have asked for input (\"{p}\"). Commands run without a \
                 terminal and with empty input: pass the answer as an argument or a flag such as \
                 --yes, or set it in the environment.]"
            ));
        }
    }
    if !restored.is_empty() {
        tracing::warn!(files = ?restored, "a command changed git hooks or config; restored");
        out.push_str(&format!(
            "\n[The command changed {}; toolpilot restored {}: commands may not change git hooks \
             or git configuration.]",
            restored.join(", "),
            if restored.len() == 1 { "it" } else { "them" }
        ));
    }
    match before {
        Some(Ok(b)) => match snapshot(&env.shadow).await {
            Ok(a) => {
                let env2 = env.clone();
                let listed = tokio::task::spawn_blocking(move || record_changes(&env2, &b, &a))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r);
                match listed {
                    Ok(l) => out.push_str(&changes_note(&l, &env.run_id)),
                    Err(e) => out.push_str(&format!(
                        "\n[Changes of this command could not be recorded for undo: {e}]"
                    )),
                }
            }
            Err(e) => out.push_str(&format!(
                "\n[Changes of this command could not be recorded for undo: {e}]"
            )),
        },
        Some(Err(e)) => out.push_str(&format!(
            "\n[Changes of this command could not be recorded for undo: {e}]"
        )),
        None => {}
    }
    Ok(out)
}

async fn background(env: &ToolEnv, command: &str) -> Result<String, ToolError> {
    let term = Arc::clone(&env.terminal);
    term.jobs.check_room().map_err(ToolError::Failed)?;
    let root = env.workspace.root().to_path_buf();
    let before = if term.config.checkpoint {
        snapshot(&env.shadow).await.ok()
    } else {
        None
    };
    let guard = GitGuard::capture(&root);
    let tmp = term
        .temp_dir()
        .map_err(|e| ToolError::Failed(format!("cannot create a temporary folder: {e}")))?;
    let req = term.request(command, &root, &tmp);
    let running = exec::start(&req)
        .map_err(|e| ToolError::Failed(format!("cannot start the command ({e})")))?;
    let end_env = env.clone();
    let end_root = root.clone();
    let job = term.jobs.spawn(command, &env.run_id, running, term.config.job_timeout, move || {
        let _ = std::fs::remove_dir_all(&tmp);
        let restored = guard.restore(&end_root);
        if !restored.is_empty() {
            tracing::warn!(files = ?restored, "a background job changed git hooks or config; restored");
        }
        if let Some(b) = before {
            if let Ok(a) = end_env.shadow.snapshot() {
                if let Err(e) = record_changes(&end_env, &b, &a) {
                    tracing::warn!(error = %e, "cannot record a background job's changes");
                }
            }
        }
    });
    // Give it a moment, to report a command that fails at once.
    for _ in 0..20 {
        if job.state() != JobState::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if job.state() != JobState::Running {
        job.wait_finished().await;
    }
    Ok(job_report(&job, true))
}

fn job_report(job: &crate::terminal::jobs::Job, started: bool) -> String {
    let output = job.capture.lock().map(|c| c.render()).unwrap_or_default();
    let state = match job.state() {
        JobState::Running => format!(
            "Job {} is running{}. Read its output with check_background_job {{\"job_id\": \"{}\"}} and stop it with stop_background_job.",
            job.id,
            if started { " in the background" } else { "" },
            job.id
        ),
        JobState::Exited(c) => format!("Job {} has ended with exit code {c}.", job.id),
        JobState::Stopped => format!("Job {} was stopped.", job.id),
        JobState::TimedOut => format!(
            "Job {} was stopped at its time limit (terminal.job_timeout_secs).",
            job.id
        ),
    };
    let mut out = format!("$ {} (background job {})\n", job.command, job.id);
    if output.is_empty() {
        out.push_str("(no output yet)\n");
    } else {
        out.push_str(&output);
        if !output.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push_str(&format!("[Status: {state}]"));
    out
}

fn job_arg(args: &Args, env: &ToolEnv) -> Result<Arc<crate::terminal::jobs::Job>, ToolError> {
    let id = args.string("job_id")?;
    env.terminal.jobs.get(&id).ok_or_else(|| {
        let known: Vec<String> = env.terminal.jobs.list().into_iter().map(|j| j.id).collect();
        ToolError::Failed(format!(
            "there is no background job {id:?}; known jobs: {}",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        ))
    })
}

impl Tool for CheckBackgroundJob {
    fn name(&self) -> &'static str {
        "check_background_job"
    }
    fn description(&self) -> &'static str {
        "Show the output so far and the state of a background job started with run_terminal_command and waitForCompletion: false."
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["job_id"],"properties":{
            "job_id":{"type":"string","description":"The job id, such as job-1"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn default_policy(&self) -> Level {
        Level::Allow
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let job = job_arg(args, env)?;
        Ok(Invocation {
            targets: vec![],
            job: Box::pin(async move { Ok(job_report(&job, false)) }),
        })
    }
}

impl Tool for StopBackgroundJob {
    fn name(&self) -> &'static str {
        "stop_background_job"
    }
    fn description(&self) -> &'static str {
        "Stop a background job started with run_terminal_command and waitForCompletion: false (the whole process tree), and show its final output."
    }
    fn parameters(&self) -> Value {
        json!({"type":"object","required":["job_id"],"properties":{
            "job_id":{"type":"string","description":"The job id, such as job-1"}}})
    }
    fn read_only(&self) -> bool {
        false
    }
    fn default_policy(&self) -> Level {
        Level::Allow
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let job = job_arg(args, env)?;
        Ok(Invocation {
            targets: vec![],
            job: Box::pin(async move {
                job.stop().await;
                Ok(job_report(&job, false))
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_recognised() {
        assert!(looks_like_prompt("Installing...\nProceed? [y/N]").is_some());
        assert!(looks_like_prompt("Password:").is_some());
        assert!(looks_like_prompt("Enter passphrase for key:").is_some());
        assert!(looks_like_prompt("Compiling x\nerror: could not compile").is_none());
    }
}
