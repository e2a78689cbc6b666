//! Continue's rules: loading `.continue/rules/**/*.md`, the global folder's rules and
//! `AGENTS.md`, deciding which apply, and writing new rule files.
//!
//! Rule kinds follow Continue (`getRuleType`, `getSystemMessageWithRules`): **always**
//! (`alwaysApply: true`, or no globs/regex and `alwaysApply` unset), **auto-attached** (globs
//! and/or regex: applied when the run touches a matching file), **agent-requested**
//! (`alwaysApply: false` with a description: offered through `request_rule`) and **manual**
//! (`alwaysApply: false`, no description: never applied automatically). Nothing here reads the
//! conversation; the caller says which files were touched.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

use super::frontmatter::{self, FrontMatter};
use crate::workspace::Workspace;

/// Largest rule file read, in bytes (larger ones are skipped with a warning).
pub const MAX_RULE_BYTES: u64 = 256 * 1024;
/// Most rule files loaded from one folder.
pub const MAX_RULE_FILES: usize = 500;
/// Largest file whose content is tested against a rule's `regex`.
const MAX_REGEX_FILE_BYTES: u64 = 1024 * 1024;

/// How a rule reaches the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Always,
    AutoAttached,
    AgentRequested,
    Manual,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Always => "always",
            Kind::AutoAttached => "auto-attached",
            Kind::AgentRequested => "agent-requested",
            Kind::Manual => "manual",
        }
    }
}

/// Where a rule file lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// In the workspace; the path is workspace-relative.
    Workspace(String),
    /// In the global folder; the absolute path.
    Global(PathBuf),
}

/// One loaded rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// The front matter's `name`, else the last two segments of the path (`rules/x.md`).
    pub name: String,
    pub description: Option<String>,
    pub globs: Vec<String>,
    pub regex: Vec<String>,
    pub always_apply: Option<bool>,
    pub body: String,
    pub origin: Origin,
    /// Positive globs, and `!` negations.
    include: Vec<(GlobMatcher, bool)>,
    exclude: Vec<(GlobMatcher, bool)>,
    patterns: Vec<regex::Regex>,
}

impl Rule {
    pub fn kind(&self) -> Kind {
        if self.always_apply == Some(true) {
            Kind::Always
        } else if !self.globs.is_empty() || !self.regex.is_empty() {
            Kind::AutoAttached
        } else if self.always_apply == Some(false) {
            if self.description.is_some() {
                Kind::AgentRequested
            } else {
                Kind::Manual
            }
        } else {
            Kind::Always
        }
    }

    /// The rule's file as shown to the model (workspace-relative, or absolute for global ones).
    pub fn location(&self) -> String {
        match &self.origin {
            Origin::Workspace(p) => p.clone(),
            Origin::Global(p) => p.display().to_string(),
        }
    }

    /// Whether an auto-attached rule applies to the touched file `rel` (workspace-relative):
    /// its globs match (when it has globs) and its regex matches the file's content (when it
    /// has a regex). `content` reads the file on demand.
    pub fn matches_file(&self, rel: &str, content: &mut dyn FnMut() -> Option<String>) -> bool {
        if self.kind() != Kind::AutoAttached {
            return false;
        }
        if !self.globs.is_empty() {
            let hit = |(m, base): &(GlobMatcher, bool)| {
                m.is_match(rel)
                    || (*base
                        && Path::new(rel)
                            .file_name()
                            .is_some_and(|n| m.is_match(Path::new(n))))
            };
            if self.include.is_empty() && !self.exclude.is_empty() {
                // Only negations: everything but them.
                if self.exclude.iter().any(hit) {
                    return false;
                }
            } else if !self.include.iter().any(hit) || self.exclude.iter().any(hit) {
                return false;
            }
        }
        if !self.patterns.is_empty() {
            let Some(text) = content() else {
                return false;
            };
            return self.patterns.iter().any(|r| r.is_match(&text));
        }
        true
    }
}

