//! The permission policy: a pure function from a tool call's targets to a [`Decision`].
//!
//! Vocabulary from Continue: a tool's base level is `allowedWithoutPermission` (allow),
//! `allowedWithPermission` (ask) or `disabled`. On top come rules in the form `tool` or
//! `tool(specifier)` in three lists. Evaluation order: a disabled tool is refused; then deny
//! rules, then ask rules, then allow rules, then the tool's base level. A specifier is a
//! glob matched against the workspace-relative path (path tools) or the pattern (search
//! tools). Security-sensitive files are refused for every tool that reads content, whatever
//! the rules say. Nothing a model or client sends can change the result: the inputs are the
//! configuration and the resolved targets. Only `tools::registry` calls [`Policy::decide`].

use std::collections::BTreeMap;

use globset::{GlobBuilder, GlobMatcher};

use crate::config::PolicyConfig;
pub use crate::config::{Level, REFERENCE_TOOLS, known_tool_names};
pub mod command;
mod paths;
mod target;

pub use paths::WorkspaceJudge;
pub use target::{Access, Target};

use crate::workspace::Workspace;
use command::{Assessment, Class, CommandPolicy, PathJudge, UserRule, Verdict};

/// What the policy says about one tool call, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow {
        reason: String,
    },
    /// Needs approval. `person_only`: only a person's explicit answer approves it (the
    /// console, `/v1/approvals`, an in-band reply, the client's own approval after a hand-off);
    /// `--yes` does not.
    Ask {
        reason: String,
        person_only: bool,
    },
    Deny {
        reason: String,
    },
}

impl Decision {
    pub fn reason(&self) -> &str {
        match self {
            Decision::Allow { reason }
            | Decision::Ask { reason, .. }
            | Decision::Deny { reason } => reason,
        }
    }

    /// An ask (not `person_only`): what `--yes` approves.
    pub fn ask(reason: String) -> Decision {
        Decision::Ask {
            reason,
            person_only: false,
        }
    }

    /// Whether only a person may approve it.
    pub fn person_only(&self) -> bool {
        matches!(
            self,
            Decision::Ask {
                person_only: true,
                ..
            }
        )
    }

    pub fn label(&self) -> &'static str {
        match self {
            Decision::Allow { .. } => "allow",
            Decision::Ask { .. } => "ask",
            Decision::Deny { .. } => "deny",
        }
    }
}

/// The reference's default level for a tool (`Ask` for names it does not list).
pub fn reference_default(tool: &str) -> Level {
    REFERENCE_TOOLS
        .iter()
        .find(|(n, _)| *n == tool)
        .map(|(_, l)| *l)
        .unwrap_or(Level::Ask)
}

#[derive(Debug, Clone)]
struct Rule {
    /// Where it came from, for the log and the model: `policy.deny[0] read_file(**/.env)`.
    source: String,
    tool: String,
    /// For MCP tool names with `*` (`mcp__github__*`): the glob over tool names.
    tool_glob: Option<GlobMatcher>,
    spec: Option<Spec>,
}

#[derive(Debug, Clone)]
enum Spec {
    /// A glob over the path (or pattern, command line, URL) the call targets.
    Glob {
        matcher: GlobMatcher,
        basename: bool,
        /// The specifier as written.
        text: String,
    },
    /// `domain:docs.rs`: the host `docs.rs` and its subdomains; `domain:*.docs.rs`: only the
    /// subdomains (`fetch_url_content`).
    Domain { name: String, subdomains_only: bool },
}

pub mod protect;

pub use crate::config::DEFAULT_PROTECTED;
pub use protect::Protected;

/// The compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The command rules of `run_terminal_command`.
    commands: CommandPolicy,
    /// What an otherwise allowed command becomes when no sandbox is available.
    unsandboxed: Level,
    levels: BTreeMap<String, Level>,
    /// Base levels by tool-name prefix (MCP servers' `policy`).
    prefixes: Vec<(String, Level)>,
    protected: Protected,
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
    /// From "always allow" answers: above `ask`, below `deny` and protected paths (unless the
    /// saved rule names the protected path).
    approved: Vec<Rule>,
}

