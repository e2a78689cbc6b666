//! The differential parser test: every line of the command table runs under `sh` (dash) and
//! `bash` in a temporary folder whose `PATH` holds only tracing stubs (one per command name:
//! a script that appends its arguments to a log and exits 0), and every command the shell
//! actually ran must be among the commands the parser found (by name, and by arguments where
//! they are static). The wrappers whose option parsing matters (`env`, `nice`, `timeout`,
//! `nohup`, `stdbuf`, `setsid`, `xargs`, `time`, `flock`) are logged and then run for real, so
//! they run the wrapped command's stub as the real tool would.
//!
//! Safety: stubs run instead of programs; `kill` (and `command`, which could reach the
//! builtin `kill`) are shell functions that only log; each line runs under an intermediate
//! shell, in its own process group, with a time limit; `HOME` is the temporary folder; and
//! lines that name absolute paths, `~`, `..` or `HOME`/`PATH` are not run (they test rules,
//! not the parser). Lines the parser refuses, and fork bombs, are skipped.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use toolpilot::policy::command::{Word, invocations, parse::fork_bomb};

use super::command_table::table;

/// Between the arguments of one record, and after each record, in the log.
const UNIT: char = '\u{1f}';
const RECORD: char = '\u{1e}';

/// Wrappers that run their command: logged, then the real program runs.
const PASS_THROUGH: &[&str] = &[
    "env", "nice", "timeout", "nohup", "stdbuf", "setsid", "xargs", "time", "flock",
];

/// Names that always get a stub, besides those the table's lines use.
const ALWAYS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "ls",
    "cat",
    "touch",
    "rm",
    "id",
    "date",
    "which",
    "ssh-agent",
];

fn real(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

fn stub_script(name: &str) -> String {
    let quoted = name.replace('\'', "'\\''");
    let mut s = format!(
        "#!/bin/sh\nr='{quoted}{UNIT}'\nfor a in \"$@\"; do r=\"$r$a{UNIT}\"; done\nprintf '%s{RECORD}' \"$r\" >> \"$TP_LOG\"\n"
    );
    if PASS_THROUGH.contains(&name)
        && let Some(p) = real(name)
    {
        s.push_str(&format!("exec '{}' \"$@\"\n", p.display()));
    }
    s
}

/// Defines `kill` and `command` as functions that cannot reach a real process.
fn prelude() -> String {
    format!(
        r#"__tp_log() {{ r=''; for a in "$@"; do r="$r$a{UNIT}"; done; printf '%s{RECORD}' "$r" >> "$TP_LOG"; }}
kill() {{ __tp_log kill "$@"; }}
command() {{
  while [ $# -gt 0 ]; do
    case "$1" in
      -p) shift ;;
      -v|-V|-pv|-pV|-vp|-Vp) return 0 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  if [ $# -gt 0 ]; then "$@"; fi
}}
"#
    )
}

/// Lines that name a place outside the temporary folder are not run.
fn unsafe_to_run(line: &str) -> bool {
    let cleaned = line
        .replace("/dev/null", "")
        .replace("/dev/stdout", "")
        .replace("/dev/stderr", "");
    let b = cleaned.as_bytes();
    let rooted = b
        .iter()
        .enumerate()
        .any(|(i, &c)| c == b'/' && (i == 0 || b" \t\n\r;&|<>()`=\"'{},:$!\\".contains(&b[i - 1])));
    rooted
        || [
            "~",
            "..",
            "HOME",
            "PATH",
            "OLDPWD",
            "cd -",
            "\\x2f",
            "\\x2F",
            "\\057",
            "\\u002f",
            "\\U0000002f",
            "hash",
            "enable -f",
        ]
        .iter()
        .any(|s| cleaned.contains(s))
}

/// The commands the log shows, each as its argument vector.
fn read_log(path: &Path) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split(RECORD)
        .filter(|r| !r.is_empty())
        .map(|r| {
            let mut args: Vec<String> = r.split(UNIT).map(str::to_string).collect();
            args.pop(); // after the last separator
            args
        })
        .collect()
}

/// Whether `ran` is one of the parser's commands.
fn matches(ran: &[String], parsed: &[Vec<Word>]) -> bool {
    parsed.iter().any(|words| {
        let Some(first) = words.first() else {
            return false;
        };
        if first.dynamic {
            return true;
        }
        let name = first.text.rsplit('/').next().unwrap_or(&first.text);
        if ran.first().map(String::as_str) != Some(name) {
            return false;
        }
        for (k, w) in words.iter().enumerate().skip(1) {
            if w.dynamic {
                return true;
            }
            if ran.get(k) != Some(&w.text) {
                return false;
            }
        }
        ran.len() == words.len()
    })
}

