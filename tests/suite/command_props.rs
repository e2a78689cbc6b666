//! A property of the command policy: a line that contains a part that writes or executes is
//! never allowed, however the parts are joined, wrapped, quoted or nested in substitutions
//! (default policy, no user rule).

use proptest::prelude::*;
use toolpilot::policy::WorkspaceJudge;
use toolpilot::policy::command::Verdict;

use super::command_table::{policy_for, workspace};

const HARMLESS: &[&str] = &[
    "ls -la",
    "cat README.md",
    "echo hi",
    "git status",
    "grep -n x src",
    "wc -l f",
    "sed -n 1,5p f",
    "awk '{print $1}' f",
    "rg foo src",
    "find . -name x",
    "true",
    "pwd",
];

const DANGEROUS: &[&str] = &[
    "touch X",
    "rm -f X",
    "cp a b",
    "mv a b",
    "mkdir d",
    "tee out",
    "sort -o out f",
    "uniq in out",
    "xxd -r in out",
    "sed -i s/a/b/ f",
    "sed -n '1e touch x' f",
    "sed 's/a/b/w out' f",
    "rg --pre ./x.sh x",
    "git -c core.pager=x log",
    "git log --output=F",
    "git diff --ext-diff",
    "git branch newb",
    "find . -exec rm {} \\;",
    "find . -delete",
    "fd -x rm",
    "tar xf a.tar",
    "tar --to-command=sh -xf a.tar",
    "unzip a.zip",
    "gzip f",
    "python3 x.py",
    "sh -c 'touch x'",
    "awk 'BEGIN{system(\"id\")}'",
    "awk '{print > \"out\"}' f",
    "curl https://example.com",
    "npm install x",
    "echo x > out",
    "ls >> out",
    "./run.sh",
    "$CMD x",
    "dd if=a of=b",
    "ln -s a b",
    "chmod +x f",
    "truncate -s 0 f",
    "zip o.zip f",
    "env -S 'touch x'",
];

const WRAPPERS: &[&str] = &[
    "",
    "env ",
    "env FOO=1 ",
    "env -u X ",
    "env -i ",
    "nice ",
    "nice -n 5 ",
    "timeout 10 ",
    "timeout -s KILL -k 1 5 ",
    "nohup ",
    "command ",
    "time ",
    "stdbuf -oL ",
    "setsid ",
    "ionice -c 3 ",
    "xargs ",
    "exec ",
];

const SEPARATORS: &[&str] = &["; ", " && ", " || ", " | ", " & ", "\n", " |& ", ";\n"];

/// Quotes the command word of a part in one of the ways the shell removes again.
fn quote(part: &str, how: usize) -> String {
    let (first, rest) = part.split_once(' ').unwrap_or((part, ""));
    let sep = if rest.is_empty() { "" } else { " " };
    if first.starts_with('$') || first.starts_with("./") {
        return part.to_string();
    }
    let q = match how % 5 {
        0 => first.to_string(),
        1 => format!("'{first}'"),
        2 => format!("\"{first}\""),
        3 if first.len() > 1 => format!("{}\\{}", &first[..1], &first[1..]),
        _ => format!("{first}''"),
    };
    format!("{q}{sep}{rest}")
}

/// Puts a part inside a substitution, subshell or group.
fn nest(part: &str, how: usize) -> String {
    match how % 9 {
        0 => part.to_string(),
        1 => format!("echo $({part})"),
        2 => format!("echo \"$({part})\""),
        3 => format!("cat <({part})"),
        4 => format!("( {part} )"),
        5 => format!("{{ {part}; }}"),
        6 => format!("X=$({part})"),
        7 => format!("echo ${{x:-$({part})}}"),
        _ => format!("if true; then {part}; fi"),
    }
}

fn part_strategy(pool: &'static [&'static str]) -> impl Strategy<Value = String> {
    (
        prop::sample::select(pool),
        prop::sample::select(WRAPPERS),
        0usize..5,
        0usize..9,
    )
        .prop_map(|(p, w, q, n)| nest(&quote(&format!("{w}{p}"), q), n))
}

fn line_strategy() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(part_strategy(HARMLESS), 0..4),
        part_strategy(DANGEROUS),
        0usize..4,
        prop::collection::vec(prop::sample::select(SEPARATORS), 4),
    )
        .prop_map(|(mut parts, bad, at, seps)| {
            let at = at.min(parts.len());
            parts.insert(at, bad);
            let mut line = String::new();
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    line.push_str(seps[i % seps.len()]);
                }
                line.push_str(p);
            }
            line
        })
}

#[test]
fn a_line_with_a_part_that_writes_or_executes_is_never_allowed() {
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let (_tmp, ws) = workspace();
    let policy = policy_for(&[]);
    let judge = WorkspaceJudge::new(&ws, &policy);
    // A fixed seed: the same 3000 lines on every run.
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: 3000,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let result = runner.run(&line_strategy(), |line| {
        let (_, a) = policy.decide_command("run_terminal_command", &line, true, &judge);
        prop_assert!(
            a.verdict != Verdict::Allow,
            "{line:?} was allowed: {}",
            a.reason
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