impl Policy {
    /// Compiles the configured policy. Errors name the list and index of a bad rule.
    pub fn new(cfg: &PolicyConfig) -> Result<Policy, String> {
        // `run_terminal_command(pattern)` rules are command rules (see `command::rules`).
        let mut command_rules = Vec::new();
        for (list, key, verdict) in [
            (&cfg.deny, "deny", Verdict::Deny),
            (&cfg.ask, "ask", Verdict::Ask),
            (&cfg.allow, "allow", Verdict::Allow),
            (&cfg.approved, "approved", Verdict::Allow),
        ] {
            let approved = key == "approved";
            for (i, text) in list.iter().enumerate() {
                let t = text.trim();
                if let Some(inner) = t
                    .strip_prefix("run_terminal_command(")
                    .and_then(|r| r.strip_suffix(')'))
                {
                    let source = format!("policy.{key}[{i}] `{t}`");
                    let rule = if approved {
                        UserRule::approved(inner.trim(), &source)
                    } else {
                        UserRule::new(verdict, inner.trim(), &source)
                    };
                    command_rules
                        .push(rule.map_err(|e| format!("policy.{key}[{i}] {text:?}: {e}"))?);
                }
            }
        }
        for (i, r) in cfg.commands.iter().enumerate() {
            let verdict = match r.decision.as_str() {
                "allow" => Verdict::Allow,
                "ask" => Verdict::Ask,
                "deny" => Verdict::Deny,
                other => {
                    return Err(format!(
                        "policy.commands[{i}].decision: {other:?} is not allow, ask or deny"
                    ));
                }
            };
            let source = format!("policy.commands[{i}] `{}`", r.pattern);
            let rule = UserRule::new(verdict, &r.pattern, &source)
                .map_err(|e| format!("policy.commands[{i}]: {e}"))?;
            for ex in &r.examples {
                if !rule.matches_line(ex) {
                    return Err(format!(
                        "policy.commands[{i}]: the pattern {:?} does not match its own example {ex:?}",
                        r.pattern
                    ));
                }
            }
            for ex in &r.not_examples {
                if rule.matches_line(ex) {
                    return Err(format!(
                        "policy.commands[{i}]: the pattern {:?} matches its counter-example {ex:?}",
                        r.pattern
                    ));
                }
            }
            command_rules.push(rule);
        }
        let commands = CommandPolicy::new(command_rules, cfg.command_defaults)?
            .with_writes(cfg.command_writes);
        let compile = |list: &[String], key: &str| -> Result<Vec<Rule>, String> {
            list.iter()
                .enumerate()
                .filter(|(_, text)| !text.trim().starts_with("run_terminal_command("))
                .map(|(i, text)| {
                    parse_rule(text)
                        .and_then(|(tool, spec)| {
                            let tool_glob = if tool.contains('*') {
                                Some(
                                    globset::Glob::new(&tool)
                                        .map_err(|e| format!("{tool:?} is not a glob: {e}"))?
                                        .compile_matcher(),
                                )
                            } else {
                                None
                            };
                            Ok(Rule {
                                source: format!("policy.{key}[{i}] `{text}`"),
                                tool,
                                tool_glob,
                                spec,
                            })
                        })
                        .map_err(|e| format!("policy.{key}[{i}] {text:?}: {e}"))
                })
                .collect()
        };
        let protected = Protected::new(&cfg.protected)?;
        Ok(Policy {
            commands,
            unsandboxed: cfg.unsandboxed,
            protected,
            levels: cfg.tools.clone(),
            prefixes: cfg.tool_prefixes.clone(),
            deny: compile(&cfg.deny, "deny")?,
            ask: compile(&cfg.ask, "ask")?,
            allow: compile(&cfg.allow, "allow")?,
            approved: compile(&cfg.approved, "approved")?,
        })
    }

    /// The base level of a tool: the configured override, else its MCP server's `policy`,
    /// else the reference default (`ask` for names it does not list).
    pub fn level(&self, tool: &str) -> Level {
        self.levels
            .get(tool)
            .copied()
            .or_else(|| self.prefix_level(tool))
            .unwrap_or_else(|| reference_default(tool))
    }

    fn prefix_level(&self, tool: &str) -> Option<Level> {
        self.prefixes
            .iter()
            .find(|(p, _)| tool.starts_with(p.as_str()))
            .map(|(_, l)| *l)
    }

