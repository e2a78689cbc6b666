//! Commands that run another command: `env`, `nice`, `timeout`, `nohup`, `command`, `builtin`,
//! `exec`, `time`, `stdbuf`, `xargs`, `setsid`, `flock`, `ionice`, `chrt`, `taskset`. Their
//! options that take arguments are consumed as the real tools do (`env -u NAME`, `timeout -s
//! SIG DUR`), so the command judged is the one that runs; an option toolpilot does not know
//! stops the unwrapping and asks.

use super::Class;
use super::models::Facts;
use super::parse::Word;

pub(crate) const WRAPPERS: &[&str] = &[
    "env", "nice", "timeout", "nohup", "command", "builtin", "exec", "time", "stdbuf", "xargs",
    "setsid", "flock", "ionice", "chrt", "taskset",
];

/// A part's words with its wrappers looked through.
#[derive(Debug, Default)]
pub(crate) struct Unwrapped {
    /// The command that runs in the end (`None`: the wrappers run nothing, or toolpilot
    /// cannot tell what).
    pub inner: Option<Vec<Word>>,
    /// Each layer's words, outermost first, ending with the inner command.
    pub layers: Vec<Vec<Word>>,
    /// `xargs` appends arguments from its input.
    pub open_tail: bool,
    /// Variables the wrappers set (`env NAME=V`).
    pub assignments: Vec<String>,
    /// A command line the wrappers run through a shell (`flock -c`).
    pub script: Option<String>,
    /// `env -C DIR`.
    pub chdir: Option<String>,
    /// What the wrappers themselves do.
    pub facts: Facts,
}

fn basename(w: &Word) -> &str {
    w.text.rsplit('/').next().unwrap_or(&w.text)
}

/// Looks through the wrappers of `words`.
pub(crate) fn unwrap(words: &[Word]) -> Unwrapped {
    let mut u = Unwrapped::default();
    let mut cur: Vec<Word> = words.to_vec();
    for _ in 0..16 {
        u.layers.push(cur.clone());
        let Some(first) = cur.first() else {
            u.inner = None;
            return u;
        };
        if first.dynamic || !WRAPPERS.contains(&basename(first)) {
            u.inner = Some(cur);
            return u;
        }
        let name = basename(first).to_string();
        match step(&name, &cur[1..], &mut u) {
            Step::Inner(next) => cur = next,
            Step::Nothing => {
                u.inner = None;
                return u;
            }
        }
    }
    u.facts.ask(
        Class::Unknown,
        "too many wrapper commands around one command",
    );
    u.inner = None;
    u
}

enum Step {
    /// The wrapped command's words.
    Inner(Vec<Word>),
    /// No command runs (or it cannot be told): stop.
    Nothing,
}

fn unknown(u: &mut Unwrapped, name: &str, opt: &str) -> Step {
    u.facts.ask(
        Class::Unknown,
        format!(
            "`{name} {opt}` is an option toolpilot does not know, so it cannot tell which \
             command `{name}` runs"
        ),
    );
    Step::Nothing
}

/// Reads getopt-style options of a wrapper until the first operand. `with_arg` are the short
/// options taking an argument, `flags` those without; `long_arg` / `long_flag` likewise.
/// Returns the index of the first operand, and calls `on` for each option with its value.
fn options(
    args: &[Word],
    with_arg: &str,
    flags: &str,
    long_arg: &[&str],
    long_flag: &[&str],
    mut on: impl FnMut(&str, Option<&Word>),
) -> Result<usize, String> {
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        if t == "--" {
            return Ok(i + 1);
        }
        if !t.starts_with('-') || t == "-" || args[i].dynamic {
            if args[i].dynamic && t.starts_with('-') {
                return Err(t.to_string());
            }
            return Ok(i);
        }
        if let Some(long) = t.strip_prefix("--") {
            let (n, v) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let arg_name = long_arg.iter().find(|l| !n.is_empty() && l.starts_with(n));
            let flag_name = long_flag.iter().find(|l| !n.is_empty() && l.starts_with(n));
            match (arg_name, flag_name) {
                (Some(full), _) => {
                    let value = match v {
                        Some(v) => Some(Word::plain(v)),
                        None => {
                            i += 1;
                            args.get(i).cloned()
                        }
                    };
                    on(&format!("--{full}"), value.as_ref());
                }
                (None, Some(full)) => on(&format!("--{full}"), None),
                (None, None) => return Err(t.to_string()),
            }
            i += 1;
            continue;
        }
        let chars: Vec<char> = t[1..].chars().collect();
        let mut k = 0;
        while k < chars.len() {
            let c = chars[k];
            if with_arg.contains(c) {
                let rest: String = chars[k + 1..].iter().collect();
                let value = if rest.is_empty() {
                    i += 1;
                    args.get(i).cloned()
                } else {
                    Some(Word::plain(&rest))
                };
                on(&format!("-{c}"), value.as_ref());
                break;
            } else if flags.contains(c) {
                on(&format!("-{c}"), None);
                k += 1;
            } else {
                return Err(t.to_string());
            }
        }
        i += 1;
    }
    Ok(i)
}

