//! The names MCP tools are offered under: `mcp__SERVER__TOOL`, always within
//! `^[a-zA-Z0-9_-]{1,64}$` (what OpenAI-compatible upstreams and many clients accept).
//!
//! A character outside that set becomes `_`. A name that would be longer than 64 characters,
//! or that two of a server's tools would share after that, is cut and ends in `_` and the
//! first 8 hex digits of the SHA-1 of the server's own tool name: the same tool always gets
//! the same name, whatever else the server lists.

use std::collections::HashMap;

/// The longest function name OpenAI-compatible upstreams accept.
pub const MAX_NAME: usize = 64;

/// The prefix of every tool of `server`.
pub fn prefix(server: &str) -> String {
    format!("mcp__{server}__")
}

/// The offered names of a server's tools, in the order given: `(server's name, offered name)`.
pub fn offered_names(server: &str, tools: &[String]) -> Vec<(String, String)> {
    let prefix = prefix(server);
    let plain: Vec<String> = tools
        .iter()
        .map(|t| format!("{prefix}{}", sanitize(t)))
        .collect();
    let mut count: HashMap<&str, usize> = HashMap::new();
    for p in &plain {
        *count.entry(p.as_str()).or_default() += 1;
    }
    tools
        .iter()
        .zip(plain.iter())
        .map(|(tool, name)| {
            let unique = count.get(name.as_str()).copied().unwrap_or(0) == 1;
            let offered = if unique && name.len() <= MAX_NAME {
                name.clone()
            } else {
                hashed(&prefix, tool)
            };
            (tool.clone(), offered)
        })
        .collect()
}

/// `name` with every character outside `[a-zA-Z0-9_-]` replaced by `_` (empty: `_`).
pub fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "_".into() } else { s }
}

/// `prefix` + as much of the sanitised tool name as fits + `_` + 8 hex digits of its hash.
fn hashed(prefix: &str, tool: &str) -> String {
    let digest = sha1_smol::Sha1::from(tool.as_bytes()).digest().to_string();
    let hash = digest.get(..8).unwrap_or(&digest);
    let room = MAX_NAME.saturating_sub(prefix.len() + 1 + hash.len());
    let clean = sanitize(tool);
    // ASCII only after sanitising, so any byte index is a character boundary.
    let head = clean.get(..room.min(clean.len())).unwrap_or_default();
    format!("{prefix}{head}_{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(server: &str, tools: &[&str]) -> Vec<String> {
        let tools: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
        offered_names(server, &tools)
            .into_iter()
            .map(|(_, n)| n)
            .collect()
    }

    #[test]
    fn names_are_prefixed_sanitised_and_kept_within_64_characters() {
        assert_eq!(
            names("github", &["create_issue"]),
            vec!["mcp__github__create_issue"]
        );
        assert_eq!(names("fs", &["read.file"]), vec!["mcp__fs__read_file"]);
        // Two names that sanitise alike both get a hash, each its own.
        let two = names("fs", &["a.b", "a/b"]);
        assert_ne!(two[0], two[1]);
        assert!(
            two.iter().all(|n| n.starts_with("mcp__fs__a_b_")),
            "{two:?}"
        );
        let long = "x".repeat(100);
        let got = names("srv", &[&long, "short"]);
        assert_eq!(got[0].len(), MAX_NAME);
        assert!(got[0].starts_with("mcp__srv__xxx"));
        assert_eq!(got[1], "mcp__srv__short");
        // Deterministic: the same tool gets the same name, whatever else is listed.
        assert_eq!(names("srv", &[&long])[0], got[0]);
        let re = regex::Regex::new("^[a-zA-Z0-9_-]{1,64}$").unwrap_or_else(|e| panic!("{e}"));
        for n in got.iter().chain(&two) {
            assert!(re.is_match(n), "{n}");
        }
    }
}