    /// Where a tool's base level comes from.
    pub fn level_source(&self, tool: &str) -> &'static str {
        if self.levels.contains_key(tool) {
            "config"
        } else if self.prefix_level(tool).is_some() {
            "mcp server"
        } else {
            "default"
        }
    }

    /// Decides on a command line: bare `run_terminal_command` rules set the base, command
    /// rules judge each part, and an allowed command becomes `policy.unsandboxed` when no
    /// sandbox is available. Also returns the per-part assessment.
    pub fn decide_command(
        &self,
        tool: &str,
        line: &str,
        sandboxed: bool,
        judge: &dyn PathJudge,
    ) -> (Decision, Assessment) {
        let level = self.level(tool);
        let bare = |rules: &[Rule]| {
            rules
                .iter()
                .find(|r| r.names_tool(tool) && r.spec.is_none())
                .map(|r| r.source.clone())
        };
        let (base, base_source) = if level == Level::Disabled {
            (Verdict::Deny, format!("{tool} is disabled by the policy"))
        } else if let Some(src) = bare(&self.deny) {
            (Verdict::Deny, format!("denied by {src}"))
        } else if let Some(src) = bare(&self.ask) {
            (Verdict::Ask, format!("{src} requires approval"))
        } else if let Some(src) = bare(&self.allow) {
            (Verdict::Allow, format!("allowed by {src}"))
        } else if level == Level::Allow {
            (
                Verdict::Allow,
                format!("policy.tools.{tool} = allowedWithoutPermission"),
            )
        } else {
            (Verdict::Ask, String::new())
        };
        let mut a = if base == Verdict::Deny {
            Assessment::single(Verdict::Deny, Class::Disabled, base_source.clone())
        } else {
            self.commands.assess(line, base, judge)
        };
        if a.verdict == Verdict::Allow && !sandboxed {
            match self.unsandboxed {
                Level::Allow => {}
                Level::Ask => {
                    a.verdict = Verdict::Ask;
                    a.class = Class::Unsandboxed;
                    a.reason = format!(
                        "{}; but commands cannot be sandboxed on this machine, so every command \
                         needs approval (policy.unsandboxed)",
                        a.reason
                    );
                }
                Level::Disabled => {
                    a.verdict = Verdict::Deny;
                    a.class = Class::Unsandboxed;
                    a.reason = "commands cannot be sandboxed on this machine and \
                                policy.unsandboxed = \"deny\""
                        .into();
                }
            }
        }
        let decision = match a.verdict {
            Verdict::Allow => Decision::Allow {
                reason: a.reason.clone(),
            },
            Verdict::Ask | Verdict::AskPerson => Decision::Ask {
                reason: a.reason.clone(),
                person_only: a.verdict.person_only(),
            },
            Verdict::Deny => Decision::Deny {
                reason: a.reason.clone(),
            },
        };
        (decision, a)
    }

    /// The first written target that is a protected path, with what it matches.
    fn protected_match(&self, targets: &[Target]) -> Option<(String, protect::Hit)> {
        targets.iter().find_map(|t| match t {
            Target::Path { path, access } if access.writes() => self
                .protected
                .check(path.rel())
                .map(|hit| (path.display(), hit)),
            _ => None,
        })
    }

    /// The protected-path pattern a workspace-relative path matches, if any.
    /// Names are compared folded (case, HFS+ and NTFS spellings, 8.3 names).
    pub fn protected_pattern(&self, rel: &std::path::Path) -> Option<String> {
        self.protected.check(rel).map(|hit| hit.pattern)
    }

    /// The protected-path patterns, for `toolpilot tools`.
    pub fn protected(&self) -> Vec<String> {
        self.protected.patterns()
    }

    /// The protected-path list, for the checks around commands.
    pub fn protected_paths(&self) -> &Protected {
        &self.protected
    }

    /// Rules that mention a tool, for `toolpilot tools`.
    pub fn rules_for(&self, tool: &str) -> Vec<String> {
        self.deny
            .iter()
            .chain(&self.ask)
            .chain(&self.allow)
            .filter(|r| r.names_tool(tool))
            .map(|r| r.source.clone())
            .collect()
    }

    /// Decides on one call of `tool` acting on `targets`.
    pub fn decide(&self, tool: &str, targets: &[Target], ws: &Workspace) -> Decision {
        let level = self.level(tool);
        if level == Level::Disabled {
            return Decision::Deny {
                reason: format!(
                    "{tool} is disabled by the policy ({})",
                    if self.levels.contains_key(tool) {
                        "policy.tools"
                    } else {
                        "default"
                    }
                ),
            };
        }
        if let Some(Target::Command { line, sandboxed }) = targets.first() {
            let judge = WorkspaceJudge::new(ws, self);
            return self.decide_command(tool, line, *sandboxed, &judge).0;
        }
        for t in targets {
            if let Target::Path { path, access } = t {
                if !access.reads() {
                    continue;
                }
                if let Some(pattern) = ws.sensitive_match(path, false) {
                    return Decision::Deny {
                        reason: format!(
                            "{} is a security-sensitive file (matches `{pattern}` in the \
                             sensitive-file list); reading or editing it is not allowed",
                            path.display()
                        ),
                    };
                }
            }
        }
        if let Some(r) = self.deny.iter().find(|r| r.matches_any(tool, targets)) {
            return Decision::Deny {
                reason: format!("denied by {}", r.source),
            };
        }
        if let Some((path, hit)) = self.protected_match(targets) {
            // Only a rule that names the protected path itself allows writing it: a person
            // wrote that rule (or answered "always" for exactly that file).
            let naming = self
                .approved
                .iter()
                .chain(&self.allow)
                .find(|r| r.matches_all(tool, targets) && r.names(&hit));
            if let Some(r) = naming {
                return Decision::Allow {
                    reason: format!(
                        "allowed by {}, which names the protected path {path}",
                        r.source
                    ),
                };
            }
            return Decision::Ask {
                reason: format!(
                    "writing {path} needs a person's approval: it matches the protected path \
                     `{}` (policy.protected), which holds code or settings that run outside \
                     the sandbox; --yes and allow rules that do not name the path do not \
                     approve it",
                    hit.pattern
                ),
                person_only: true,
            };
        }
        if let Some(r) = self.approved.iter().find(|r| r.matches_all(tool, targets)) {
            return Decision::Allow {
                reason: format!(
                    "allowed by an earlier \"always allow\" answer ({})",
                    r.source
                ),
            };
        }
        if let Some(r) = self.ask.iter().find(|r| r.matches_any(tool, targets)) {
            return Decision::Ask {
                reason: format!("{} requires approval", r.source),
                person_only: false,
            };
        }
        if let Some(r) = self.allow.iter().find(|r| r.matches_all(tool, targets)) {
            return Decision::Allow {
                reason: format!("allowed by {}", r.source),
            };
        }
        let source = if self.levels.contains_key(tool) {
            format!("policy.tools.{tool} = {}", level.as_continue())
        } else if let Some(server) = tool
            .strip_prefix("mcp__")
            .and_then(|r| r.split_once("__"))
            .map(|(s, _)| s)
            .filter(|_| self.prefix_level(tool).is_some())
        {
            format!(
                "the policy of the MCP server {server} (mcp.servers.{server}.policy = {})",
                level.as_continue()
            )
        } else {
            format!("default policy of {tool} ({})", level.as_continue())
        };
        match level {
            Level::Allow => Decision::Allow { reason: source },
            _ => Decision::ask(format!("{source} requires approval")),
        }
    }
}

