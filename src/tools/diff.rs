//! `view_diff`: staged and unstaged `git diff` of the workspace, plus untracked file names.
//! When the workspace lies inside a larger repository, only changes below the root are shown.
//!
//! git runs with a cleared environment (no API keys, no `GIT_DIR` tricks) and in a way that
//! the repository's own configuration cannot make it execute programs: no external diff
//! driver (`--no-ext-diff`), no textconv (`--no-textconv`), no fsmonitor hook, no pager, and
//! every clean/smudge/process filter the configuration names is overridden with an empty
//! command. `GIT_OPTIONAL_LOCKS=0` keeps git from rewriting the index, so the tool stays
//! read-only. Output is bounded in lines and bytes, and the call has a timeout.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError};
use crate::text::group;

pub struct ViewDiff;

/// Most bytes read from one git command before it is stopped.
const MAX_GIT_OUTPUT: u64 = 16 * 1024 * 1024;

impl Tool for ViewDiff {
    fn name(&self) -> &'static str {
        "view_diff"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/view_diff.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","properties":{}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, _args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let env = env.clone();
        Ok(Invocation {
            targets: vec![],
            job: Box::pin(async move { view_diff(&env).await }),
        })
    }
}

struct Git<'a> {
    env: &'a ToolEnv,
    /// `-c` overrides that neutralise filters named in the repository's configuration.
    overrides: Vec<String>,
}

impl Git<'_> {
    async fn run(&self, args: &[&str]) -> Result<(bool, String, bool), ToolError> {
        let mut cmd = Command::new("git");
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_PAGER", "cat")
            .env("PAGER", "cat")
            .env("LC_ALL", "C.UTF-8")
            .current_dir(self.env.workspace.root())
            .args([
                "--no-pager",
                "-c",
                "core.fsmonitor=false",
                "-c",
                "core.pager=cat",
                "-c",
                "core.quotepath=false",
                "-c",
                "color.ui=false",
                "-c",
                "diff.external=",
            ]);
        for o in &self.overrides {
            cmd.args(["-c", o]);
        }
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().map_err(|e| {
            ToolError::Failed(format!(
                "cannot run git ({e}); view_diff needs git installed on the server"
            ))
        })?;
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let work = async {
            // Each pipe is read concurrently and dropped when done: if stdout passes the cap,
            // dropping it makes git stop with EPIPE instead of blocking on a full pipe.
            let read_out = async move {
                let mut out = Vec::new();
                if let Some(s) = stdout {
                    s.take(MAX_GIT_OUTPUT + 1).read_to_end(&mut out).await?;
                }
                Ok::<_, std::io::Error>(out)
            };
            let read_err = async move {
                let mut err = Vec::new();
                if let Some(s) = stderr {
                    s.take(64 * 1024).read_to_end(&mut err).await?;
                }
                Ok::<_, std::io::Error>(err)
            };
            let (out, err) = tokio::join!(read_out, read_err);
            let (out, err) = (out?, err?);
            let too_big = out.len() as u64 > MAX_GIT_OUTPUT;
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((status, out, err, too_big))
        };
        let timeout = self.env.config.git_timeout;
        let (status, out, err, too_big) = tokio::select! {
            r = tokio::time::timeout(timeout, work) => match r {
                Ok(r) => r.map_err(|e| ToolError::Failed(format!("git failed: {e}")))?,
                Err(_) => return Err(ToolError::Failed(format!(
                    "git did not finish within {}; the repository may be very large",
                    secs(timeout)
                ))),
            },
            _ = self.env.cancel.cancelled() => return Err(ToolError::Failed("cancelled".into())),
        };
        if !status.success() && !too_big {
            let msg = String::from_utf8_lossy(&err).trim().to_string();
            return Ok((false, msg, false));
        }
        Ok((true, String::from_utf8_lossy(&out).into_owned(), too_big))
    }
}

fn secs(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

async fn view_diff(env: &ToolEnv) -> Result<String, ToolError> {
    let mut git = Git {
        env,
        overrides: Vec::new(),
    };
    let (ok, out, _) = git.run(&["rev-parse", "--is-inside-work-tree"]).await?;
    if !ok || out.trim() != "true" {
        return Ok(format!(
            "The workspace is not inside a git repository, so there is no diff to show{}.",
            if out.is_empty() {
                String::new()
            } else {
                format!(" (git said: {})", out.lines().next().unwrap_or(""))
            }
        ));
    }
    // Reading configuration executes nothing; every filter it names is then disabled.
    let (_, filters, _) = git.run(&["config", "--get-regexp", r"^filter\."]).await?;
    let mut names: Vec<String> = filters
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|k| k.strip_prefix("filter."))
        .filter_map(|k| k.rsplit_once('.').map(|(name, _)| name.to_string()))
        .collect();
    names.sort();
    names.dedup();
    for n in names {
        for key in ["clean", "smudge", "process"] {
            git.overrides.push(format!("filter.{n}.{key}="));
        }
        git.overrides.push(format!("filter.{n}.required=false"));
    }

    // `--relative`: when the workspace is a folder inside a larger repository, only its own
    // changes are shown (with workspace-relative paths), never files outside the root.
    // `ls-files` already lists only the current directory.
    let flags = ["--no-ext-diff", "--no-textconv", "--no-color", "--relative"];
    let staged = git
        .run(&[&["diff", "--cached"][..], &flags[..]].concat())
        .await?;
    let unstaged = git.run(&[&["diff"][..], &flags[..]].concat()).await?;
    let untracked = git
        .run(&["ls-files", "--others", "--exclude-standard"])
        .await?;
    for (ok, text, _) in [&staged, &unstaged, &untracked] {
        if !ok {
            return Err(ToolError::Failed(format!("git failed: {text}")));
        }
    }
    let mut sections = Vec::new();
    if !staged.1.trim().is_empty() {
        sections.push(format!(
            "Staged changes (git diff --cached):\n{}",
            staged.1.trim_end()
        ));
    }
    if !unstaged.1.trim().is_empty() {
        sections.push(format!(
            "Unstaged changes (git diff):\n{}",
            unstaged.1.trim_end()
        ));
    }
    if !untracked.1.trim().is_empty() {
        let files: Vec<&str> = untracked.1.lines().collect();
        let shown = files.len().min(200);
        let mut s = format!(
            "Untracked files (new, not in the diff; read them with read_file):\n{}",
            files.get(..shown).unwrap_or_default().join("\n")
        );
        if files.len() > shown {
            s.push_str(&format!(
                "\n[{} more untracked files]",
                group((files.len() - shown) as u64)
            ));
        }
        sections.push(s);
    }
    if sections.is_empty() {
        return Ok(
            "The current diff is empty: no staged or unstaged changes and no untracked files."
                .into(),
        );
    }
    let text = sections.join("\n\n");
    let max_lines = env.config.diff_max_lines;
    let total_lines = text.lines().count();
    let mut out = if total_lines > max_lines {
        let mut t: String = text.lines().take(max_lines).collect::<Vec<_>>().join("\n");
        t.push_str(&format!(
            "\n[the diff was cut: showing {max_lines} of {} lines. Look at single files with \
             read_file, or ask for a smaller change set.]",
            group(total_lines as u64)
        ));
        t
    } else {
        text
    };
    if staged.2 || unstaged.2 {
        out.push_str("\n[git produced more than 16 MB of diff; the rest was not read]");
    }
    // Leave room for fit_budget's note, so the registry's cut at the budget keeps it.
    let budget = env.config.output_budget;
    Ok(super::fit_budget(
        out,
        budget - (256).min(budget / 2),
        "Look at single files with read_file.",
    ))
}
