//! Tool calls waiting for a person's approval, and the allow rules that "always allow" writes.
//!
//! A run whose call needs approval registers it here ([`Approvals::ask`]) and waits on the
//! returned [`Ticket`]; `GET /v1/approvals` lists what waits and `POST /v1/approvals/{id}`
//! answers it ([`Approvals::answer`]). A ticket that is dropped (the run was cancelled, or its
//! wait timed out) removes its entry, so the list only ever shows calls someone still waits on.
//!
//! Rules written by "always allow" are kept per workspace in the state directory
//! (`approved-rules.toml`, the same `allow = [...]` syntax as the config) and loaded on start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::policy::Target;

/// What someone answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Approve {
        /// Also write [`PendingInfo::rules`] so that such calls no longer ask.
        always: bool,
    },
    Deny {
        /// Passed on to the model.
        reason: Option<String>,
    },
}

/// A call waiting for approval, as the API and the console show it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingInfo {
    pub id: String,
    pub run_id: String,
    pub tool: String,
    /// The call's arguments (JSON text, as the model wrote them).
    pub arguments: String,
    /// Why it needs approval (the rule or default that asked).
    pub reason: String,
    /// The allow rules "always" would add.
    pub rules: Vec<String>,
    /// Unix seconds.
    pub created_at: u64,
    pub expires_at: u64,
}

/// Why an answer was not taken.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error(
        "no tool call is waiting for approval under the id {0:?} (it was answered, timed out, or its run ended); GET /v1/approvals lists the waiting ones"
    )]
    NotFound(String),
    #[error("the approval was taken, but the rule could not be saved in {path}: {error}")]
    SaveRule { path: String, error: String },
}

struct Pending {
    info: PendingInfo,
    answer: oneshot::Sender<Verdict>,
}

/// How recently someone must have listed the waiting calls (`GET /v1/approvals`) to count as
/// following them: the console lists them every second, a script polling them at least every
/// few seconds counts too.
pub const FOLLOWING: Duration = Duration::from_secs(10);

/// The server's waiting calls.
pub struct Approvals {
    pending: Mutex<BTreeMap<String, Pending>>,
    rules_file: PathBuf,
    /// When someone last listed the waiting calls: with `approvals.mode = "auto"`, a run
    /// waits for an approval only while someone follows them (or its client shows them).
    last_followed: Mutex<Option<std::time::Instant>>,
    /// Held while the rules file is read, extended and written back, so two "always"
    /// answers at once keep both rules.
    rules_lock: Mutex<()>,
}

/// A registered wait; dropping it withdraws the call from the list.
pub struct Ticket {
    pub info: PendingInfo,
    approvals: Arc<Approvals>,
    answer: Option<oneshot::Receiver<Verdict>>,
}

impl Ticket {
    /// The answer, or `None` when nobody answered within `timeout`.
    pub async fn wait(mut self, timeout: Duration) -> Option<Verdict> {
        let rx = self.answer.take()?;
        tokio::time::timeout(timeout, rx).await.ok()?.ok()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut p) = self.approvals.pending.lock() {
            p.remove(&self.info.id);
        }
    }
}

#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct RulesFile {
    #[serde(default)]
    allow: Vec<String>,
}