impl Rule {
    fn spec_matches(&self, target: &Target) -> bool {
        let (matcher, basename) = match &self.spec {
            None => return true,
            Some(Spec::Domain {
                name,
                subdomains_only,
            }) => {
                let Target::Url { host, .. } = target else {
                    return false;
                };
                return domain_matches(host, name, *subdomains_only);
            }
            Some(Spec::Glob {
                matcher, basename, ..
            }) => (matcher, *basename),
        };
        match target {
            Target::Path { path, .. } => {
                let rel = path.rel();
                matcher.is_match(rel)
                    || (basename && rel.file_name().is_some_and(|n| matcher.is_match(n)))
            }
            Target::Pattern(p) => matcher.is_match(p),
            Target::Command { line, .. } => matcher.is_match(line),
            Target::Url { url, .. } => matcher.is_match(url),
        }
    }

    /// Whether the rule's specifier names a protected path (see [`protect::Hit::named_by`]).
    fn names(&self, hit: &protect::Hit) -> bool {
        match &self.spec {
            Some(Spec::Glob { text, .. }) => hit.named_by(text),
            _ => false,
        }
    }

    /// Whether the rule is about `tool` (by name, or by its glob over MCP tool names).
    fn names_tool(&self, tool: &str) -> bool {
        match &self.tool_glob {
            Some(g) => g.is_match(tool),
            None => self.tool == tool,
        }
    }

