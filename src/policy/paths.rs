//! The [`PathJudge`] of a workspace and a policy: where a path argument of a command leads,
//! and whether it is a sensitive file or a protected path. Matching is lexical (the sandbox
//! confines what the command reaches); `~` and `$HOME` are expanded, other variables are not.

use std::path::{Component, Path, PathBuf};

use super::Policy;
use super::command::PathJudge;
use crate::workspace::Workspace;

/// Paths of command arguments judged against a workspace and a policy.
pub struct WorkspaceJudge<'a> {
    ws: &'a Workspace,
    policy: &'a Policy,
}

enum Where {
    /// Relative to the root, normalised.
    Inside(PathBuf),
    /// Absolute, normalised, not under the root.
    Outside(PathBuf),
    /// Depends on a variable or another user's home: the text as written.
    Unknown(String),
}

impl<'a> WorkspaceJudge<'a> {
    pub fn new(ws: &'a Workspace, policy: &'a Policy) -> WorkspaceJudge<'a> {
        WorkspaceJudge { ws, policy }
    }

    fn locate(&self, word: &str) -> Where {
        let w = word.trim();
        let home_rest = if w == "~" || w == "$HOME" || w == "${HOME}" {
            Some("")
        } else {
            w.strip_prefix("~/")
                .or_else(|| w.strip_prefix("$HOME/"))
                .or_else(|| w.strip_prefix("${HOME}/"))
        };
        let path = match (home_rest, self.ws.home()) {
            (Some(rest), Some(home)) => home.join(rest),
            (Some(_), None) => return Where::Unknown(w.to_string()),
            (None, _) if w.starts_with('~') || w.contains('$') || w.contains('`') => {
                return Where::Unknown(w.to_string());
            }
            (None, _) => PathBuf::from(w),
        };
        if path.is_absolute() {
            let abs = normalize(&path);
            let under = abs
                .strip_prefix(self.ws.root())
                .ok()
                .or_else(|| self.ws.alias().and_then(|a| abs.strip_prefix(a).ok()));
            return match under {
                Some(rel) => Where::Inside(rel.to_path_buf()),
                None => Where::Outside(abs),
            };
        }
        let joined = normalize(&self.ws.root().join(&path));
        match joined.strip_prefix(self.ws.root()) {
            Ok(rel) => Where::Inside(rel.to_path_buf()),
            Err(_) => Where::Outside(joined),
        }
    }

    fn is_dir(&self, word: &str, path: &Path, inside: bool) -> bool {
        if word.ends_with('/') {
            return true;
        }
        if inside {
            return self
                .ws
                .resolve(&path.to_string_lossy())
                .is_ok_and(|p| self.ws.is_dir(&p));
        }
        std::fs::metadata(path).is_ok_and(|m| m.is_dir())
    }
}

/// `.` and `..` removed lexically (`..` at the top stays at the top).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

impl PathJudge for WorkspaceJudge<'_> {
    fn sensitive(&self, word: &str) -> Option<String> {
        let (rel, dir) = match self.locate(word) {
            Where::Inside(rel) => {
                let dir = self.is_dir(word, &rel, true);
                (rel, dir)
            }
            Where::Outside(abs) => {
                let dir = self.is_dir(word, &abs, false);
                (
                    abs.strip_prefix("/").map(Path::to_path_buf).unwrap_or(abs),
                    dir,
                )
            }
            Where::Unknown(text) => (
                PathBuf::from(text.trim_start_matches('/')),
                text.ends_with('/'),
            ),
        };
        self.ws.sensitive_rel(&rel, dir)
    }

    fn protected(&self, word: &str) -> Option<String> {
        match self.locate(word) {
            Where::Inside(rel) if !rel.as_os_str().is_empty() => {
                self.policy.protected_pattern(&rel)
            }
            _ => None,
        }
    }

    fn inside(&self, word: &str) -> bool {
        matches!(self.locate(word), Where::Inside(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyConfig;

    #[test]
    fn where_path_arguments_lead() {
        let tmp = tempfile::tempdir().unwrap();
        let sens: Vec<String> = crate::workspace::DEFAULT_SENSITIVE
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ws = Workspace::open(tmp.path(), &sens).unwrap();
        let policy = Policy::new(&PolicyConfig {
            protected: super::super::DEFAULT_PROTECTED
                .iter()
                .map(|s| s.to_string())
                .collect(),
            ..PolicyConfig::default()
        })
        .unwrap();
        let j = WorkspaceJudge::new(&ws, &policy);
        let root = ws.root().display().to_string();
        assert!(j.inside("src/a.rs") && j.inside("./x") && j.inside("a/../b"));
        assert!(j.inside(&format!("{root}/src/a.rs")));
        assert!(!j.inside("../x") && !j.inside("/tmp/x") && !j.inside("$OUT"));
        assert!(!j.inside("~/x") && !j.inside("a/../../x"));
        assert_eq!(j.sensitive(".env").as_deref(), Some(".env*"));
        assert_eq!(j.sensitive("~/.ssh/id_rsa").as_deref(), Some("id_rsa"));
        assert_eq!(
            j.sensitive("/home/me/.aws/credentials").as_deref(),
            Some(".aws/")
        );
        assert_eq!(j.sensitive("$HOME/.ssh/config").as_deref(), Some(".ssh/"));
        assert_eq!(j.sensitive("src/main.rs"), None);
        assert_eq!(j.protected(".git/config").as_deref(), Some("**/.git/**"));
        assert_eq!(
            j.protected("./.git/hooks/pre-commit").as_deref(),
            Some("**/.git/**")
        );
        // Compared the way git compares `.git` on macOS and Windows file systems, at any depth.
        for spelling in [
            ".GIT/config",
            "git~1/hooks/x",
            ".g\u{200c}it/config",
            "sub/.git/hooks/x",
        ] {
            assert_eq!(
                j.protected(spelling).as_deref(),
                Some("**/.git/**"),
                "{spelling}"
            );
        }
        assert_eq!(
            j.protected(&format!("{root}/.vscode/tasks.json"))
                .as_deref(),
            Some("**/.vscode/**")
        );
        assert_eq!(j.protected("sub/AGENTS.md").as_deref(), Some("AGENTS.md"));
        assert_eq!(j.protected("src/a.rs"), None);
        assert_eq!(
            j.protected("/tmp/.git/config"),
            None,
            "outside is not protected here"
        );
    }
}