fn run(shell: &str, line: &str, dir: &Path, stubs: &Path, log: &Path) {
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    // The intermediate shell is the parent of the line's shell (so `$PPID` is not the test),
    // and the trailing `:` keeps it from replacing itself with the line's shell.
    let mut cmd = Command::new("/bin/sh");
    cmd.env_clear();
    if shell == "bash" {
        // bash reads BASH_ENV before the -c string: the line itself is exactly `bash -c LINE`.
        let env_file = dir.join("bash_env");
        std::fs::write(&env_file, format!("{}\nenable -n kill\n", prelude())).unwrap();
        cmd.env("BASH_ENV", &env_file)
            .args(["-c", "/bin/bash -c \"$TP_LINE\"; :"]);
    } else {
        // dash reads no start-up file without a terminal: the functions come first, then the
        // line goes through `eval`, which parses it as `-c` would.
        cmd.env("TP_SCRIPT", format!("{}\neval \"$TP_LINE\"\n", prelude()))
            .args(["-c", "/bin/dash -c \"$TP_SCRIPT\"; :"]);
    }
    cmd.env("PATH", stubs)
        .env("HOME", &work)
        .env("TMPDIR", &work)
        .env("LANG", "C")
        .env("TP_LOG", log)
        .env("TP_LINE", line)
        .current_dir(&work)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let mut child = cmd.spawn().unwrap();
    let pgid = child.id() as i32;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            kill_group(pgid);
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    // Background commands of the line may still be running: wait for the group to empty.
    let until = Instant::now() + Duration::from_secs(5);
    while group_alive(pgid) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(2));
    }
    kill_group(pgid);
}

fn kill_group(pgid: i32) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
}

fn group_alive(pgid: i32) -> bool {
    rustix::process::Pid::from_raw(pgid)
        .is_some_and(|pid| rustix::process::test_kill_process_group(pid).is_ok())
}

#[test]
fn the_shells_run_only_commands_the_parser_found() {
    let tmp = tempfile::tempdir().unwrap();
    let stubs = tmp.path().join("stubs");
    std::fs::create_dir_all(&stubs).unwrap();
    let mut lines: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut names: BTreeSet<String> = ALWAYS.iter().map(|s| s.to_string()).collect();
    let mut skipped = 0;
    for c in table() {
        if !seen.insert(c.command.clone()) {
            continue;
        }
        let Ok(parsed) = invocations(&c.command) else {
            skipped += 1;
            continue;
        };
        if fork_bomb(&c.command).is_some() || unsafe_to_run(&c.command) {
            skipped += 1;
            continue;
        }
        for words in &parsed {
            if let Some(w) = words.first().filter(|w| !w.dynamic) {
                let n = w.text.rsplit('/').next().unwrap_or(&w.text);
                if !n.is_empty()
                    && n != "."
                    && n != ".."
                    && n.chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || "._+-[".contains(ch))
                {
                    names.insert(n.to_string());
                }
            }
        }
        lines.push(c.command.clone());
    }
    for n in &names {
        let p = stubs.join(n);
        std::fs::write(&p, stub_script(n)).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    assert!(lines.len() >= 300, "only {} lines run", lines.len());
    let mut wrong = Vec::new();
    let mut ran_total = 0;
    let mut traced: Vec<(String, &str, Vec<Vec<String>>)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let parsed = invocations(line).unwrap_or_default();
        for shell in ["dash", "bash"] {
            let dir = tmp.path().join(format!("{i}-{shell}"));
            std::fs::create_dir_all(&dir).unwrap();
            let log = dir.join("log");
            run(shell, line, &dir, &stubs, &log);
            let ran_here = read_log(&log);
            traced.push((line.clone(), shell, ran_here.clone()));
            for ran in ran_here {
                ran_total += 1;
                if !matches(&ran, &parsed) {
                    wrong.push(format!(
                        "{shell} ran {ran:?} for {line:?}, which the parser did not find (it \
                         found {:?})",
                        parsed
                            .iter()
                            .map(|w| w.iter().map(|w| w.text.as_str()).collect::<Vec<_>>())
                            .collect::<Vec<_>>()
                    ));
                }
            }
        }
    }
    eprintln!(
        "{} lines run under dash and bash ({skipped} skipped), {ran_total} commands traced",
        lines.len()
    );
    assert!(ran_total > 500, "only {ran_total} commands were traced");
    // The harness sees what the shells run where the parser of issue 21 did not: these lines
    // run `touch` (or `sh -c …`) under both shells, and that parser found no such command.
    for (line, want) in [
        ("ls \r#; touch pwned", vec!["touch", "pwned"]),
        ("echo ${x:-$(touch pwned)}", vec!["touch", "pwned"]),
        (
            "env -u ls sh -c 'touch pwned'",
            vec!["sh", "-c", "touch pwned"],
        ),
    ] {
        for shell in ["dash", "bash"] {
            let seen = traced
                .iter()
                .filter(|(l, s, _)| l == line && *s == shell)
                .flat_map(|(_, _, r)| r.iter())
                .any(|r| *r == want);
            assert!(seen, "{shell} did not run {want:?} for {line:?}");
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