    fn matches_any(&self, tool: &str, targets: &[Target]) -> bool {
        self.names_tool(tool)
            && (self.spec.is_none() || targets.iter().any(|t| self.spec_matches(t)))
    }

    fn matches_all(&self, tool: &str, targets: &[Target]) -> bool {
        self.names_tool(tool)
            && (self.spec.is_none()
                || (!targets.is_empty() && targets.iter().all(|t| self.spec_matches(t))))
    }
}

/// Whether `host` is `name` or a subdomain of it (only a subdomain when `subdomains_only`).
fn domain_matches(host: &str, name: &str, subdomains_only: bool) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let sub = host
        .strip_suffix(name)
        .is_some_and(|rest| rest.ends_with('.'));
    sub || (!subdomains_only && host == name)
}

/// The `domain:` specifier of a `fetch_url_content` rule.
fn parse_domain(tool: &str, spec: &str) -> Result<Spec, String> {
    if tool != "fetch_url_content" {
        return Err(format!(
            "`domain:` specifiers apply to fetch_url_content only, not to {tool}"
        ));
    }
    let text = spec.trim().to_ascii_lowercase();
    let (subdomains_only, name) = match text.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, text.as_str()),
    };
    let name = name.trim_end_matches('.');
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':' | '[' | ']'))
        && !name.contains("..");
    if !valid {
        return Err(format!(
            "{spec:?} is not a domain; write domain:docs.rs (the host and its subdomains) or \
             domain:*.docs.rs (only subdomains)"
        ));
    }
    Ok(Spec::Domain {
        name: name.to_string(),
        subdomains_only,
    })
}

/// Whether a tool's rule specifiers are workspace paths (as opposed to a search pattern, a
/// command line or a URL).
fn tool_takes_paths(tool: &str) -> bool {
    !matches!(
        tool,
        "grep_search"
            | "file_glob_search"
            | "search_web"
            | "fetch_url_content"
            | "run_terminal_command"
    )
}