/// `approved-rules.toml` is read whole; a list this long is not one a person keeps by hand.
const MAX_RULES_FILE_BYTES: u64 = 4 * 1024 * 1024;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Approvals {
    /// `state_dir` is the workspace's folder in the state directory.
    pub fn new(state_dir: &Path) -> Approvals {
        Approvals {
            pending: Mutex::default(),
            rules_file: state_dir.join("approved-rules.toml"),
            last_followed: Mutex::default(),
            rules_lock: Mutex::default(),
        }
    }

    /// Someone (the console, a script) looked at the waiting calls now.
    pub fn followed(&self) {
        if let Ok(mut t) = self.last_followed.lock() {
            *t = Some(std::time::Instant::now());
        }
    }

    /// Whether someone looked at the waiting calls within `window`.
    pub fn followed_within(&self, window: Duration) -> bool {
        self.last_followed
            .lock()
            .ok()
            .and_then(|t| *t)
            .is_some_and(|t| t.elapsed() <= window)
    }

    /// The file "always allow" writes to.
    pub fn rules_file(&self) -> &Path {
        &self.rules_file
    }

    /// The rules saved by earlier "always allow" answers.
    pub fn saved_rules(&self) -> Result<Vec<String>, String> {
        use crate::bounded::{Links, read_file_string};
        match read_file_string(&self.rules_file, MAX_RULES_FILE_BYTES, Links::Refuse) {
            Ok(text) => toml::from_str::<RulesFile>(&text)
                .map(|f| f.allow)
                .map_err(|e| format!("{} is not valid: {e}", self.rules_file.display())),
            Err(e) if e.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(format!(
                "cannot read {}: {e} (the limit is {MAX_RULES_FILE_BYTES} bytes of rules; \
                 remove rules you no longer need, or move them to policy.allow in the config)",
                self.rules_file.display()
            )),
        }
    }

    /// Appends rules to the saved ones, under the rules lock, written atomically and for the
    /// owner only ([`crate::private_file::write`]). File work: call it off the async threads.
    pub fn save_rules(&self, rules: &[String]) -> Result<(), String> {
        let _held = self.rules_lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut all = self.saved_rules()?;
        for r in rules {
            if !all.contains(r) {
                all.push(r.clone());
            }
        }
        let text = format!(
            "# Allow rules added by \"always allow\" answers to approvals (same syntax as\n\
             # policy.allow in the config). Delete a line to take it back.\n{}",
            toml::to_string(&RulesFile { allow: all }).map_err(|e| e.to_string())?
        );
        crate::private_file::write(&self.rules_file, text.as_bytes()).map_err(|e| e.to_string())
    }

    /// Registers a call that waits for approval.
    pub fn ask(
        self: &Arc<Self>,
        run_id: &str,
        tool: &str,
        arguments: &str,
        reason: &str,
        rules: Vec<String>,
        timeout: Duration,
    ) -> Ticket {
        let (tx, rx) = oneshot::channel();
        let created_at = now();
        let info = PendingInfo {
            id: format!("ap-{}{:08x}", run_id, fastrand::u32(..)),
            run_id: run_id.to_string(),
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            reason: reason.to_string(),
            rules,
            created_at,
            expires_at: created_at + timeout.as_secs(),
        };
        if let Ok(mut p) = self.pending.lock() {
            p.insert(
                info.id.clone(),
                Pending {
                    info: info.clone(),
                    answer: tx,
                },
            );
        }
        Ticket {
            info,
            approvals: Arc::clone(self),
            answer: Some(rx),
        }
    }

    /// Every call waiting now, oldest first.
    pub fn list(&self) -> Vec<PendingInfo> {
        let Ok(p) = self.pending.lock() else {
            return Vec::new();
        };
        let mut v: Vec<PendingInfo> = p.values().map(|p| p.info.clone()).collect();
        v.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        v
    }

    /// Answers a waiting call. With "always", the rules are saved first, so that an approval
    /// whose rule cannot be saved is reported (the call still runs).
    pub fn answer(&self, id: &str, verdict: Verdict) -> Result<PendingInfo, AnswerError> {
        let pending = self
            .pending
            .lock()
            .ok()
            .and_then(|mut p| p.remove(id))
            .ok_or_else(|| AnswerError::NotFound(id.to_string()))?;
        let save = match verdict {
            Verdict::Approve { always: true } => self.save_rules(&pending.info.rules),
            _ => Ok(()),
        };
        // The run may have gone in the meantime; then nobody waits for the answer.
        let _ = pending.answer.send(verdict);
        save.map_err(|error| AnswerError::SaveRule {
            path: self.rules_file.display().to_string(),
            error,
        })?;
        Ok(pending.info)
    }
}