/// Turns one rule file into a [`Rule`]; `fallback_name` is used when it has no `name`.
/// `Ok(None)`: the file is a prompt (`invokable: true`), not a rule.
pub fn parse_rule(text: &str, fallback_name: &str, origin: Origin) -> Result<Option<Rule>, String> {
    let (yaml, body) = frontmatter::split(text);
    let fm = match yaml {
        Some(y) => FrontMatter::parse(y)?,
        None => FrontMatter::default(),
    };
    if fm.bool("invokable")? == Some(true) {
        return Ok(None);
    }
    let globs = fm.list("globs");
    let regex = fm.list("regex");
    let mut include = Vec::new();
    let mut exclude = Vec::new();
    for g in &globs {
        let (neg, pat) = match g.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, g.as_str()),
        };
        let m = GlobBuilder::new(pat.trim_start_matches("./"))
            .literal_separator(true)
            .build()
            .map_err(|e| format!("`globs`: {g:?} is not a glob ({e})"))?
            .compile_matcher();
        let entry = (m, !pat.contains('/'));
        if neg {
            exclude.push(entry);
        } else {
            include.push(entry);
        }
    }
    let mut patterns = Vec::new();
    for r in &regex {
        patterns.push(
            regex::RegexBuilder::new(r)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| format!("`regex`: {r:?} is not a regular expression ({e})"))?,
        );
    }
    Ok(Some(Rule {
        name: fm
            .string("name")
            .unwrap_or_else(|| fallback_name.to_string()),
        description: fm.string("description"),
        globs,
        regex,
        always_apply: fm.bool("alwaysApply")?,
        body: body.trim().to_string(),
        origin,
        include,
        exclude,
        patterns,
    }))
}

/// The rules of a workspace and the global folder, and what could not be loaded.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub rules: Vec<Rule>,
    /// One line per file that was skipped, for the log and `request_rule`'s errors.
    pub warnings: Vec<String>,
}

impl Rules {
    /// Loads `AGENTS.md` (when `agents_md`), `<ws>/.continue/rules/**/*.md` and
    /// `<global>/rules/**/*.md`, in that order (files sorted by path).
    pub fn load(ws: &Workspace, global: Option<&Path>, agents_md: bool) -> Rules {
        let mut out = Rules::default();
        if agents_md
            && let Some(text) = read_small_ws(ws, Path::new("AGENTS.md"), &mut out.warnings)
        {
            let body = frontmatter::split(&text).1.trim().to_string();
            if !body.is_empty() {
                out.rules.push(Rule {
                    name: "AGENTS.md".into(),
                    description: None,
                    globs: Vec::new(),
                    regex: Vec::new(),
                    always_apply: Some(true),
                    body,
                    origin: Origin::Workspace("AGENTS.md".into()),
                    include: Vec::new(),
                    exclude: Vec::new(),
                    patterns: Vec::new(),
                });
            }
        }
        let local = Path::new(".continue/rules");
        for rel in files_below_ws(ws, local, 8, MAX_RULE_FILES, &mut out.warnings) {
            if rel.extension().is_none_or(|e| e != "md") {
                continue;
            }
            if let Some(text) = read_small_ws(ws, &rel, &mut out.warnings) {
                let shown = rel.to_string_lossy().into_owned();
                out.add(&text, &rel, Origin::Workspace(shown));
            }
        }
        if let Some(g) = global {
            for path in markdown_files(&g.join("rules"), &mut out.warnings) {
                if let Some(text) = read_small(&path, &mut out.warnings) {
                    out.add(&text, &path, Origin::Global(path.clone()));
                }
            }
        }
        out
    }

    fn add(&mut self, text: &str, path: &Path, origin: Origin) {
        match parse_rule(text, &fallback_name(path), origin) {
            Ok(Some(rule)) => self.rules.push(rule),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "rule skipped");
                self.warnings
                    .push(format!("{} was skipped: {e}", path.display()));
            }
        }
    }

    /// The rule named exactly `name`.
    pub fn find(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name == name)
    }

    /// Rules `request_rule` offers: `alwaysApply: false`, no globs or regex (Continue lists
    /// those; manual ones without a description are listed with their name only).
    pub fn requestable(&self) -> impl Iterator<Item = &Rule> {
        self.rules
            .iter()
            .filter(|r| r.always_apply == Some(false) && r.globs.is_empty() && r.regex.is_empty())
    }

    /// The rules that apply given the files the run touched (workspace-relative paths):
    /// every `always` rule, and every auto-attached one matching a touched file.
    pub fn applicable(&self, ws: &Workspace, touched: &[String]) -> Vec<(&Rule, Option<String>)> {
        let mut out = Vec::new();
        for rule in &self.rules {
            match rule.kind() {
                Kind::Always => out.push((rule, None)),
                Kind::AutoAttached => {
                    for rel in touched {
                        let mut content = || read_workspace_text(ws, rel);
                        if rule.matches_file(rel, &mut content) {
                            out.push((rule, Some(rel.clone())));
                            break;
                        }
                    }
                }
                Kind::AgentRequested | Kind::Manual => {}
            }
        }
        out
    }
}