fn rest(args: &[Word], from: usize) -> Vec<Word> {
    args.get(from..).map(<[Word]>::to_vec).unwrap_or_default()
}

fn step(name: &str, args: &[Word], u: &mut Unwrapped) -> Step {
    match name {
        "nohup" => {
            if args.first().is_some_and(|w| w.text == "--") {
                return Step::Inner(rest(args, 1));
            }
            if args.first().is_some_and(|w| w.text.starts_with('-')) {
                return unknown(u, name, &args[0].text);
            }
            Step::Inner(args.to_vec())
        }
        "builtin" => Step::Inner(args.to_vec()),
        "command" => {
            let mut describes = false;
            let r = options(args, "", "pvV", &[], &[], |o, _| {
                if o == "-v" || o == "-V" {
                    describes = true;
                }
            });
            match r {
                Err(o) => unknown(u, name, &o),
                Ok(_) if describes => {
                    u.facts.allow(
                        Class::ReadOnly,
                        "`command -v` only describes a command; it runs nothing",
                    );
                    Step::Nothing
                }
                Ok(i) => Step::Inner(rest(args, i)),
            }
        }
        "exec" => match options(args, "a", "cl", &[], &[], |_, _| {}) {
            Err(o) => unknown(u, name, &o),
            Ok(i) if i >= args.len() => {
                u.facts
                    .allow(Class::ReadOnly, "`exec` without a command only redirects");
                Step::Nothing
            }
            Ok(i) => Step::Inner(rest(args, i)),
        },
        "time" => {
            let mut out = None;
            let r = options(
                args,
                "of",
                "pavq",
                &["output", "format"],
                &[
                    "append",
                    "portability",
                    "verbose",
                    "quiet",
                    "help",
                    "version",
                ],
                |o, v| {
                    if o == "-o" || o == "--output" {
                        out = v.map(|w| w.text.clone());
                    }
                },
            );
            if let Some(o) = out {
                u.facts
                    .writes(vec![o.clone()], format!("`time -o` writes `{o}`"));
            }
            match r {
                Err(o) => unknown(u, name, &o),
                Ok(i) if i >= args.len() => {
                    u.facts.allow(Class::ReadOnly, "`time` alone");
                    Step::Nothing
                }
                Ok(i) => Step::Inner(rest(args, i)),
            }
        }
        "nice" => {
            // `-N` is an old spelling of `-n N`.
            let mut args: Vec<Word> = args.to_vec();
            if args.first().is_some_and(|w| {
                w.text.len() > 1
                    && w.text[1..].bytes().all(|b| b.is_ascii_digit())
                    && w.text.starts_with('-')
            }) {
                args.remove(0);
            }
            match options(
                &args,
                "n",
                "",
                &["adjustment"],
                &["help", "version"],
                |_, _| {},
            ) {
                Err(o) => unknown(u, name, &o),
                Ok(i) if i >= args.len() => {
                    u.facts
                        .allow(Class::ReadOnly, "`nice` alone prints the niceness");
                    Step::Nothing
                }
                Ok(i) => Step::Inner(rest(&args, i)),
            }
        }
        "timeout" => match options(
            args,
            "sk",
            "v",
            &["signal", "kill-after"],
            &[
                "preserve-status",
                "foreground",
                "verbose",
                "help",
                "version",
            ],
            |_, _| {},
        ) {
            Err(o) => unknown(u, name, &o),
            // The duration, then the command.
            Ok(i) if i + 1 >= args.len() => Step::Nothing,
            Ok(i) => Step::Inner(rest(args, i + 1)),
        },
        "stdbuf" => match options(
            args,
            "ioe",
            "",
            &["input", "output", "error"],
            &["help", "version"],
            |_, _| {},
        ) {
            Err(o) => unknown(u, name, &o),
            Ok(i) if i >= args.len() => Step::Nothing,
            Ok(i) => Step::Inner(rest(args, i)),
        },
        "setsid" => match options(
            args,
            "",
            "cfw",
            &[],
            &["ctty", "fork", "wait", "help", "version"],
            |_, _| {},
        ) {
            Err(o) => unknown(u, name, &o),
            Ok(i) if i >= args.len() => Step::Nothing,
            Ok(i) => Step::Inner(rest(args, i)),
        },
        "env" => env(args, u),
        "xargs" => xargs(args, u),
        "flock" => {
            let mut script = None;
            let r = options(
                args,
                "Ewc",
                "sxeunoFh",
                &["conflict-exit-code", "timeout", "wait", "command"],
                &[
                    "shared",
                    "exclusive",
                    "unlock",
                    "nonblock",
                    "nb",
                    "close",
                    "no-fork",
                    "verbose",
                    "help",
                    "version",
                ],
                |o, v| {
                    if o == "-c" || o == "--command" {
                        script = v.map(|w| w.text.clone());
                    }
                },
            );
            let i = match r {
                Err(o) => return unknown(u, name, &o),
                Ok(i) => i,
            };
            let Some(file) = args.get(i) else {
                return Step::Nothing;
            };
            if !file.text.bytes().all(|b| b.is_ascii_digit()) {
                u.facts.writes(
                    vec![file.text.clone()],
                    format!("`flock` creates its lock file `{}`", file.text),
                );
            }
            let after = rest(args, i + 1);
            // `flock FILE -c CMD` (options may follow the file).
            if after
                .first()
                .is_some_and(|w| w.text == "-c" || w.text == "--command")
            {
                script = after.get(1).map(|w| w.text.clone());
            }
            if let Some(s) = script {
                u.script = Some(s);
                return Step::Nothing;
            }
            if after.is_empty() {
                Step::Nothing
            } else {
                Step::Inner(after)
            }
        }
        "ionice" => {
            let mut other = false;
            let r = options(
                args,
                "cnpPu",
                "t",
                &["class", "classdata", "pid", "pgid", "uid"],
                &["ignore", "help", "version"],
                |o, _| {
                    if matches!(o, "-p" | "-P" | "-u" | "--pid" | "--pgid" | "--uid") {
                        other = true;
                    }
                },
            );
            if other {
                u.facts.ask(
                    Class::System,
                    "`ionice -p/-P/-u` changes the I/O priority of other processes",
                );
                return Step::Nothing;
            }
            match r {
                Err(o) => unknown(u, name, &o),
                Ok(i) if i >= args.len() => {
                    u.facts
                        .allow(Class::ReadOnly, "`ionice` alone prints the priority");
                    Step::Nothing
                }
                Ok(i) => Step::Inner(rest(args, i)),
            }
        }
        "chrt" => {
            let mut pid = false;
            let mut show = false;
            let r = options(
                args,
                "TPD",
                "abdfiorRvpme",
                &["sched-runtime", "sched-period", "sched-deadline"],
                &[
                    "all-tasks",
                    "batch",
                    "deadline",
                    "fifo",
                    "idle",
                    "other",
                    "rr",
                    "reset-on-fork",
                    "verbose",
                    "pid",
                    "max",
                    "ext",
                    "help",
                    "version",
                ],
                |o, _| {
                    if o == "-p" || o == "--pid" {
                        pid = true;
                    }
                    if o == "-m" || o == "--max" {
                        show = true;
                    }
                },
            );
            if pid {
                u.facts.ask(
                    Class::System,
                    "`chrt -p` changes the scheduling of another process",
                );
                return Step::Nothing;
            }
            match r {
                Err(o) => unknown(u, name, &o),
                Ok(i) if i + 1 >= args.len() => {
                    if show {
                        u.facts
                            .allow(Class::ReadOnly, "`chrt -m` prints the priority ranges");
                    }
                    Step::Nothing
                }
                Ok(i) => Step::Inner(rest(args, i + 1)),
            }
        }
        "taskset" => {
            let mut pid = false;
            let mut list = false;
            let r = options(
                args,
                "",
                "acp",
                &[],
                &["all-tasks", "cpu-list", "pid", "help", "version"],
                |o, _| {
                    if o == "-p" || o == "--pid" {
                        pid = true;
                    }
                    if o == "-c" || o == "--cpu-list" {
                        list = true;
                    }
                },
            );
            let _ = list;
            if pid {
                u.facts.ask(
                    Class::System,
                    "`taskset -p` changes the CPU affinity of another process",
                );
                return Step::Nothing;
            }
            match r {
                Err(o) => unknown(u, name, &o),
                Ok(i) if i + 1 >= args.len() => Step::Nothing,
                Ok(i) => Step::Inner(rest(args, i + 1)),
            }
        }
        _ => Step::Inner(args.to_vec()),
    }
}

