//! `TOOLPILOT_<SECTION>__<KEY>` variables, merged into the configuration tree between the
//! file and the flags.

use super::{ConfigError, err};

/// Variables that look like `TOOLPILOT_<SECTION>__<KEY>` but belong to flags or secrets.
const RESERVED_ENV: &[&str] = &[
    "TOOLPILOT_WORKSPACE",
    "TOOLPILOT_CONFIG",
    "TOOLPILOT_UPSTREAM",
    "TOOLPILOT_MODEL",
    "TOOLPILOT_YES",
    "TOOLPILOT_BIND",
    "TOOLPILOT_LOG",
    "TOOLPILOT_UPSTREAM_API_KEY",
    "TOOLPILOT_BEARER_TOKEN",
];

/// Merges `TOOLPILOT_SECTION__KEY=value` variables into the config tree. A value is read as
/// TOML (`10`, `true`, `["a","b"]`) and otherwise taken as a string.
/// Returns the dotted key each variable set, with the variable's name, for error messages.
pub(super) fn merge(
    table: &mut toml::Table,
    env: &[(String, String)],
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut set = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("TOOLPILOT_") else {
            continue;
        };
        if RESERVED_ENV.contains(&name.as_str()) || !rest.contains("__") {
            continue;
        }
        let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
        if path.iter().any(String::is_empty) {
            return Err(err(format!(
                "{name}: expected TOOLPILOT_<SECTION>__<KEY>, e.g. TOOLPILOT_AGENT__MAX_ROUNDS"
            )));
        }
        let parsed = format!("v = {value}")
            .parse::<toml::Table>()
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.clone()));
        set.push((path.join("."), name.clone()));
        let mut cur = &mut *table;
        for (i, key) in path.iter().enumerate() {
            if i + 1 == path.len() {
                cur.insert(key.clone(), parsed.clone());
            } else {
                let entry = cur
                    .entry(key.clone())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                cur = match entry {
                    toml::Value::Table(t) => t,
                    _ => {
                        return Err(err(format!(
                            "{name}: `{}` is not a section",
                            path[..=i].join(".")
                        )));
                    }
                };
            }
        }
    }
    Ok(set)
}
