//! `run_terminal_command`, and the two small tools for background jobs:
//! `check_background_job` and `stop_background_job`.
//!
//! A foreground command runs under the supervisor (sandboxed when the kernel allows), bounded
//! by the wall-clock and idle timeouts, with its output capped (head and tail kept, ANSI
//! removed); the result always says how it ended, with the exit code and duration. Around it,
//! the workspace is snapshotted so the run's checkpoint covers what the command changed, and
//! protected paths are held (`terminal::guard`): a command a person did not approve gets the
//! existing ones read-only where the kernel can, and what it changed or created there anyway is
//! put back or removed; a person-approved command's changes to them go into the checkpoint.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError};
use crate::checkpoint::tree::{BlobError, Shadow};
use crate::policy::Target;
use crate::terminal::exec::{self, Ended};
use crate::terminal::guard::{Guard, Report};
use crate::terminal::jobs::JobState;
use crate::terminal::{Terminal, secs};
use crate::tools::registry::{Grant, current_grant};

pub struct RunTerminalCommand;
pub struct CheckBackgroundJob;
pub struct StopBackgroundJob;

/// Most changed files listed in a result.
const MAX_LISTED: usize = 20;

impl Tool for RunTerminalCommand {
    fn name(&self) -> &'static str {
        "run_terminal_command"
    }
    fn deadline(&self, env: &ToolEnv) -> std::time::Duration {
        // The command has its own time limit (it is stopped and its output returned then);
        // the snapshots and the guard around it get the usual call deadline on top.
        env.terminal.config.timeout + env.config.call_timeout
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

/// What a command needs before it starts, prepared off the async threads.
struct Setup {
    /// The protected paths as they were (an error when the scan could not start: the command
    /// then runs with nothing held and the result says so).
    guard: Result<Guard, String>,
    /// Its private temporary folder.
    tmp: std::path::PathBuf,
    /// What it gets read-only.
    readonly: Vec<std::path::PathBuf>,
}

/// Scans the protected paths, makes the temporary folder and lists the read-only paths, on a
/// blocking thread (the scan walks the protected entries; the folder is on disk).
async fn set_up(env: &ToolEnv, held: bool) -> Result<Setup, ToolError> {
    let root = env.workspace.root().to_path_buf();
    let term = Arc::clone(&env.terminal);
    let work = tokio::task::spawn_blocking(move || {
        let guard = Guard::capture(&root, &term.protected)
            .map_err(|e| format!("cannot scan the workspace for protected paths: {e}"));
        let tmp = term
            .temp_dir()
            .map_err(|e| ToolError::Failed(format!("cannot create a temporary folder: {e}")))?;
        let readonly = readonly_for(&term, &root, &guard, held);
        Ok(Setup {
            guard,
            tmp,
            readonly,
        })
    });
    work.await
        .map_err(|e| ToolError::Failed(format!("preparing the command failed: {e}")))?
}

/// After a command, on a blocking thread: its sandbox report, its temporary folder removed,
/// and the protected paths settled (see [`settle_guard`]). Returns the report and the note.
async fn clean_up(
    env: &ToolEnv,
    guard: Result<Guard, String>,
    tmp: std::path::PathBuf,
    held: bool,
) -> (Option<crate::terminal::sandbox::Report>, String) {
    let env = env.clone();
    let work = tokio::task::spawn_blocking(move || {
        let root = env.workspace.root().to_path_buf();
        let report = Terminal::read_report(&tmp);
        Terminal::remove_temp_dir(&tmp);
        let note = match &guard {
            Ok(g) => settle_guard(
                &env,
                g,
                held,
                &Terminal::bound_paths(report.as_ref(), &root),
            ),
            Err(e) => Report {
                incomplete: Some(e.clone()),
                ..Report::default()
            }
            .note(),
        };
        (report, note)
    });
    work.await.unwrap_or_else(|e| {
        (
            None,
            format!("\n[The clean-up after the command failed: {e}]"),
        )
    })
}

/// What a command gets read-only: the protected paths that exist (when a person did not
/// approve it), and `terminal.readonly`.
fn readonly_for(
    term: &crate::terminal::Terminal,
    root: &std::path::Path,
    guard: &Result<Guard, String>,
    held: bool,
) -> Vec<std::path::PathBuf> {
    let mut paths = term.configured_readonly(root);
    if let (true, Ok(g)) = (held, guard) {
        paths.extend(g.readonly_paths());
    }
    paths
}

/// After a command: puts protected paths back (`held`), or records a person-approved
/// command's changes to them in the checkpoint. Returns the note for the model.
/// `bound`: what the command had read-only (from its sandbox report).
fn settle_guard(env: &ToolEnv, guard: &Guard, held: bool, bound: &[std::path::PathBuf]) -> String {
    let protected = &env.terminal.protected;
    if held {
        let quarantine = env.terminal.quarantine_dir(&env.run_id);
        let report = guard.finish(protected, bound, &quarantine);
        if !report.is_empty() {
            tracing::warn!(removed = ?report.removed, restored = ?report.restored, kept = ?report.kept, "a command touched protected paths");
        }
        return report.note();
    }
    let mut failed = Vec::new();
    for change in guard.changes(protected) {
        let Ok(wp) = env.workspace.recorded(&change.path) else {
            continue;
        };
        let after = env
            .workspace
            .read_for_edit(&wp, &change.path)
            .ok()
            .map(|snap| crate::checkpoint::sha1(&snap.bytes));
        let before = change
            .before
            .as_ref()
            .map(|(b, m)| (b.as_slice(), 0o100000 | *m));
        if let Err(e) = env
            .checkpoint
            .tree_change(&change.path, before, after.as_deref())
        {
            failed.push(format!("{} ({e})", change.path));
        }
    }
    if failed.is_empty() {
        String::new()
    } else {
        format!(
            "\n[Changes of protected paths could not be recorded for undo: {}]",
            failed.join(", ")
        )
    }
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
    let held = current_grant() != Grant::Person;
    let Setup {
        guard,
        tmp,
        readonly,
    } = set_up(env, held).await?;
    let req = term.request(command, &root, &tmp, &readonly);
    let mut running = match exec::start(&req) {
        Ok(r) => r,
        Err(e) => {
            clean_up(env, guard, tmp, held).await;
            return Err(ToolError::Failed(format!(
                "cannot start the command ({e}); is {} executable?",
                req.helper.display()
            )));
        }
    };
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
    let (report, guard_note) = clean_up(env, guard, tmp, held).await;
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
        Ended::SupervisorKilled { signal, leftovers } => format!(
            "Command's supervisor was killed by signal {signal} after {}; toolpilot then \
             killed {leftovers} remaining process{} of the command. The output above may be \
             partial",
            secs(elapsed),
            if leftovers == 1 { "" } else { "es" }
        ),
    };
    out.push_str(&format!("[Status: {status} ({})]", term.describe()));
    if let Some(r) = &report {
        for note in crate::terminal::report_notes(r, &root) {
            out.push('\n');
            out.push_str(&note);
        }
    }
    if !matches!(ended, Ended::Exited(0))
        && let Some(p) = looks_like_prompt(&output)
    {
        out.push_str(&format!(
            "\n[The command seems to have asked for input (\"{p}\"). Commands run without a \
                 terminal and with empty input: pass the answer as an argument or a flag such as \
                 --yes, or set it in the environment.]"
        ));
    }
    out.push_str(&guard_note);
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
    let held = current_grant() != Grant::Person;
    let Setup {
        guard,
        tmp,
        readonly,
    } = set_up(env, held).await?;
    let req = term.request(command, &root, &tmp, &readonly);
    let running = match exec::start(&req) {
        Ok(r) => r,
        Err(e) => {
            clean_up(env, guard, tmp, held).await;
            return Err(ToolError::Failed(format!("cannot start the command ({e})")));
        }
    };
    let end_env = env.clone();
    let end_root = root.clone();
    let job = term.jobs.spawn(
        command,
        &env.run_id,
        running,
        term.config.job_timeout,
        move || {
            let bound = Terminal::bound_paths(Terminal::read_report(&tmp).as_ref(), &end_root);
            Terminal::remove_temp_dir(&tmp);
            let note = match &guard {
                Ok(g) => settle_guard(&end_env, g, held, &bound),
                Err(e) => Report {
                    incomplete: Some(e.clone()),
                    ..Report::default()
                }
                .note(),
            };
            if !note.is_empty() {
                tracing::warn!(note = %note.trim(), "a background job touched protected paths");
            }
            if let Some(b) = before
                && let Ok(a) = end_env.shadow.snapshot()
                && let Err(e) = record_changes(&end_env, &b, &a)
            {
                tracing::warn!(error = %e, "cannot record a background job's changes");
            }
            note
        },
    );
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
    if let Ok(note) = job.note.lock() {
        out.push_str(&note);
    }
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