fn env(args: &[Word], u: &mut Unwrapped) -> Step {
    let mut split: Option<String> = None;
    let mut chdir = None;
    let r = options(
        args,
        "uCS",
        "i0v",
        &[
            "unset",
            "chdir",
            "split-string",
            "default-signal",
            "ignore-signal",
            "block-signal",
        ],
        &[
            "ignore-environment",
            "null",
            "debug",
            "list-signal-handling",
            "help",
            "version",
        ],
        |o, v| match o {
            "-S" | "--split-string" => split = v.map(|w| w.text.clone()),
            "-C" | "--chdir" => chdir = v.map(|w| w.text.clone()),
            _ => {}
        },
    );
    let mut i = match r {
        Err(o) => return unknown(u, "env", &o),
        Ok(i) => i,
    };
    if let Some(d) = chdir {
        u.chdir = Some(d);
    }
    // `-` alone is `-i`.
    if args.get(i).is_some_and(|w| w.text == "-") {
        i += 1;
    }
    // NAME=VALUE assignments.
    while let Some(w) = args.get(i) {
        match w.text.split_once('=') {
            Some((n, _))
                if !n.is_empty()
                    && !w.text.starts_with('=')
                    && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') =>
            {
                u.assignments.push(n.to_string());
                i += 1;
            }
            _ => break,
        }
    }
    let mut next = Vec::new();
    if let Some(s) = split {
        match split_string(&s) {
            Some(words) => next.extend(words),
            None => {
                u.facts.ask(
                    Class::Unknown,
                    "`env -S` with a string toolpilot cannot split",
                );
                return Step::Nothing;
            }
        }
        // `env -S 'A=1 cmd'`: assignments may lead the string too.
        while next
            .first()
            .is_some_and(|w| w.text.contains('=') && !w.text.starts_with('='))
        {
            let w = next.remove(0);
            if let Some((n, _)) = w.text.split_once('=') {
                u.assignments.push(n.to_string());
            }
        }
    }
    next.extend(rest(args, i));
    if next.is_empty() {
        u.facts
            .allow(Class::ReadOnly, "`env` alone prints the environment");
        return Step::Nothing;
    }
    Step::Inner(next)
}