/// The allow rules that make calls like this one run without asking, never wider than the
/// call: for a command line, the exact words of each part it runs; for a file tool, the exact
/// path(s), anchored at the workspace root (`/README.md`, not `README.md`, which would match
/// the name at any depth); for a search, the exact pattern; for a fetch, the host. Glob
/// characters in a name or command are escaped, so they only match themselves.
///
/// Some calls cannot be expressed exactly, and get no rule for that part (the approval then
/// covers this call only): a command part with a `$` or backtick expansion (what runs depends
/// on values at run time), with a word that contains whitespace or is empty (the rule matches
/// the words joined by spaces, so `rm "a b"` would also allow `rm a b`), with leading
/// assignments (`FOO=1 make`) or output redirections (they are not part of the words a rule
/// sees); a command line the parser does not read; a path that is not UTF-8.
pub fn rules_for(tool: &str, targets: &[Target]) -> Vec<String> {
    if let Some(Target::Command { line, .. }) = targets.first() {
        let Ok(parts) = crate::policy::command::parse(line) else {
            // A line the parser does not read always asks: no rule could allow it.
            return Vec::new();
        };
        let mut rules: Vec<String> = Vec::new();
        for part in &parts {
            if let Some(rule) = command_rule(part)
                && !rules.contains(&rule)
            {
                rules.push(rule);
            }
        }
        return rules;
    }
    let hosts: Vec<&str> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Url { host, .. } => Some(host.as_str()),
            _ => None,
        })
        .collect();
    if let Some(host) = hosts.first() {
        return vec![format!("{tool}(domain:{host})")];
    }
    let mut specs: Vec<String> = Vec::new();
    for t in targets {
        let spec = match t {
            Target::Path { path, .. } => {
                let Some(rel) = path.rel().to_str() else {
                    return Vec::new();
                };
                // Anchored: `/` + the workspace-relative path (never starts with `/`).
                format!("/{}", glob_literal(rel))
            }
            Target::Pattern(p) => {
                let lit = glob_literal(p);
                // A leading `/` would anchor a path rule; escaped, it is the character.
                match lit.strip_prefix('/') {
                    Some(rest) => format!("\\/{rest}"),
                    None => lit,
                }
            }
            Target::Command { .. } | Target::Url { .. } => return Vec::new(),
        };
        if !specs.contains(&spec) {
            specs.push(spec);
        }
    }
    match specs.as_slice() {
        [] => vec![tool.to_string()],
        [one] => vec![format!("{tool}({one})")],
        many => vec![format!("{tool}({{{}}})", many.join(","))],
    }
}

/// The rule that allows exactly this command part, if one can say so (see [`rules_for`]): its
/// words and redirections as written (`Part::full_text`, what saved rules are matched
/// against), when none is an expansion and none holds white space (which would make two
/// different commands read alike).
fn command_rule(part: &crate::policy::command::Part) -> Option<String> {
    let plain = |w: &crate::policy::command::Word| {
        !w.dynamic
            && !w.text.is_empty()
            && !w.text.contains(char::is_whitespace)
            && !w.text.contains(['$', '`'])
    };
    let exact = !part.words.is_empty()
        && part.assignments.is_empty()
        && part.words.iter().all(plain)
        && part.redirects.iter().all(|r| plain(&r.target));
    exact.then(|| format!("run_terminal_command({})", glob_literal(&part.full_text())))
}

