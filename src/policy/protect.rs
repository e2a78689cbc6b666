//! Protected paths: files in the workspace that hold code or settings something runs later,
//! outside any sandbox (git hooks and config, editor tasks, agent and MCP settings, CI
//! definitions, environment files). Writing one needs a person's approval: `--yes` and allow
//! rules that do not name the path never approve it.
//!
//! Names are compared the way the file systems that may open the folder compare them
//! ([`crate::workspace::names`]): case-insensitively, without the code points HFS+ ignores,
//! without NTFS's trailing dots, spaces and stream suffixes, and with 8.3 short names
//! (`GIT~1`) read as the name they stand for.

use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::workspace::names::{fold_name, fold_path, literal_names};

/// One protected-path pattern.
#[derive(Debug, Clone)]
struct Entry {
    pattern: String,
    /// A pattern without `/`: matched against the file name too.
    basename: bool,
    /// The literal text a rule must contain to name this protected path (`.git`, `.vscode`,
    /// `.env`), folded.
    names: Vec<String>,
}

/// A protected path a write would touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The pattern it matches, as configured.
    pub pattern: String,
    names: Vec<String>,
}

impl Hit {
    /// Whether a rule specifier names this protected path: it mentions every literal part of
    /// the pattern (`.vscode/**` names `**/.vscode/**`; `**` and `*.json` do not).
    pub fn named_by(&self, specifier: &str) -> bool {
        let spec = fold_name(specifier);
        !self.names.is_empty() && self.names.iter().all(|n| spec.contains(n.as_str()))
    }
}

/// The compiled protected-path list.
#[derive(Debug, Clone, Default)]
pub struct Protected {
    entries: Vec<Entry>,
    /// Every pattern, compiled into one set (index = entry); one pass per path, which matters
    /// for the scans around commands that check every entry of the workspace.
    set: GlobSet,
    /// The patterns without `/`, which also match a file name alone.
    names: GlobSet,
    /// The literal components of the patterns with `/` (`.git`, `.vscode`, …), when every such
    /// pattern has one: a path none of whose components is one of them can only match by its
    /// file name, which lets a scan skip the whole-path test for almost every entry.
    triggers: Option<std::collections::HashSet<String>>,
    /// Every literal name of every pattern, for reading 8.3 short names.
    long_names: Vec<String>,
}

/// The literal runs of a pattern a rule must mention: whole literal components, and in a
/// component with wildcards its longest literal run when it is at least three characters
/// (`.env*` → `.env`, `*.code-workspace` → `.code-workspace`).
fn naming_parts(pattern: &str) -> Vec<String> {
    let mut out = Vec::new();
    for comp in pattern.split('/').filter(|c| !c.is_empty() && *c != "**") {
        if !comp.contains(['*', '?', '[', '{']) {
            out.push(fold_name(comp));
            continue;
        }
        let longest = comp
            .split(['*', '?', '[', ']', '{', '}', ','])
            .max_by_key(|s| s.len())
            .unwrap_or("");
        if longest.len() >= 3 {
            out.push(fold_name(longest));
        }
    }
    out
}

impl Protected {
    /// Compiles the patterns; an error names the index and the pattern.
    pub fn new(patterns: &[String]) -> Result<Protected, String> {
        let mut entries = Vec::new();
        let mut set = GlobSetBuilder::new();
        let mut names = GlobSetBuilder::new();
        let mut long_names: Vec<String> = Vec::new();
        let mut triggers = Some(std::collections::HashSet::new());
        for (i, p) in patterns.iter().enumerate() {
            let glob = GlobBuilder::new(&p.to_lowercase())
                .literal_separator(true)
                .case_insensitive(true)
                .build()
                .map_err(|e| format!("policy.protected[{i}] {p:?} is not a glob: {e}"))?;
            for n in literal_names(p) {
                if !long_names.contains(&n) {
                    long_names.push(n);
                }
            }
            if !p.contains('/') {
                names.add(glob.clone());
            } else {
                let lits = literal_names(p);
                if lits.is_empty() {
                    triggers = None;
                } else if let Some(t) = triggers.as_mut() {
                    t.extend(lits);
                }
            }
            set.add(glob);
            entries.push(Entry {
                pattern: p.clone(),
                basename: !p.contains('/'),
                names: naming_parts(p),
            });
        }
        let compile = |b: GlobSetBuilder| {
            b.build()
                .map_err(|e| format!("policy.protected does not compile: {e}"))
        };
        Ok(Protected {
            entries,
            set: compile(set)?,
            names: compile(names)?,
            triggers,
            long_names,
        })
    }

    /// The patterns, as configured.
    pub fn patterns(&self) -> Vec<String> {
        self.entries.iter().map(|e| e.pattern.clone()).collect()
    }