/// `rules/my-rule.md` for `…/.continue/rules/my-rule.md` (Continue's fallback name).
fn fallback_name(path: &Path) -> String {
    let parts: Vec<String> = path
        .iter()
        .rev()
        .take(2)
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("/")
}

/// Reads a workspace text file of at most [`MAX_RULE_BYTES`], beneath the root and through no
/// symbolic link (a command may have replaced a rule or a folder with one). Missing is silent;
/// anything else that stops it is a warning.
pub(crate) fn read_small_ws(
    ws: &Workspace,
    rel: &Path,
    warnings: &mut Vec<String>,
) -> Option<String> {
    use crate::workspace::nofollow::ReadError;
    match ws.read_nofollow(rel, MAX_RULE_BYTES) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(s) => Some(s),
            Err(_) => {
                warnings.push(format!(
                    "{} was skipped: it is not UTF-8 text",
                    rel.display()
                ));
                None
            }
        },
        Err(ReadError::NotFound) => None,
        Err(e) => {
            tracing::warn!(file = %rel.display(), error = %e, "not read");
            warnings.push(format!("{} was skipped: it {e}", rel.display()));
            None
        }
    }
}

/// Regular files below a workspace folder (workspace-relative, sorted), through no symbolic
/// link, at most `max`.
pub(crate) fn files_below_ws(
    ws: &Workspace,
    rel: &Path,
    max_depth: usize,
    max: usize,
    warnings: &mut Vec<String>,
) -> Vec<PathBuf> {
    match ws.files_below_nofollow(rel, max_depth, max) {
        Ok(below) => {
            if below.cut {
                warnings.push(format!(
                    "{}: only the first {max} files were read",
                    rel.display()
                ));
            }
            for (path, kind) in below.special {
                warnings.push(format!(
                    "{} was skipped: it is {kind}, not a regular file",
                    path.display()
                ));
            }
            below.files
        }
        Err(e) => {
            warnings.push(format!(
                "{} was not read: {}",
                rel.display(),
                if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                    "it is or goes through a symbolic link, which is not followed".to_string()
                } else {
                    e.to_string()
                }
            ));
            Vec::new()
        }
    }
}

/// Reads a text file of at most [`MAX_RULE_BYTES`] outside the workspace (the global folder;
/// not following a final symlink). Missing is silent.
pub(crate) fn read_small(path: &Path, warnings: &mut Vec<String>) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.len() > MAX_RULE_BYTES {
        warnings.push(format!(
            "{} was skipped: it is {} bytes (the limit is {MAX_RULE_BYTES})",
            path.display(),
            meta.len()
        ));
        return None;
    }
    // Read to the limit whatever the size said: the file may have grown since, or been
    // swapped for a link or a FIFO.
    match crate::bounded::read_file(path, MAX_RULE_BYTES, crate::bounded::Links::Refuse) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(s) => Some(s),
            Err(_) => {
                warnings.push(format!(
                    "{} was skipped: it is not UTF-8 text",
                    path.display()
                ));
                None
            }
        },
        Err(e) => {
            warnings.push(format!("{} was skipped: {e}", path.display()));
            None
        }
    }
}

/// Every `*.md` file below `dir` (recursive, sorted, symlinks not followed), at most
/// [`MAX_RULE_FILES`]. For folders outside the workspace; see [`files_below_ws`].
pub(crate) fn markdown_files(dir: &Path, warnings: &mut Vec<String>) -> Vec<PathBuf> {
    files_below(dir, 8, MAX_RULE_FILES, warnings)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect()
}

