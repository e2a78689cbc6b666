//! Command rules: what `run_terminal_command` may run without asking.
//!
//! A line is split into the commands it runs ([`super::parse`]); each part is judged by what it
//! does with its arguments (wrappers looked through, the command models of this folder), then
//! by the rules: deny (user, built-in), ask (user, built-in), the person-only checks (a
//! sensitive file read, a protected path written), allow (user, built-in), and the tool's base
//! level for commands nobody knows. The line gets the strictest verdict of its parts. A line
//! that cannot be parsed is asked about; a fork bomb is denied. User rules are globs over a
//! part's words (`run_terminal_command(cargo test*)`).

use globset::{GlobBuilder, GlobMatcher};

use super::models::{self, Facts, Finding, Inv, Targets};
use super::parse::{Part, Word, fork_bomb, parse};
use super::wrappers;
use super::{Class, PathJudge, Verdict};
pub use crate::config::WritesSwitch;

/// The verdict on one part, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PartVerdict {
    pub command: String,
    pub verdict: Verdict,
    /// Only a person may approve it (`--yes` does not).
    pub person_only: bool,
    pub class: Class,
    pub reason: String,
}

/// The verdict on a whole command line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Assessment {
    pub verdict: Verdict,
    pub person_only: bool,
    /// The class of the strictest part.
    pub class: Class,
    /// Why, in one sentence (the strictest part's reason).
    pub reason: String,
    pub parts: Vec<PartVerdict>,
}

impl Assessment {
    pub fn single(verdict: Verdict, class: Class, reason: String) -> Assessment {
        Assessment {
            verdict,
            person_only: verdict.person_only(),
            class,
            reason,
            parts: Vec::new(),
        }
    }
}

/// A user rule: a glob over a part's words.
#[derive(Debug, Clone)]
pub struct UserRule {
    pub verdict: Verdict,
    pub source: String,
    /// From an "always allow" answer: a person approved exactly this; it also beats the
    /// built-in asks.
    pub approved: bool,
    matcher: GlobMatcher,
}

impl UserRule {
    pub fn new(verdict: Verdict, pattern: &str, source: &str) -> Result<UserRule, String> {
        let glob = GlobBuilder::new(pattern)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map_err(|e| format!("{pattern:?} is not a command pattern: {e}"))?;
        Ok(UserRule {
            verdict,
            source: source.to_string(),
            approved: false,
            matcher: glob.compile_matcher(),
        })
    }

    /// A rule saved from an "always allow" answer.
    pub fn approved(pattern: &str, source: &str) -> Result<UserRule, String> {
        let mut r = UserRule::new(Verdict::Allow, pattern, source)?;
        r.approved = true;
        Ok(r)
    }

    fn matches(&self, text: &str) -> bool {
        self.matcher.is_match(text)
    }

    /// Whether the rule matches any command of a line (for checking examples).
    pub fn matches_line(&self, line: &str) -> bool {
        parse(line).is_ok_and(|parts| {
            parts.iter().any(|p| {
                self.matches(&p.text())
                    || wrappers::unwrap(&p.words)
                        .inner
                        .is_some_and(|w| self.matches(&join(&w)))
            })
        })
    }
}

/// The compiled command policy.
#[derive(Debug, Clone)]
pub struct CommandPolicy {
    builtins: bool,
    user: Vec<UserRule>,
    writes: WritesSwitch,
}