    /// The protected pattern a workspace-relative path matches, comparing folded names.
    pub fn check(&self, rel: &Path) -> Option<Hit> {
        let folded = fold_path(rel, &self.long_names);
        self.check_folded(&folded)
    }

    /// [`Protected::check`] for a path already folded with [`Protected::fold`].
    pub fn check_folded(&self, folded: &Path) -> Option<Hit> {
        if folded.as_os_str().is_empty() {
            return None;
        }
        let first = |indices: Vec<usize>, by_name: bool| {
            indices
                .into_iter()
                .find(|&i| !by_name || self.entries[i].basename)
        };
        let i = first(self.set.matches(folded), false).or_else(|| {
            folded
                .file_name()
                .and_then(|n| first(self.set.matches(n), true))
        })?;
        let e = &self.entries[i];
        Some(Hit {
            pattern: e.pattern.clone(),
            names: e.names.clone(),
        })
    }

    /// Whether a folded path is protected (the fast test of the scans; no allocation).
    /// `interesting`: some component is a [`Protected::is_trigger`] name (pass `true` when
    /// unsure).
    pub fn is_protected_folded(&self, folded: &Path, interesting: bool) -> bool {
        (interesting && self.set.is_match(folded))
            || folded.file_name().is_some_and(|n| self.names.is_match(n))
    }

    /// Whether a folded name can make a path match a whole-path pattern (see `triggers`).
    pub fn is_trigger(&self, folded_name: &str) -> bool {
        self.triggers
            .as_ref()
            .is_none_or(|t| t.contains(folded_name))
    }

    /// A relative path folded the way [`Protected::check`] compares it.
    pub fn fold(&self, rel: &Path) -> std::path::PathBuf {
        fold_path(rel, &self.long_names)
    }

    /// One name folded the way [`Protected::check`] compares it.
    pub fn fold_component(&self, name: &str) -> String {
        // Most names need only lower-casing: ASCII, no `~`, no stream suffix, no trailing dot
        // or space.
        let plain = name.is_ascii()
            && !name.contains(['~', ':'])
            && !name.ends_with(['.', ' '])
            && !name.is_empty();
        if plain {
            return name.to_ascii_lowercase();
        }
        let folded = fold_name(name);
        self.long_names
            .iter()
            .find(|l| crate::workspace::names::is_short_name_of(&folded, l))
            .cloned()
            .unwrap_or(folded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DEFAULT_PROTECTED;

    fn defaults() -> Protected {
        Protected::new(
            &DEFAULT_PROTECTED
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )
        .unwrap()
    }

    #[test]
    fn every_spelling_of_a_protected_path_is_protected() {
        let p = defaults();
        for path in [
            ".git",
            ".git/config",
            ".git/hooks/pre-commit",
            ".GIT/hooks/pre-commit",
            ".g\u{200c}it/config",
            "git~1/hooks/pre-commit",
            "GIT~1/config",
            ".git./config",
            ".git::$INDEX_ALLOCATION/config",
            "sub/.git/hooks/post-checkout",
            "sub/.git",
            "vendor/lib/.git/config",
            ".vscode/tasks.json",
            ".VSCode/settings.json",
            "vscode~1/tasks.json",
            "app/.vscode/launch.json",
            ".claude/settings.json",
            ".cursor/mcp.json",
            ".continue/mcpServers/x.yaml",
            ".continueignore",
            ".mcp.json",
            "docs/.envrc",
            ".envrc",
            ".env.local",
            "AGENTS.md",
            "sub/agents.md",
            "agents~1.md",
            ".github/workflows/ci.yml",
            ".husky/pre-commit",
            ".cargo/config.toml",
            "x.code-workspace",
        ] {
            assert!(
                p.check(Path::new(path)).is_some(),
                "{path:?} is not protected"
            );
        }
        for path in [
            "src/main.rs",
            "README.md",
            "gitx/config",
            ".gitignore",
            "docs/git.md",
            ".github/README.md",
            "config",
            "vscode/notes.md",
        ] {
            assert!(p.check(Path::new(path)).is_none(), "{path:?} is protected");
        }
    }

    #[test]
    fn a_rule_names_a_protected_path_only_by_its_literal_parts() {
        let p = defaults();
        let hit = p.check(Path::new(".vscode/tasks.json")).unwrap();
        assert!(hit.named_by(".vscode/tasks.json"));
        assert!(hit.named_by(".vscode/**"));
        assert!(hit.named_by("/.VSCode/tasks.json"));
        assert!(!hit.named_by("**"));
        assert!(!hit.named_by("*.json"));
        assert!(!hit.named_by("**/tasks.json"));
        let hit = p.check(Path::new(".env.local")).unwrap();
        assert!(hit.named_by(".env.local"));
        assert!(!hit.named_by("*.local"));
        let hit = p.check(Path::new("x.code-workspace")).unwrap();
        assert!(hit.named_by("*.code-workspace"));
    }
}