/// Splits an `env -S` string: blanks separate words, quotes group, `\` escapes, `${VAR}`
/// expands (a dynamic word), `#` at a word start ends the string.
fn split_string(s: &str) -> Option<Vec<Word>> {
    let mut out = Vec::new();
    let mut cur: Option<Word> = None;
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => {
                if let Some(w) = cur.take() {
                    out.push(w);
                }
            }
            '#' if cur.is_none() => break,
            '\'' => {
                let w = cur.get_or_insert_with(Word::default);
                w.quoted = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => w.text.push(ch),
                    }
                }
            }
            '"' => {
                let w = cur.get_or_insert_with(Word::default);
                w.quoted = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => w.text.push(chars.next()?),
                        '$' => {
                            w.dynamic = true;
                            w.text.push('$');
                        }
                        ch => w.text.push(ch),
                    }
                }
            }
            '\\' => {
                let w = cur.get_or_insert_with(Word::default);
                match chars.next()? {
                    '_' => w.text.push(' '),
                    'c' => break,
                    'n' => w.text.push('\n'),
                    't' => w.text.push('\t'),
                    ch => w.text.push(ch),
                }
            }
            '$' => {
                let w = cur.get_or_insert_with(Word::default);
                if w.text.is_empty() {
                    w.open_start = true;
                }
                w.dynamic = true;
                w.text.push('$');
            }
            ch => cur.get_or_insert_with(Word::default).text.push(ch),
        }
    }
    if let Some(w) = cur.take() {
        out.push(w);
    }
    Some(out)
}