fn join(words: &[Word]) -> String {
    words
        .iter()
        .map(|w| w.text.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// How deep `sh -c` and `eval` strings are read.
const MAX_NESTING: usize = 4;

/// Variables that change which programs or libraries run, or how tools read their options.
const DANGEROUS_VARS: &[&str] = &[
    "PATH",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PERL5LIB",
    "PERL5OPT",
    "PERLLIB",
    "RUBYLIB",
    "RUBYOPT",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "LESSOPEN",
    "LESSCLOSE",
    "LESS",
    "EDITOR",
    "VISUAL",
    "BROWSER",
    "SHELL",
    "HOME",
    "XDG_CONFIG_HOME",
    "RIPGREP_CONFIG_PATH",
    "ACK_OPTIONS",
    "TAR_OPTIONS",
    "ZIPOPT",
    "UNZIP",
    "GREP_OPTIONS",
    "AWKPATH",
    "AWKLIBPATH",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "RUSTC",
    "RUSTDOC",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
    "MAKEFLAGS",
    "CDPATH",
    "GLOBIGNORE",
    "TMOUT",
    "HISTFILE",
];
const DANGEROUS_PREFIXES: &[&str] = &[
    "LD_",
    "DYLD_",
    "GIT_",
    "CARGO_",
    "npm_config_",
    "NPM_CONFIG_",
    "BASH_FUNC_",
];

fn dangerous_var(name: &str) -> bool {
    DANGEROUS_VARS.contains(&name)
        || DANGEROUS_PREFIXES.iter().any(|p| name.starts_with(p))
        || name.ends_with("PAGER")
}

/// File names tried against a glob in a read argument, to see whether it could name a
/// sensitive file (`cat .en*`).
const SENSITIVE_PROBES: &[&str] = &[
    ".env",
    ".env.local",
    ".env.production",
    "x.env",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "id_dsa",
    "x.pem",
    "x.key",
    "x.p12",
    "x.pfx",
    "credentials",
    "config.json",
    "settings.json",
    "auth.json",
    "x.secret",
    "x.token",
    ".netrc",
    ".npmrc",
    ".pgpass",
];

/// Where relative paths of a line may be resolved from (its `cd`s).
struct Dirs {
    /// Folders a `cd`, `pushd` or `env -C` of the line changes to.
    known: Vec<String>,
    /// Some change of folder cannot be told (`cd $X`, `cd -`, `cd` alone).
    unknown: bool,
}

impl Dirs {
    fn of(parts: &[Part]) -> Dirs {
        let mut d = Dirs {
            known: Vec::new(),
            unknown: false,
        };
        for p in parts {
            let u = wrappers::unwrap(&p.words);
            if let Some(c) = &u.chdir {
                d.known.push(c.clone());
            }
            let Some(inner) = &u.inner else { continue };
            let name = inner.first().map_or("", |w| w.text.as_str());
            if matches!(name, "cd" | "pushd" | "popd" | "chdir") {
                let args: Vec<&Word> = inner[1..]
                    .iter()
                    .filter(|w| !w.text.starts_with('-'))
                    .collect();
                let fixed = |w: &Word| {
                    !w.text.contains(['$', '`', '*', '?', '['])
                        && (!w.dynamic || w.text.starts_with('~'))
                };
                match args.first() {
                    Some(w) if fixed(w) && name != "popd" => d.known.push(w.text.clone()),
                    _ => d.unknown = true,
                }
            }
        }
        d
    }

    /// `word` as written, and as seen from each folder the line changes to.
    fn variants(&self, word: &str) -> Vec<String> {
        let mut v = vec![word.to_string()];
        if !word.starts_with('/') && !word.starts_with('~') {
            for k in &self.known {
                v.push(format!("{}/{word}", k.trim_end_matches('/')));
            }
        }
        v
    }
}

struct Ctx<'a> {
    judge: &'a dyn PathJudge,
    base: Verdict,
    dirs: Dirs,
    depth: usize,
}

impl CommandPolicy {
    /// Compiles the policy.
    pub fn new(user: Vec<UserRule>, builtins: bool) -> Result<CommandPolicy, String> {
        Ok(CommandPolicy {
            builtins,
            user,
            writes: WritesSwitch::Ask,
        })
    }

    /// With `policy.command_writes`.
    pub fn with_writes(mut self, writes: WritesSwitch) -> CommandPolicy {
        self.writes = writes;
        self
    }

    /// Judges a command line. `base` is the verdict for parts no rule mentions (the tool's
    /// level: ask by default); `judge` says what paths in arguments are.
    pub fn assess(&self, line: &str, base: Verdict, judge: &dyn PathJudge) -> Assessment {
        self.assess_at(line, base, judge, 0)
    }

    fn assess_at(
        &self,
        line: &str,
        base: Verdict,
        judge: &dyn PathJudge,
        depth: usize,
    ) -> Assessment {
        if line.trim().is_empty() {
            return Assessment::single(
                Verdict::Ask,
                Class::Unparsed,
                "the command is empty".into(),
            );
        }
        if let Some(name) = fork_bomb(line) {
            return Assessment::single(
                Verdict::Deny,
                Class::ForkBomb,
                format!(
                    "a fork bomb: the function `{name}` starts copies of itself without end, \
                     which exhausts the machine"
                ),
            );
        }
        let parts = match parse(line) {
            Ok(p) => p,
            Err(e) => {
                return Assessment::single(
                    Verdict::Ask.max(base),
                    Class::Unparsed,
                    format!(
                        "the command line contains {e}, which toolpilot does not analyse, so it \
                         needs approval"
                    ),
                );
            }
        };
        let ctx = Ctx {
            judge,
            base,
            dirs: Dirs::of(&parts),
            depth,
        };
        let verdicts: Vec<PartVerdict> = parts.iter().map(|p| self.part(p, &parts, &ctx)).collect();
        let worst = verdicts
            .iter()
            .max_by_key(|v| (v.verdict, v.class.rank()))
            .cloned();
        let Some(worst) = worst else {
            return Assessment::single(base, Class::Unknown, "no command".into());
        };
        let reason = if verdicts.len() > 1 || worst.verdict != Verdict::Allow {
            format!("`{}`: {}", worst.command, worst.reason)
        } else {
            worst.reason.clone()
        };
        Assessment {
            verdict: worst.verdict,
            person_only: worst.verdict.person_only(),
            class: worst.class,
            reason,
            parts: verdicts,
        }
    }

    /// What a part does: its wrappers, its command, its redirections and assignments.
    fn facts(&self, p: &Part, all: &[Part], ctx: &Ctx) -> (Facts, bool, Vec<String>) {
        let mut f = Facts::default();
        let mut known = true;
        let mut texts = vec![p.text()];
        for a in &p.assignments {
            if dangerous_var(&a.name) {
                f.ask(
                    Class::EnvVars,
                    format!(
                        "it sets {}, a variable that changes which programs or libraries run",
                        a.name
                    ),
                );
            }
        }
        for r in p.reads() {
            f.read(&r.text);
        }
        let writes: Vec<String> = p.writes().map(|w| w.text.clone()).collect();
        if writes.iter().any(|w| {
            w.starts_with("/dev/sd") || w.starts_with("/dev/nvme") || w.starts_with("/dev/disk")
        }) {
            f.deny(Class::Destructive, "formatting or overwriting a disk");
        }
        for w in &writes {
            if p.writes().any(|x| x.text == *w && x.dynamic) {
                f.writes_unknown(format!(
                    "it writes `{w}` through a redirection, a name that comes from an expansion"
                ));
            } else {
                f.writes(
                    vec![w.clone()],
                    format!("it writes `{w}` through a redirection"),
                );
            }
        }
        if p.words.is_empty() {
            f.allow(Class::ReadOnly, "it only assigns variables or redirects");
            return (f, known, texts);
        }
        let u = wrappers::unwrap(&p.words);
        for n in &u.assignments {
            if dangerous_var(n) {
                f.ask(
                    Class::EnvVars,
                    format!("it sets {n}, a variable that changes which programs or libraries run"),
                );
            }
        }
        f.findings.extend(u.facts.findings);
        f.reads.extend(u.facts.reads);
        f.touched.extend(u.facts.touched);
        if let Some(script) = &u.script {
            f.ask(
                Class::Executes,
                "it runs a command line through a shell (`flock -c`)",
            );
            self.nested_line(script, ctx, &mut f);
        }
        let Some(inner) = u.inner else {
            if f.findings.is_empty() {
                f.ask(Class::Unknown, "toolpilot cannot tell which command runs");
            }
            return (f, known, texts);
        };
        if inner.len() != p.words.len() {
            texts.push(join(&inner));
        }
        let inv = Inv {
            words: inner,
            open_tail: u.open_tail,
        };
        if inv.words[0].dynamic {
            f.ask(
                Class::Executes,
                format!(
                    "the command name `{}` comes from an expansion, so toolpilot cannot tell \
                     what runs",
                    inv.words[0].text
                ),
            );
            return (f, known, texts);
        }
        // A download piped into an interpreter.
        let name = inv.name().to_string();
        if models::INTERPRETERS.contains(&name.as_str()) && self.piped_from_network(p, all) {
            f.deny(
                Class::Executes,
                "piping a download into a shell or interpreter runs unreviewed code",
            );
        }
        // Scripts that shells and `eval` run are read too (a fork bomb or sudo in them is
        // denied).
        if models::SHELLS.contains(&name.as_str()) {
            if let Some(script) = shell_script(&inv) {
                self.nested_line(&script, ctx, &mut f);
            }
        } else if name == "eval" {
            let line = join(inv.args());
            f.ask(
                Class::Executes,
                "`eval` runs its arguments as a command line",
            );
            self.nested_line(&line, ctx, &mut f);
        }
        if !models::judge(&inv, &mut f) {
            known = false;
            f.read_args(inv.args());
        }
        (f, known, texts)
    }

    /// Reads a command line that a part runs through a shell; its denials carry over.
    fn nested_line(&self, line: &str, ctx: &Ctx, f: &mut Facts) {
        if ctx.depth >= MAX_NESTING {
            return;
        }
        let a = self.assess_at(line, Verdict::Ask, ctx.judge, ctx.depth + 1);
        if a.verdict >= Verdict::AskPerson {
            f.add(
                a.verdict,
                a.class,
                format!("the command line it runs: {}", a.reason),
            );
        }
    }

    fn piped_from_network(&self, p: &Part, all: &[Part]) -> bool {
        let mut k = p.piped_from;
        let mut guard = 0;
        while let Some(j) = k {
            let Some(q) = all.get(j) else { return false };
            let u = wrappers::unwrap(&q.words);
            let name = u
                .inner
                .as_ref()
                .and_then(|w| w.first())
                .map_or("", |w| w.text.rsplit('/').next().unwrap_or(&w.text));
            if models::NET_TOOLS.contains(&name) {
                return true;
            }
            k = q.piped_from;
            guard += 1;
            if guard > all.len() {
                return false;
            }
        }
        false
    }

    fn part(&self, p: &Part, all: &[Part], ctx: &Ctx) -> PartVerdict {
        let (mut facts, known, texts) = self.facts(p, all, ctx);
        let command = p.text();
        let verdict = |verdict: Verdict, class: Class, reason: String| PartVerdict {
            command: command.clone(),
            verdict,
            person_only: verdict.person_only(),
            class,
            reason,
        };
        let user = |v: Verdict| {
            self.user
                .iter()
                .find(|r| r.verdict == v && !r.approved && texts.iter().any(|t| r.matches(t)))
        };
        if let Some(r) = user(Verdict::Deny) {
            return verdict(
                Verdict::Deny,
                Class::UserRule,
                format!("denied by {}", r.source),
            );
        }
        self.apply_switch(&mut facts, ctx);
        let builtin = worst(&facts.findings);
        if let Some(b) = builtin.filter(|b| b.verdict == Verdict::Deny && self.builtins) {
            return verdict(Verdict::Deny, b.class, b.reason.clone());
        }
        if let Some(r) = user(Verdict::Ask) {
            return verdict(
                Verdict::Ask,
                Class::UserRule,
                format!("approval required by {}", r.source),
            );
        }
        let person = self.person_only(&facts, ctx);
        // An "always allow" answer names the exact command with its redirections.
        // Only a part whose words are what the command gets (no expansion, no unquoted glob)
        // can be that command: `ls *.rs` is not the `ls '*.rs'` a person approved.
        let full = p.full_text();
        let literal = p.words.iter().all(|w| !w.dynamic)
            && p.redirects.iter().all(|r| !r.target.dynamic)
            && p.assignments.is_empty();
        let approved = self
            .user
            .iter()
            .find(|r| literal && r.approved && r.matches(&full));
        if let Some(r) = approved {
            return verdict(
                Verdict::Allow,
                Class::UserRule,
                format!(
                    "allowed by an earlier \"always allow\" answer ({})",
                    r.source
                ),
            );
        }
        let allow_rule = user(Verdict::Allow);
        if self.builtins
            && let Some(b) = builtin.filter(|b| b.verdict == Verdict::Ask)
        {
            // A person-only finding is stricter than the built-in ask.
            if let Some((class, reason)) = person.filter(|_| allow_rule.is_none()) {
                return verdict(Verdict::AskPerson, class, reason);
            }
            let mut reason = b.reason.clone();
            if b.class == Class::Writes && self.writes == WritesSwitch::Ask {
                reason.push_str(
                    "; commands that write files need approval (policy.command_writes = \
                         \"ask\")",
                );
            }
            return verdict(Verdict::Ask, b.class, reason);
        }
        if let Some((class, reason)) = person {
            if let Some(r) = allow_rule {
                return verdict(
                    Verdict::Allow,
                    Class::UserRule,
                    format!("allowed by {}", r.source),
                );
            }
            return verdict(Verdict::AskPerson, class, reason);
        }
        if let Some(r) = allow_rule {
            return verdict(
                Verdict::Allow,
                Class::UserRule,
                format!("allowed by {}", r.source),
            );
        }
        if self.builtins
            && known
            && let Some(b) = builtin
        {
            return verdict(b.verdict, b.class, b.reason.clone());
        }
        let reason = match ctx.base {
            Verdict::Allow => "no rule mentions it and run_terminal_command is allowed".to_string(),
            Verdict::Deny => "run_terminal_command is disabled".to_string(),
            _ => "no rule allows it, so it needs approval (add an allow rule such as \
                  run_terminal_command(make lint*))"
                .to_string(),
        };
        // A command nobody knows, but whose wrappers or redirections need approval.
        if let Some(b) = builtin.filter(|b| b.verdict > ctx.base && self.builtins) {
            return verdict(b.verdict, b.class, b.reason.clone());
        }
        verdict(ctx.base, Class::Unknown, reason)
    }

    /// With `policy.command_writes = "allow"`, writes whose every target stays inside the
    /// workspace and is not protected are allowed.
    fn apply_switch(&self, facts: &mut Facts, ctx: &Ctx) {
        for f in &mut facts.findings {
            if f.class != Class::Writes || f.verdict != Verdict::Ask {
                continue;
            }
            if self.writes == WritesSwitch::Ask {
                continue;
            }
            match &f.targets {
                Targets::Known(ts) => {
                    let ok = !ctx.dirs.unknown
                        && ts.iter().all(|t| {
                            ctx.dirs
                                .variants(t)
                                .iter()
                                .all(|v| ctx.judge.inside(v) && ctx.judge.protected(v).is_none())
                        });
                    if ok {
                        f.verdict = Verdict::Allow;
                        f.reason.push_str(
                            ", inside the workspace (allowed by policy.command_writes = \"allow\")",
                        );
                    } else {
                        f.reason.push_str(
                            "; a write outside the workspace needs approval even with \
                             policy.command_writes = \"allow\"",
                        );
                    }
                }
                _ => f.reason.push_str(
                    "; toolpilot cannot tell where it writes, so it needs approval even with \
                     policy.command_writes = \"allow\"",
                ),
            }
        }
    }

    /// A sensitive file read or a protected path written: only a person may approve.
    fn person_only(&self, facts: &Facts, ctx: &Ctx) -> Option<(Class, String)> {
        for r in &facts.reads {
            for v in ctx.dirs.variants(r) {
                if let Some(pattern) = sensitive(ctx.judge, &v) {
                    return Some((
                        Class::Secrets,
                        format!(
                            "it reads `{v}`, a sensitive file (matches `{pattern}` in the \
                             sensitive-file list); only a person can approve this, --yes does \
                             not (or an allow rule naming this command)"
                        ),
                    ));
                }
            }
        }
        for t in &facts.touched {
            for v in ctx.dirs.variants(t) {
                if let Some(pattern) = ctx.judge.protected(&v) {
                    return Some((
                        Class::Protected,
                        format!(
                            "it writes `{v}`, a protected path (matches `{pattern}` in \
                             policy.protected); only a person can approve this, --yes does not"
                        ),
                    ));
                }
            }
        }
        None
    }
}

/// The sensitive-file pattern a read argument matches; a glob is tried against the names of
/// common secrets.
fn sensitive(judge: &dyn PathJudge, word: &str) -> Option<String> {
    if word.is_empty() {
        return None;
    }
    if let Some(p) = judge.sensitive(word) {
        return Some(p);
    }
    let (dir, last) = match word.rsplit_once('/') {
        Some((d, l)) => (Some(d), l),
        None => (None, word),
    };
    if !last.contains(['*', '?', '[']) {
        return None;
    }
    // A glob with no literal character (`*`, `?*`) is not tried: it names nothing in
    // particular, and the secrets check is about files named in the arguments.
    let mut in_bracket = false;
    let literal = last.chars().any(|c| match c {
        '[' => {
            in_bracket = true;
            false
        }
        ']' => {
            in_bracket = false;
            false
        }
        '*' | '?' => false,
        _ => !in_bracket,
    });
    if !literal {
        return None;
    }
    let glob = globset::Glob::new(last).ok()?.compile_matcher();
    for probe in SENSITIVE_PROBES {
        if glob.is_match(probe) {
            let candidate = match dir {
                Some(d) => format!("{d}/{probe}"),
                None => probe.to_string(),
            };
            // The shell's globs do not match a leading dot unless the pattern has one.
            if probe.starts_with('.') && !last.starts_with('.') {
                continue;
            }
            if let Some(p) = judge.sensitive(&candidate) {
                return Some(p);
            }
        }
    }
    None
}

/// The script of `sh -c SCRIPT …`.
pub(crate) fn shell_script(inv: &Inv) -> Option<String> {
    let args = inv.args();
    let mut c = false;
    for w in args {
        let t = w.text.as_str();
        if t.starts_with('-') && !t.starts_with("--") && t.len() > 1 {
            if t[1..].contains('c') {
                c = true;
            }
            continue;
        }
        if t.starts_with('+') {
            continue;
        }
        return c.then(|| t.to_string());
    }
    None
}

/// The strictest finding (ties: the more serious class).
fn worst(findings: &[Finding]) -> Option<&Finding> {
    findings.iter().max_by_key(|f| (f.verdict, f.class.rank()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::command::NoPaths;

    fn policy() -> CommandPolicy {
        CommandPolicy::new(
            vec![
                UserRule::new(Verdict::Allow, "make lint*", "policy.allow[0]").unwrap(),
                UserRule::new(Verdict::Deny, "git push * --force*", "policy.deny[0]").unwrap(),
                UserRule::new(Verdict::Allow, "npm *", "policy.allow[1]").unwrap(),
            ],
            true,
        )
        .unwrap()
    }

    #[test]
    fn reasons_name_the_part_and_rule() {
        let p = policy();
        let a = p.assess("ls && sudo reboot", Verdict::Ask, &NoPaths);
        assert_eq!(
            a.reason,
            "`sudo reboot`: privilege escalation (sudo, su, doas, pkexec) is never run by the agent"
        );
        assert_eq!(a.class, Class::Privilege);
        assert_eq!(a.parts.len(), 2);
        let a = p.assess("make lint", Verdict::Ask, &NoPaths);
        assert_eq!(a.reason, "allowed by policy.allow[0]");
        let a = p.assess("frobnicate", Verdict::Allow, &NoPaths);
        assert_eq!(a.verdict, Verdict::Allow);
        let a = p.assess("frobnicate", Verdict::Ask, &NoPaths);
        assert!(a.reason.contains("no rule allows it"), "{}", a.reason);
        assert_eq!(a.class, Class::Unknown);
        let a = p.assess("npm install left-pad", Verdict::Ask, &NoPaths);
        assert_eq!(
            (a.verdict, a.class),
            (Verdict::Ask, Class::Install),
            "a user allow (npm *) does not beat a built-in ask"
        );
    }

    #[test]
    fn the_writes_switch() {
        let ask = policy();
        let allow = policy().with_writes(WritesSwitch::Allow);
        for (line, switched) in [
            ("touch notes.txt", Verdict::Allow),
            ("mkdir -p out && cp a.txt out/", Verdict::Allow),
            ("echo x > out.txt", Verdict::Allow),
            ("touch /tmp/x", Verdict::Ask),
            ("touch ../x", Verdict::Ask),
            ("cp a ~/b", Verdict::Ask),
            ("tar xf a.tar", Verdict::Ask),
            ("rm x", Verdict::Ask),
        ] {
            assert_eq!(
                ask.assess(line, Verdict::Ask, &NoPaths).verdict,
                Verdict::Ask,
                "{line}"
            );
            let a = allow.assess(line, Verdict::Ask, &NoPaths);
            assert_eq!(a.verdict, switched, "{line}: {}", a.reason);
        }
    }
}