/// Regular files below `dir` (outside the workspace), sorted, without following symlinks, at
/// most `max`.
pub(crate) fn files_below(
    dir: &Path,
    max_depth: usize,
    max: usize,
    warnings: &mut Vec<String>,
) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0usize)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut entries: Vec<_> = rd.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries.into_iter().rev() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && depth < max_depth {
                stack.push((e.path(), depth + 1));
            } else if ft.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    if out.len() > max {
        warnings.push(format!(
            "{}: only the first {max} of {} files were read",
            dir.display(),
            out.len()
        ));
        out.truncate(max);
    }
    out
}

/// A workspace file's text for regex rules (beneath the root; at most 1 MB; UTF-8 lossy).
fn read_workspace_text(ws: &Workspace, rel: &str) -> Option<String> {
    use std::io::Read;
    let p = ws.resolve(rel).ok()?;
    if ws.sensitive_match(&p, false).is_some() {
        return None;
    }
    let f = ws.open_file(&p, rel).ok()?;
    let mut buf = Vec::new();
    f.take(MAX_REGEX_FILE_BYTES).read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// Continue's `sanitizeRuleName`: lower case, only `a-z0-9`, whitespace and `-` kept,
/// whitespace runs become one `-`, dashes trimmed at both ends. Never contains `/` or `.`.
pub fn sanitize_rule_name(name: &str) -> String {
    let lower = name.to_lowercase();
    let kept: String = lower
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c.is_whitespace() || *c == '-')
        .collect();
    let mut out = String::new();
    let mut in_space = false;
    for c in kept.chars() {
        if c.is_whitespace() {
            in_space = true;
        } else {
            if in_space {
                out.push('-');
                in_space = false;
            }
            out.push(c);
        }
    }
    if in_space {
        out.push('-');
    }
    out.trim_matches('-').to_string()
}