fn xargs(args: &[Word], u: &mut Unwrapped) -> Step {
    let mut replace = None;
    let r = options(
        args,
        "adEILnPs",
        "0eilprtxo",
        &[
            "arg-file",
            "delimiter",
            "eof",
            "replace",
            "max-lines",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ],
        &[
            "null",
            "interactive",
            "no-run-if-empty",
            "verbose",
            "exit",
            "show-limits",
            "open-tty",
            "help",
            "version",
        ],
        |o, v| match o {
            "-I" | "--replace" => replace = Some(v.map_or("{}".to_string(), |w| w.text.clone())),
            "-i" => replace = Some("{}".to_string()),
            "-a" | "--arg-file" => {
                if let Some(w) = v {
                    u.facts.read(&w.text);
                }
            }
            _ => {}
        },
    );
    let i = match r {
        Err(o) => return unknown(u, "xargs", &o),
        Ok(i) => i,
    };
    let mut next = rest(args, i);
    if next.is_empty() {
        next.push(Word::plain("echo"));
    }
    match replace {
        Some(r) => {
            for w in next.iter_mut().skip(1) {
                if w.text.contains(&r) {
                    w.dynamic = true;
                    if w.text.starts_with(&r) {
                        w.open_start = true;
                    }
                }
            }
        }
        None => u.open_tail = true,
    }
    Step::Inner(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::command::parse::parse;

    fn inner(line: &str) -> String {
        let p = parse(line).unwrap();
        let u = unwrap(&p[0].words);
        u.inner.map_or_else(
            || "-".to_string(),
            |w| {
                w.iter()
                    .map(|w| w.text.as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            },
        )
    }

    #[test]
    fn wrappers_consume_their_options() {
        assert_eq!(inner("env -u ls sh -c 'touch pwned'"), "sh -c touch pwned");
        assert_eq!(inner("env -i A=1 -- ls"), "-- ls");
        assert_eq!(inner("env -i A=1 ls"), "ls");
        assert_eq!(inner("env -C /tmp -S 'rm -rf x' y"), "rm -rf x y");
        assert_eq!(inner("nice -n 5 nice -10 ls"), "ls");
        assert_eq!(inner("timeout -s KILL -k 5 10 cargo test"), "cargo test");
        assert_eq!(inner("timeout --signal=TERM 10s make"), "make");
        assert_eq!(inner("time -o t.txt -f %e ls"), "ls");
        assert_eq!(inner("xargs -I R -n 1 -P 4 rm R"), "rm R");
        assert_eq!(inner("xargs -0 -a list.txt cat"), "cat");
        assert_eq!(inner("xargs"), "echo");
        assert_eq!(inner("stdbuf -oL -e 0 grep x"), "grep x");
        assert_eq!(inner("command -p ls"), "ls");
        assert_eq!(inner("command -v ls"), "-");
        assert_eq!(inner("flock -w 5 lock make"), "make");
        assert_eq!(inner("chrt -f 10 ls"), "ls");
        assert_eq!(inner("taskset -c 0,1 ls"), "ls");
        assert_eq!(inner("ionice -c 3 nohup setsid -f ls"), "ls");
        assert_eq!(inner("env --frobnicate ls"), "-");
    }
}
