//! The top-level keys: `workspace`, `state_dir` and `sensitive_files`.

use std::path::PathBuf;

use super::{ConfigError, Env, err};

/// Continue's list of security-sensitive files and folders (gitignore syntax). Reads of these
/// are refused and search tools skip them. Configurable as `workspace.sensitive_files`.
pub const DEFAULT_SENSITIVE: &[&str] = &[
    "*.env",
    "*.env.*",
    ".env*",
    "config.json",
    "config.yaml",
    "config.yml",
    "settings.json",
    "appsettings.json",
    "appsettings.*.json",
    "*.key",
    "*.pem",
    "*.p12",
    "*.pfx",
    "*.crt",
    "*.cer",
    "*.jks",
    "*.keystore",
    "*.truststore",
    "*.db",
    "*.sqlite",
    "*.sqlite3",
    "*.mdb",
    "*.accdb",
    "*.secret",
    "*.secrets",
    "auth.json",
    "*.token",
    "*.bak",
    "*.backup",
    "*.old",
    "*.orig",
    "docker-compose.override.yml",
    "docker-compose.override.yaml",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "*.ppk",
    "*.gpg",
    ".env/",
    "env/",
    ".aws/",
    ".gcp/",
    ".azure/",
    ".kube/",
    ".docker/",
    "secrets/",
    ".secrets/",
    "private/",
    ".private/",
    "certs/",
    "certificates/",
    "keys/",
    ".ssh/",
    ".gnupg/",
    ".gpg/",
    "tmp/secrets/",
    "temp/secrets/",
    ".tmp/",
];

/// `state_dir`: as configured, else `$XDG_STATE_HOME/toolpilot`, else
/// `~/.local/state/toolpilot`.
pub(super) fn state_dir(
    configured: Option<PathBuf>,
    env: &Env<'_>,
) -> Result<PathBuf, ConfigError> {
    Ok(match configured {
        Some(d) => d,
        None => match (env("XDG_STATE_HOME"), env("HOME")) {
            (Some(x), _) => PathBuf::from(x).join("toolpilot"),
            (None, Some(h)) => PathBuf::from(h).join(".local/state/toolpilot"),
            (None, None) => {
                return Err(err(
                    "state_dir: neither XDG_STATE_HOME nor HOME is set; pass --state-dir DIR",
                ));
            }
        },
    })
}
