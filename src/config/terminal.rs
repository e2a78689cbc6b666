//! `[terminal]`: the shell, timeouts, output capture, the sandbox's reach, jobs.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{ConfigError, Env, err, positive, secs};

#[derive(Debug, Clone)]
pub struct TerminalConfig {
    pub shell: String,
    pub timeout: Duration,
    pub idle_timeout: Duration,
    pub head_bytes: usize,
    pub tail_bytes: usize,
    /// Run commands under Landlock when the kernel supports it.
    pub sandbox: bool,
    /// Allow TCP connections and listening sockets.
    pub network: bool,
    /// Extra folders commands may write.
    pub writable: Vec<PathBuf>,
    /// Files and folders commands may not read (absolute, `~/` expanded; the state folder is
    /// always the last entry). Missing ones are ignored.
    pub deny_read: Vec<PathBuf>,
    /// Workspace-relative files and folders commands may not change (read-only in the
    /// command's mount namespace, where the kernel allows one).
    pub readonly: Vec<PathBuf>,
    /// Use at most this Landlock ABI (not configurable: tests use it to see how an older
    /// kernel behaves).
    pub max_landlock_abi: Option<u8>,
    /// Use no namespaces even where the kernel offers them (not configurable: tests use it to
    /// see how a machine without them behaves).
    pub no_namespaces: bool,
    /// Environment variables (glob patterns) never passed to commands.
    pub scrub_env: Vec<String>,
    pub max_jobs: usize,
    pub job_timeout: Duration,
    /// The toolpilot executable that supervises commands (`__sandbox`).
    pub helper: PathBuf,
    /// Snapshot the workspace around commands, so their changes can be undone.
    pub checkpoint: bool,
    /// The longest one git call of a snapshot may take (hashing a large tree the first time
    /// is slow); past it git is killed and the command's changes are not recorded.
    pub snapshot_timeout: Duration,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct TerminalFile {
    pub(super) shell: Option<String>,
    pub(super) timeout_secs: Option<f64>,
    pub(super) idle_timeout_secs: Option<f64>,
    pub(super) head_bytes: Option<usize>,
    pub(super) tail_bytes: Option<usize>,
    pub(super) sandbox: Option<bool>,
    pub(super) network: Option<bool>,
    pub(super) writable: Option<Vec<PathBuf>>,
    pub(super) deny_read: Option<Vec<String>>,
    pub(super) readonly: Option<Vec<PathBuf>>,
    pub(super) scrub_env: Option<Vec<String>>,
    pub(super) max_jobs: Option<usize>,
    pub(super) job_timeout_secs: Option<f64>,
    pub(super) helper: Option<PathBuf>,
    pub(super) checkpoint: Option<bool>,
    pub(super) snapshot_timeout_secs: Option<f64>,
    pub(super) default_rules: Option<bool>,
    pub(super) unsandboxed: Option<String>,
}

/// The home folder's credential stores: what `terminal.deny_read` is when not set.
pub const DEFAULT_DENY_READ: &[&str] = &[
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.oci",
    "~/.kube",
    "~/.docker",
    "~/.config/containers/auth.json",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.config/gh",
    "~/.config/hub",
    "~/.config/glab-cli",
    "~/.npmrc",
    "~/.pypirc",
    "~/.gem/credentials",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.config/op",
    "~/.vault-token",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.config/doctl",
    "~/.config/rclone",
    "~/.s3cfg",
    "~/.boto",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
];

/// `terminal.deny_read` resolved: `~/` expanded, every entry absolute, the state folder last.
/// Without `HOME`, the default entries (all under `~`) are left out; a configured `~/` entry is
/// an error.
fn deny_read(
    configured: Option<Vec<String>>,
    home: Option<String>,
    state_dir: &Path,
) -> Result<Vec<PathBuf>, ConfigError> {
    let defaults = configured.is_none();
    let entries =
        configured.unwrap_or_else(|| DEFAULT_DENY_READ.iter().map(|s| s.to_string()).collect());
    let mut out = Vec::new();
    for e in entries {
        let path = match (e.strip_prefix("~/"), &home) {
            (Some(rest), Some(h)) => PathBuf::from(h).join(rest),
            (Some(_), None) if defaults => continue,
            (Some(_), None) => {
                return Err(err(format!(
                    "terminal.deny_read: {e:?} starts with ~/ but HOME is not set; \
                     write the absolute path"
                )));
            }
            (None, _) => PathBuf::from(&e),
        };
        if !path.is_absolute() {
            return Err(err(format!(
                "terminal.deny_read: {e:?} is not an absolute path; write /… or ~/…"
            )));
        }
        if path.parent().is_none() {
            return Err(err(
                "terminal.deny_read: \"/\" would hide every file; name the folders to hide",
            ));
        }
        out.push(path);
    }
    let state = std::path::absolute(state_dir).map_err(|e| {
        err(format!(
            "state_dir: cannot make {} absolute ({e})",
            state_dir.display()
        ))
    })?;
    out.push(state);
    Ok(out)
}

/// `terminal.readonly`: paths relative to the workspace, never leaving it.
fn readonly(paths: Vec<PathBuf>) -> Result<Vec<PathBuf>, ConfigError> {
    use std::path::Component;
    for p in &paths {
        let ok = !p.as_os_str().is_empty()
            && p.components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !ok {
            return Err(err(format!(
                "terminal.readonly: {:?} must be a path inside the workspace, relative to its \
                 root (such as .git or .vscode/tasks.json), without ..",
                p.display().to_string()
            )));
        }
    }
    Ok(paths)
}

/// The folders commands may not read end with `state_dir`.
pub(super) fn resolve(
    tf: TerminalFile,
    env: &Env<'_>,
    state_dir: &Path,
) -> Result<TerminalConfig, ConfigError> {
    let helper = match tf.helper {
        Some(h) => h,
        None => std::env::current_exe().map_err(|e| {
            err(format!(
                "terminal.helper: cannot find this executable ({e}); set the path to toolpilot"
            ))
        })?,
    };
    Ok(TerminalConfig {
        shell: tf.shell.unwrap_or_else(|| "sh".into()),
        timeout: secs("terminal.timeout_secs", tf.timeout_secs, 120.0)?,
        idle_timeout: secs("terminal.idle_timeout_secs", tf.idle_timeout_secs, 90.0)?,
        head_bytes: positive("terminal.head_bytes", tf.head_bytes, 8_000)?,
        tail_bytes: positive("terminal.tail_bytes", tf.tail_bytes, 16_000)?,
        sandbox: tf.sandbox.unwrap_or(true),
        network: tf.network.unwrap_or(false),
        writable: tf.writable.unwrap_or_default(),
        deny_read: deny_read(tf.deny_read, env("HOME"), state_dir)?,
        readonly: readonly(tf.readonly.unwrap_or_default())?,
        max_landlock_abi: None,
        no_namespaces: false,
        scrub_env: tf.scrub_env.unwrap_or_else(|| {
            [
                "*_API_KEY",
                "*_APIKEY",
                "*_TOKEN",
                "*_SECRET",
                "*_SECRET_*",
                "*PASSWORD*",
                "*_PASSWD",
                "*_CREDENTIALS",
                "AWS_ACCESS_KEY_ID",
                "GOOGLE_APPLICATION_CREDENTIALS",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        }),
        max_jobs: positive("terminal.max_jobs", tf.max_jobs, 4)?,
        job_timeout: secs("terminal.job_timeout_secs", tf.job_timeout_secs, 3600.0)?,
        helper,
        checkpoint: tf.checkpoint.unwrap_or(true),
        snapshot_timeout: secs(
            "terminal.snapshot_timeout_secs",
            tf.snapshot_timeout_secs,
            120.0,
        )?,
    })
}