/// `tool` or `tool(specifier)`.
fn parse_rule(text: &str) -> Result<(String, Option<Spec>), String> {
    let text = text.trim();
    let (tool, spec) = match text.find('(') {
        None => (text, None),
        Some(open) => {
            let Some(inner) = text[open + 1..].strip_suffix(')') else {
                return Err("a rule is `tool` or `tool(specifier)`; the `)` is missing".into());
            };
            (&text[..open], Some(inner.trim()))
        }
    };
    let tool = tool.trim();
    if let Some(rest) = tool.strip_prefix("mcp__") {
        // MCP tools: `mcp__SERVER__TOOL` or a glob such as `mcp__SERVER__*`; what a call acts
        // on is the server's business, so there is no specifier.
        if rest.is_empty()
            || !tool
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*'))
        {
            return Err(format!(
                "{tool:?} is not an MCP tool name or pattern; write mcp__SERVER__TOOL or \
                 mcp__SERVER__* (letters, digits, `_`, `-`, `*`)"
            ));
        }
        if spec.is_some() {
            return Err(format!(
                "rules for MCP tools take no specifier: write {tool}, not {text}"
            ));
        }
        return Ok((tool.to_string(), None));
    }
    let known = known_tool_names();
    if !known.contains(&tool) {
        return Err(format!(
            "there is no built-in tool named {tool:?}; known tools: {}",
            known.join(", ")
        ));
    }
    let spec = match spec {
        None => None,
        Some("") => return Err("the specifier inside `()` is empty".into()),
        Some(s) if s.starts_with("domain:") => Some(parse_domain(tool, &s["domain:".len()..])?),
        Some(s) => {
            // A leading `/` anchors the glob at the workspace root (`/README.md` is only the
            // top-level file); without one, a glob with no `/` also matches a file name anywhere.
            let (anchored, glob_text) = match s.strip_prefix('/') {
                Some(rest) if tool_takes_paths(tool) => (true, rest),
                _ => (false, s),
            };
            if anchored && glob_text.is_empty() {
                return Err(
                    "`/` alone names no file; write `/path` or a glob such as `/src/**`".into(),
                );
            }
            let glob = GlobBuilder::new(glob_text)
                .literal_separator(true)
                .build()
                .map_err(|e| format!("{s:?} is not a glob: {e}"))?;
            Some(Spec::Glob {
                matcher: glob.compile_matcher(),
                basename: !anchored && !glob_text.contains('/'),
                text: s.to_string(),
            })
        }
    };
    Ok((tool.to_string(), spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let tmp = tempfile::tempdir().unwrap();
        let sens: Vec<String> = crate::workspace::DEFAULT_SENSITIVE
            .iter()
            .map(|s| s.to_string())
            .collect();
        let ws = Workspace::open(tmp.path(), &sens).unwrap();
        (tmp, ws)
    }

    fn policy(tools: &[(&str, &str)], allow: &[&str], ask: &[&str], deny: &[&str]) -> Policy {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Policy::new(&PolicyConfig {
            tools: tools
                .iter()
                .map(|(t, l)| (t.to_string(), Level::parse(l).unwrap()))
                .collect(),
            allow: v(allow),
            ask: v(ask),
            deny: v(deny),
            protected: DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect(),
            ..PolicyConfig::default()
        })
        .unwrap()
    }

    #[track_caller]
    fn check(p: &Policy, ws: &Workspace, tool: &str, path: Option<&str>, expected: &str) {
        let targets: Vec<Target> = path
            .map(|raw| Target::Path {
                path: ws.resolve(raw).unwrap(),
                access: Access::Read,
            })
            .into_iter()
            .collect();
        let d = p.decide(tool, &targets, ws);
        let got = format!("{}: {}", d.label(), d.reason());
        assert!(
            got.starts_with(expected),
            "got {got:?}, expected to start with {expected:?}"
        );
    }

    #[test]
    fn defaults_follow_the_reference() {
        let (_t, ws) = ws();
        let p = policy(&[], &[], &[], &[]);
        check(
            &p,
            &ws,
            "read_file",
            Some("src/a.rs"),
            "allow: default policy of read_file",
        );
        check(
            &p,
            &ws,
            "read_currently_open_file",
            None,
            "ask: default policy",
        );
        check(
            &p,
            &ws,
            "view_subdirectory",
            Some("src"),
            "ask: default policy",
        );
        check(
            &p,
            &ws,
            "request_rule",
            None,
            "deny: request_rule is disabled by the policy (default)",
        );
        check(
            &p,
            &ws,
            "read_file",
            Some(".env"),
            "deny: .env is a security-sensitive file",
        );
        check(
            &p,
            &ws,
            "read_file",
            Some("config/.ssh/id"),
            "deny: config/.ssh/id is a security-sensitive",
        );
    }

    #[test]
    fn deny_beats_ask_beats_allow_beats_default() {
        let (_t, ws) = ws();
        let p = policy(
            &[("ls", "ask"), ("grep_search", "disabled")],
            &["read_file(src/**)", "ls", "view_subdirectory"],
            &["read_file(src/gen/**)"],
            &["read_file(**/secret*)", "read_file(*.pem)"],
        );
        check(
            &p,
            &ws,
            "read_file",
            Some("src/a.rs"),
            "allow: allowed by policy.allow[0]",
        );
        check(
            &p,
            &ws,
            "read_file",
            Some("src/gen/x.rs"),
            "ask: policy.ask[0] `read_file(src/gen/**)` requires approval",
        );
        check(
            &p,
            &ws,
            "read_file",
            Some("src/secret.txt"),
            "deny: denied by policy.deny[0]",
        );
        check(
            &p,
            &ws,
            "read_file",
            Some("secret.md"),
            "deny: denied by policy.deny[0]",
        );
        check(
            &p,
            &ws,
            "ls",
            Some("."),
            "allow: allowed by policy.allow[1]",
        );
        check(
            &p,
            &ws,
            "grep_search",
            None,
            "deny: grep_search is disabled by the policy (policy.tools)",
        );
        check(
            &p,
            &ws,
            "read_file",
            Some("README.md"),
            "allow: default policy",
        );
        // A leading `/` anchors a path glob at the root.
        let anchored = policy(
            &[],
            &["read_file(/notes.md)"],
            &[],
            &["read_file(/secret/**)"],
        );
        check(
            &anchored,
            &ws,
            "read_currently_open_file",
            None,
            "ask: default policy",
        );
        check(
            &anchored,
            &ws,
            "read_file",
            Some("notes.md"),
            "allow: allowed by policy.allow[0]",
        );
        check(
            &anchored,
            &ws,
            "read_file",
            Some("sub/notes.md"),
            "allow: default policy",
        );
        check(
            &anchored,
            &ws,
            "read_file",
            Some("secret/a"),
            "deny: denied by policy.deny[0]",
        );
        check(
            &anchored,
            &ws,
            "read_file",
            Some("x/secret/a"),
            "allow: default policy",
        );
        // An allow rule with a specifier never matches a call without targets.
        check(
            &p,
            &ws,
            "view_subdirectory",
            None,
            "allow: allowed by policy.allow[2]",
        );
    }

    #[test]
    fn protected_paths_need_approval_to_be_written() {
        let (_t, ws) = ws();
        let p = policy(
            &[
                ("edit_existing_file", "allow"),
                ("create_new_file", "allow"),
            ],
            &["edit_existing_file"],
            &[],
            &[],
        );
        let write = |tool: &str, raw: &str, access: Access| {
            let d = p.decide(
                tool,
                &[Target::Path {
                    path: ws.resolve(raw).unwrap(),
                    access,
                }],
                &ws,
            );
            format!("{}: {}", d.label(), d.reason())
        };
        assert!(
            write("edit_existing_file", ".git/hooks/pre-commit", Access::Edit).starts_with(
                "ask: writing .git/hooks/pre-commit needs a person's approval: it matches the \
                 protected path `**/.git/**`"
            )
        );
        for spelling in [
            ".GIT/hooks/pre-commit",
            ".g\u{200c}it/config",
            "git~1/hooks/x",
        ] {
            assert!(
                write("create_new_file", spelling, Access::Write).starts_with("ask:"),
                "{spelling}"
            );
        }
        assert!(
            write("create_new_file", ".github/workflows/ci.yml", Access::Write).starts_with("ask:")
        );
        assert!(
            write("create_new_file", "sub/AGENTS.md", Access::Write).starts_with("ask:"),
            "names match at any depth"
        );
        assert!(write("create_new_file", ".env.local", Access::Write).starts_with("ask:"));
        assert!(
            write("edit_existing_file", ".env", Access::Edit).starts_with("deny:"),
            "editing reads the secret first"
        );
        assert!(write("edit_existing_file", "src/main.rs", Access::Edit).starts_with("allow:"));
        assert!(write("create_new_file", "src/new.rs", Access::Write).starts_with("allow:"));
        // Reading a protected path is not affected.
        assert!(write("read_file", ".vscode/launch.json", Access::Read).starts_with("allow:"));
        // Only a person may approve, unless a rule names the protected path itself; saved
        // "always allow" rules rank below protected paths unless they name them too.
        let d = p.decide(
            "create_new_file",
            &[Target::Path {
                path: ws.resolve(".vscode/tasks.json").unwrap(),
                access: Access::Write,
            }],
            &ws,
        );
        assert!(d.person_only(), "{d:?}");
        let mut cfg = PolicyConfig {
            tools: [("create_new_file".to_string(), Level::Allow)].into(),
            allow: vec![
                "create_new_file(**)".into(),
                "create_new_file(.vscode/tasks.json)".into(),
            ],
            approved: vec![
                "create_new_file(/config)".into(),
                "create_new_file(*.json)".into(),
            ],
            protected: DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect(),
            ..PolicyConfig::default()
        };
        let named = Policy::new(&cfg).unwrap();
        let decide = |p: &Policy, raw: &str| {
            let d = p.decide(
                "create_new_file",
                &[Target::Path {
                    path: ws.resolve(raw).unwrap(),
                    access: Access::Write,
                }],
                &ws,
            );
            format!("{}: {}", d.label(), d.reason())
        };
        assert!(decide(&named, ".vscode/tasks.json").starts_with(
            "allow: allowed by policy.allow[1] `create_new_file(.vscode/tasks.json)`, which names"
        ),);
        assert!(decide(&named, ".vscode/settings.json").starts_with("ask:"));
        assert!(
            decide(&named, ".git/config").starts_with("ask:"),
            "`/config` does not name .git"
        );
        assert!(decide(&named, "config").starts_with("allow: allowed by an earlier"));
        cfg.approved.push("create_new_file(/.git/config)".into());
        let named = Policy::new(&cfg).unwrap();
        assert!(decide(&named, ".git/config").starts_with("allow: allowed by policy.approved[2]"));
    }

    #[test]
    fn domain_rules_match_hosts_and_subdomains() {
        let (_t, ws) = ws();
        let p = policy(
            &[],
            &[
                "fetch_url_content(domain:docs.rs)",
                "fetch_url_content(https://example.org/pub/**)",
            ],
            &["fetch_url_content(domain:*.corp.example)"],
            &["fetch_url_content(domain:evil.example)"],
        );
        let decide = |url: &str| {
            let u = url::Url::parse(url).unwrap();
            let d = p.decide(
                "fetch_url_content",
                &[Target::Url {
                    url: u.as_str().to_string(),
                    host: u.host_str().unwrap().to_string(),
                }],
                &ws,
            );
            format!("{}: {}", d.label(), d.reason())
        };
        assert!(decide("https://docs.rs/serde").starts_with("allow: allowed by policy.allow[0]"));
        assert!(decide("https://www.docs.rs/x").starts_with("allow: allowed by policy.allow[0]"));
        assert!(decide("https://notdocs.rs/x").starts_with("ask: default policy"));
        assert!(decide("https://docs.rs.evil.example/").starts_with("deny:"));
        assert!(decide("https://wiki.corp.example/").starts_with("ask: policy.ask[0]"));
        assert!(decide("https://corp.example/").starts_with("ask: default policy"));
        assert!(
            decide("https://example.org/pub/a/b").starts_with("allow: allowed by policy.allow[1]")
        );
        assert!(decide("https://example.org/private").starts_with("ask: default policy"));
        assert!(decide("https://EVIL.example./").starts_with("deny: denied by policy.deny[0]"));
        let bad = |r: &str| {
            Policy::new(&PolicyConfig {
                allow: vec![r.to_string()],
                ..PolicyConfig::default()
            })
            .unwrap_err()
        };
        assert!(bad("read_file(domain:docs.rs)").contains("apply to fetch_url_content only"));
        assert!(bad("fetch_url_content(domain:a b)").contains("is not a domain"));
        assert!(bad("fetch_url_content(domain:)").contains("is not a domain"));
    }

    #[test]
    fn bad_rules_are_explained() {
        let bad = |r: &str| {
            Policy::new(&PolicyConfig {
                deny: vec![r.to_string()],
                ..PolicyConfig::default()
            })
            .unwrap_err()
        };
        assert!(bad("reed_file").contains("no built-in tool named \"reed_file\""));
        assert!(bad("read_file(a").contains("`)` is missing"));
        assert!(bad("read_file()").contains("specifier inside `()` is empty"));
        assert!(bad("read_file([)").contains("is not a glob"));
        assert!(bad("mcp__gh__x(a)").contains("rules for MCP tools take no specifier"));
        assert!(bad("mcp__gh.x").contains("is not an MCP tool name or pattern"));
    }

    #[test]
    fn mcp_tools_take_their_servers_level_and_rules_by_name_or_glob() {
        let (_d, ws) = ws();
        let p = Policy::new(&PolicyConfig {
            tool_prefixes: vec![
                ("mcp__gh__".into(), Level::Allow),
                ("mcp__fs__".into(), Level::Ask),
            ],
            tools: [("mcp__fs__read".to_string(), Level::Allow)].into(),
            deny: vec!["mcp__gh__delete_*".into()],
            ask: vec!["mcp__gh__create_issue".into()],
            ..PolicyConfig::default()
        })
        .unwrap();
        check(
            &p,
            &ws,
            "mcp__gh__list",
            None,
            "allow: the policy of the MCP server gh",
        );
        check(
            &p,
            &ws,
            "mcp__gh__delete_repo",
            None,
            "deny: denied by policy.deny[0]",
        );
        check(&p, &ws, "mcp__gh__create_issue", None, "ask: policy.ask[0]");
        check(
            &p,
            &ws,
            "mcp__fs__write",
            None,
            "ask: the policy of the MCP server fs",
        );
        check(
            &p,
            &ws,
            "mcp__fs__read",
            None,
            "allow: policy.tools.mcp__fs__read",
        );
        // A server that is not configured: unknown means ask.
        check(
            &p,
            &ws,
            "mcp__other__x",
            None,
            "ask: default policy of mcp__other__x",
        );
        assert_eq!(p.rules_for("mcp__gh__delete_repo").len(), 1);
    }
}