/// The text of a new rule file, as Continue's `createRuleMarkdown` writes it: front matter
/// with `description`, `globs`, `regex`, `alwaysApply` when given (the name only sets the file
/// name), a blank line, the rule.
pub fn rule_markdown(
    description: Option<&str>,
    globs: Option<&str>,
    regex: Option<&str>,
    always_apply: Option<bool>,
    rule: &str,
) -> Result<String, String> {
    use serde_norway::Value;
    let mut pairs: Vec<(&str, Value)> = Vec::new();
    if let Some(g) = globs {
        pairs.push(("globs", Value::String(g.to_string())));
    }
    if let Some(r) = regex {
        pairs.push(("regex", Value::String(r.to_string())));
    }
    if let Some(d) = description {
        pairs.push(("description", Value::String(d.to_string())));
    }
    if let Some(a) = always_apply {
        pairs.push(("alwaysApply", Value::Bool(a)));
    }
    frontmatter::write(&pairs, rule)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn sanitized(input: &str, expected: &str) {
        assert_eq!(sanitize_rule_name(input), expected, "{input:?}");
    }

    #[test]
    fn sanitizes_like_continue_and_never_escapes() {
        sanitized("Special Ch@racters & Spaces", "special-chracters-spaces");
        sanitized("  My  Rule  ", "my-rule");
        sanitized("../../etc/passwd", "etcpasswd");
        sanitized("..", "");
        sanitized("a/b\\c.md", "abcmd");
        sanitized("--x--", "x");
        sanitized("Tabs\tand\nnewlines", "tabs-and-newlines");
        sanitized("ünïcödé", "ncd");
        sanitized("---", "");
        sanitized("x\n---\nalwaysApply: true", "x-----alwaysapply-true");
    }

    fn rule(text: &str) -> Rule {
        parse_rule(
            text,
            "rules/r.md",
            Origin::Workspace(".continue/rules/r.md".into()),
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn kinds_follow_continue() {
        assert_eq!(rule("Just text").kind(), Kind::Always);
        assert_eq!(
            rule("---\nalwaysApply: true\nglobs: '*.rs'\n---\nx").kind(),
            Kind::Always
        );
        assert_eq!(
            rule("---\nglobs: '*.rs'\n---\nx").kind(),
            Kind::AutoAttached
        );
        assert_eq!(
            rule("---\nregex: 'unsafe'\n---\nx").kind(),
            Kind::AutoAttached
        );
        assert_eq!(
            rule("---\nalwaysApply: false\ndescription: d\n---\nx").kind(),
            Kind::AgentRequested
        );
        assert_eq!(rule("---\nalwaysApply: false\n---\nx").kind(), Kind::Manual);
        assert_eq!(rule("---\ndescription: d\n---\nx").kind(), Kind::Always);
        let r = rule("---\nname: Style\n---\n\n  Use tabs.\n");
        assert_eq!((r.name.as_str(), r.body.as_str()), ("Style", "Use tabs."));
        assert_eq!(rule("x").name, "rules/r.md");
        assert!(
            parse_rule(
                "---\ninvokable: true\n---\nx",
                "p",
                Origin::Global("/p".into())
            )
            .unwrap()
            .is_none()
        );
        assert!(parse_rule("---\nglobs: '['\n---\nx", "p", Origin::Global("/p".into())).is_err());
        assert!(parse_rule("---\nregex: '('\n---\nx", "p", Origin::Global("/p".into())).is_err());
    }

    #[test]
    fn globs_match_paths_names_and_negations() {
        let m = |r: &Rule, p: &str| r.matches_file(p, &mut || None);
        let r = rule("---\nglobs: ['src/**/*.ts', '!src/gen/**']\n---\nx");
        assert!(m(&r, "src/a/b.ts"));
        assert!(!m(&r, "src/gen/b.ts"));
        assert!(!m(&r, "lib/b.ts"));
        let r = rule("---\nglobs: '*.py'\n---\nx");
        assert!(m(&r, "deep/down/x.py"));
        assert!(!m(&r, "x.pyc"));
        let r = rule("---\nglobs: '*.rs'\nregex: 'unsafe\\s*\\{'\n---\nx");
        assert!(!m(&r, "a.rs"));
        assert!(r.matches_file("a.rs", &mut || Some("fn f() { unsafe { } }".into())));
        assert!(!r.matches_file("a.py", &mut || Some("unsafe {".into())));
    }

    #[test]
    fn a_rules_folder_that_links_outside_the_workspace_is_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("rules")).unwrap();
        std::fs::write(outside.join("rules/leak.md"), "LEAK").unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(&outside, root.join(".continue")).unwrap();
        std::os::unix::fs::symlink(outside.join("rules/leak.md"), root.join("AGENTS.md")).unwrap();
        let ws = Workspace::open(&root, &[]).unwrap();
        let loaded = Rules::load(&ws, None, true);
        assert!(loaded.rules.is_empty(), "{:?}", loaded.rules);
        assert!(
            loaded.warnings.iter().any(|w| w
                .contains(".continue/rules was not read: it is or goes through a symbolic link")),
            "{:?}",
            loaded.warnings
        );
        // Links inside the workspace are not followed either: a command could have made one
        // point anywhere by the time the rules are read.
        std::fs::remove_file(root.join(".continue")).unwrap();
        std::fs::create_dir_all(root.join(".continue/rules")).unwrap();
        std::fs::write(root.join("notes.md"), "IN-WORKSPACE").unwrap();
        std::os::unix::fs::symlink("../../notes.md", root.join(".continue/rules/a.md")).unwrap();
        std::fs::write(root.join(".continue/rules/b.md"), "REAL RULE").unwrap();
        let loaded = Rules::load(&ws, None, false);
        let bodies: Vec<&str> = loaded.rules.iter().map(|r| r.body.as_str()).collect();
        assert_eq!(bodies, ["REAL RULE"], "{:?}", loaded.warnings);
        // The same folder as the global one is read.
        let global = Rules::load(&ws, Some(&outside), false);
        let bodies: Vec<&str> = global.rules.iter().map(|r| r.body.as_str()).collect();
        assert_eq!(bodies, ["REAL RULE", "LEAK"]);
    }

    #[test]
    fn rule_markdown_round_trips() {
        let text = rule_markdown(
            Some("When: \"always\"\n---\nalwaysApply: true"),
            Some("**/*.{ts,tsx}"),
            None,
            Some(false),
            "Prefer `const`.\n",
        )
        .unwrap();
        let r = rule(&text);
        assert_eq!(r.globs, ["**/*.{ts,tsx}"]);
        assert_eq!(r.always_apply, Some(false));
        assert_eq!(r.body, "Prefer `const`.");
        assert_eq!(
            r.description.as_deref(),
            Some("When: \"always\"\n---\nalwaysApply: true")
        );
        assert_eq!(r.kind(), Kind::AutoAttached);
    }
}