/// `text` as a glob that matches exactly `text`: every glob character (and `\`, and `,`
/// which separates alternatives) escaped with a backslash; whitespace at the end, which the
/// rule parser would trim, in a class (`[ ]`).
fn glob_literal(text: &str) -> String {
    let keep = text.trim_end().len();
    let mut out = String::with_capacity(text.len() + 8);
    for (i, c) in text.char_indices() {
        match c {
            '\\' | '*' | '?' | '[' | ']' | '{' | '}' | ',' => {
                out.push('\\');
                out.push(c);
            }
            c if i >= keep => {
                out.push('[');
                out.push(c);
                out.push(']');
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decision on `tool` over `path` once `rules` are approved.
    fn decide_with(rules: &[String], tool: &str, path: &str) -> String {
        let tmp = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::open(tmp.path(), &[]).unwrap();
        let policy = crate::policy::Policy::new(&crate::config::PolicyConfig {
            approved: rules.to_vec(),
            ..Default::default()
        })
        .unwrap_or_else(|e| panic!("{rules:?} do not compile: {e}"));
        let target = Target::Path {
            path: ws.resolve(path).unwrap(),
            access: crate::policy::Access::Edit,
        };
        policy.decide(tool, &[target], &ws).label().to_string()
    }

    #[test]
    fn always_allowing_a_file_saves_the_exact_path_anchored_at_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::open(tmp.path(), &[]).unwrap();
        // (file, its rule, other paths the rule must not allow)
        let cases: &[(&str, &str, &[&str])] = &[
            ("README.md", "/README.md", &["sub/README.md", "README.mdx"]),
            ("config", "/config", &[".git/config", "a/config"]),
            (
                "src/a[1].rs",
                "/src/a\\[1\\].rs",
                &["src/a1.rs", "x/src/a[1].rs"],
            ),
            ("x*", "/x\\*", &["xyz", "x"]),
            ("q?.txt", "/q\\?.txt", &["qa.txt"]),
            ("{a,b}", "/\\{a\\,b\\}", &["a", "b"]),
            ("a\\b", "/a\\\\b", &["ab"]),
            ("d/**", "/d/\\*\\*", &["d/e/f"]),
        ];
        for (file, spec, others) in cases {
            let rules = rules_for(
                "edit_existing_file",
                &[Target::Path {
                    path: ws.resolve(file).unwrap(),
                    access: crate::policy::Access::Edit,
                }],
            );
            assert_eq!(rules, [format!("edit_existing_file({spec})")], "{file:?}");
            assert_eq!(
                decide_with(&rules, "edit_existing_file", file),
                "allow",
                "{file:?}"
            );
            for other in *others {
                assert_eq!(
                    decide_with(&rules, "edit_existing_file", other),
                    "ask",
                    "the rule for {file:?} also allows {other:?}"
                );
            }
        }
    }

    #[test]
    fn always_allowing_a_search_saves_the_exact_pattern() {
        let rules = rules_for("grep_search", &[Target::Pattern("fn *main".into())]);
        assert_eq!(rules, ["grep_search(fn \\*main)"]);
        // (codebase asks by default, so what a rule allows shows.)
        let tmp = tempfile::tempdir().unwrap();
        let ws = crate::workspace::Workspace::open(tmp.path(), &[]).unwrap();
        // (query, its rule, other queries the rule must not allow)
        let cases: &[(&str, &str, &[&str])] = &[
            // A leading `/` would anchor a path rule: escaped, it is the character.
            ("/api/v1", "\\/api/v1", &["api/v1", "/api/v2"]),
            // Whitespace at the end would be trimmed from the rule: it goes in a class.
            ("todo ", "todo[ ]", &["todo"]),
            ("a*", "a\\*", &["abc"]),
        ];
        for (query, spec, others) in cases {
            let rules = rules_for("codebase", &[Target::Pattern((*query).into())]);
            assert_eq!(rules, [format!("codebase({spec})")]);
            let policy = crate::policy::Policy::new(&crate::config::PolicyConfig {
                approved: rules,
                ..Default::default()
            })
            .unwrap();
            let decide = |q: &str| {
                policy
                    .decide("codebase", &[Target::Pattern(q.into())], &ws)
                    .label()
            };
            assert_eq!(decide(query), "allow", "{query:?}");
            for other in *others {
                assert_eq!(
                    decide(other),
                    "ask",
                    "the rule for {query:?} allows {other:?}"
                );
            }
        }
    }

    #[test]
    fn always_allowing_a_command_saves_each_exact_part_or_nothing() {
        let rules_of = |line: &str| {
            rules_for(
                "run_terminal_command",
                &[Target::Command {
                    line: line.into(),
                    sandboxed: true,
                }],
            )
        };
        assert_eq!(
            rules_of("make lint && ./x.sh '--n=[1]' '*.rs'"),
            [
                "run_terminal_command(make lint)",
                "run_terminal_command(./x.sh --n=\\[1\\] \\*.rs)"
            ]
        );
        // A redirection is part of the rule, so it covers that target only.
        assert_eq!(
            rules_of("echo hi > notes.txt"),
            ["run_terminal_command(echo hi > notes.txt)"]
        );
        // What a rule cannot say exactly gets no rule: the approval covers this call only.
        for line in [
            "ls *.rs",
            "touch 'a b'",
            "touch ''",
            "cat $FILE",
            "FOO=1 make",
            "echo hi > \"$OUT\"",
            "$EDITOR x",
            "for x in a; do echo; done",
        ] {
            assert_eq!(rules_of(line), Vec::<String>::new(), "{line}");
        }
        // `echo $(date)`: the outer part has an expansion; the inner command is exact.
        assert_eq!(rules_of("echo $(date)"), ["run_terminal_command(date)"]);
        assert_eq!(rules_of("echo `id`"), ["run_terminal_command(id)"]);
        // A saved rule matches only the words it was made from.
        let rule = |line: &str| {
            let r = rules_of(line).remove(0);
            let inner = r
                .strip_prefix("run_terminal_command(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap()
                .to_string();
            crate::policy::command::UserRule::new(
                crate::policy::command::Verdict::Allow,
                &inner,
                "test",
            )
            .unwrap()
        };
        let r = rule("ls '*.rs'");
        assert!(r.matches_line("ls '*.rs'"));
        assert!(!r.matches_line("ls a.rs"));
        assert!(!r.matches_line("ls '*.rs' extra"));
        // An unquoted glob reads alike but is another command; the policy never lets an
        // "always allow" rule match it (`CommandPolicy`), as the table tests.
        let r = rule(r"printf 'a\\b'");
        assert!(r.matches_line(r"printf 'a\\b'"));
        assert!(!r.matches_line("printf ab"));
        let r = rule("git log -n 3");
        assert!(r.matches_line("git log -n 3"));
        assert!(!r.matches_line("git log -n 30"));
        assert!(!r.matches_line("git log -n 3 -p"));
    }

    #[test]
    fn a_saved_rules_file_is_read_to_a_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let approvals = Approvals::new(tmp.path());
        assert_eq!(approvals.saved_rules().unwrap(), Vec::<String>::new());
        approvals.save_rules(&["read_file(/a)".into()]).unwrap();
        assert_eq!(approvals.saved_rules().unwrap(), ["read_file(/a)"]);
        let huge = format!("allow = [\"read_file(/{})\"]\n", "a".repeat(5 << 20));
        std::fs::write(approvals.rules_file(), huge).unwrap();
        let e = approvals.saved_rules().unwrap_err();
        assert!(
            e.contains("is larger than 4,194,304 bytes (the limit is 4194304 bytes of rules;"),
            "{e}"
        );
    }

    #[test]
    fn always_allowing_a_fetch_saves_a_domain_rule_that_compiles() {
        for (url, host) in [
            ("https://docs.rs/serde", "docs.rs"),
            ("http://127.0.0.1:8080/x", "127.0.0.1"),
            ("http://[::1]:8080/x", "[::1]"),
        ] {
            let rules = rules_for(
                "fetch_url_content",
                &[Target::Url {
                    url: url.into(),
                    host: host.into(),
                }],
            );
            assert_eq!(rules, [format!("fetch_url_content(domain:{host})")]);
            let cfg = crate::config::PolicyConfig {
                approved: rules,
                ..Default::default()
            };
            assert!(crate::policy::Policy::new(&cfg).is_ok(), "{url}");
        }
    }
}
