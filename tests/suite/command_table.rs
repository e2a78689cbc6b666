//! The command policy table (`tests/policy/commands.tsv`): every line through the library
//! (`Policy::decide_command`), a handful through the real binary (`toolpilot policy check
//! --json`) and the HTTP endpoint (`POST /v1/policy/check`).

use std::collections::BTreeMap;

use serde_json::json;
use toolpilot::config::PolicyConfig;
use toolpilot::policy::command::{Class, Verdict, WritesSwitch};
use toolpilot::policy::{DEFAULT_PROTECTED, Policy, WorkspaceJudge};
use toolpilot::workspace::{DEFAULT_SENSITIVE, Workspace};

use crate::support::*;

/// One line of the table.
#[derive(Debug, Clone)]
pub struct Case {
    pub line_no: usize,
    pub verdict: Verdict,
    pub class: Class,
    pub command: String,
    /// The `@policy` settings in force.
    pub settings: Vec<(String, String)>,
}

const TABLE: &str = include_str!("../policy/commands.tsv");

/// The table's lines, with `⏎`, `␍` and `⇥` turned into newline, carriage return and tab.
pub fn table() -> Vec<Case> {
    let mut out = Vec::new();
    let mut settings: Vec<(String, String)> = Vec::new();
    for (i, line) in TABLE.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("@policy ") {
            if rest.trim() == "default" {
                settings.clear();
            } else {
                let (k, v) = rest.split_once('=').expect("@policy KEY=VALUE");
                settings.push((k.trim().to_string(), v.trim().to_string()));
            }
            continue;
        }
        let mut cols = line.splitn(3, '\t');
        let (Some(v), Some(c), Some(cmd)) = (cols.next(), cols.next(), cols.next()) else {
            panic!(
                "line {}: expected three tab-separated columns: {line:?}",
                i + 1
            );
        };
        out.push(Case {
            line_no: i + 1,
            verdict: Verdict::parse(v).unwrap_or_else(|| panic!("line {}: verdict {v:?}", i + 1)),
            class: Class::parse(c).unwrap_or_else(|| panic!("line {}: class {c:?}", i + 1)),
            command: cmd.replace('⏎', "\n").replace('␍', "\r").replace('⇥', "\t"),
            settings: settings.clone(),
        });
    }
    out
}

pub fn policy_for(settings: &[(String, String)]) -> Policy {
    let mut cfg = PolicyConfig {
        protected: DEFAULT_PROTECTED.iter().map(|s| s.to_string()).collect(),
        command_defaults: true,
        ..PolicyConfig::default()
    };
    for (k, v) in settings {
        match k.as_str() {
            "command_writes" => {
                cfg.command_writes = match v.as_str() {
                    "allow" => WritesSwitch::Allow,
                    _ => WritesSwitch::Ask,
                }
            }
            "allow" => cfg.allow.push(v.clone()),
            "ask" => cfg.ask.push(v.clone()),
            "deny" => cfg.deny.push(v.clone()),
            "approved" => cfg.approved.push(v.clone()),
            other => panic!("unknown @policy key {other}"),
        }
    }
    Policy::new(&cfg).unwrap()
}

pub fn workspace() -> (tempfile::TempDir, Workspace) {
    let tmp = tempfile::tempdir().unwrap();
    let sens: Vec<String> = DEFAULT_SENSITIVE.iter().map(|s| s.to_string()).collect();
    let ws = Workspace::open(tmp.path(), &sens).unwrap();
    (tmp, ws)
}

#[test]
fn every_line_of_the_command_table_gets_its_verdict_and_class() {
    let cases = table();
    assert!(cases.len() >= 400, "the table has {} lines", cases.len());
    let (_tmp, ws) = workspace();
    let mut policies: BTreeMap<String, Policy> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut split: BTreeMap<String, usize> = BTreeMap::new();
    for c in &cases {
        let key = format!("{:?}", c.settings);
        let policy = policies
            .entry(key)
            .or_insert_with(|| policy_for(&c.settings));
        let judge = WorkspaceJudge::new(&ws, policy);
        let (decision, a) = policy.decide_command("run_terminal_command", &c.command, true, &judge);
        *split
            .entry(format!(
                "{:<10} {}",
                format!("{:?}", c.verdict),
                c.class.label()
            ))
            .or_default() += 1;
        if a.verdict != c.verdict || a.class != c.class {
            wrong.push(format!(
                "line {}: {:?}: got {:?} {} ({}), expected {:?} {}",
                c.line_no,
                c.command,
                a.verdict,
                a.class.label(),
                a.reason,
                c.verdict,
                c.class.label()
            ));
        }
        // The decision agrees with the assessment, and reasons never call a writer read-only.
        assert_eq!(decision.person_only(), a.verdict == Verdict::AskPerson);
        if a.class != Class::ReadOnly {
            assert!(
                !a.reason.contains("a read-only command"),
                "line {}: {:?}: {}",
                c.line_no,
                c.command,
                a.reason
            );
        }
    }
    eprintln!("{} lines:", cases.len());
    for (k, n) in &split {
        eprintln!("  {n:>4}  {k}");
    }
    assert!(
        wrong.is_empty(),
        "{} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

/// A handful of lines, default policy, as the binary and the endpoint show them.
const SAMPLES: &[&str] = &[
    "ls -la",
    "sed -n '1e touch x' f",
    "git -c core.pager='touch pwned' log",
    "touch notes.txt",
    "cat .env",
    "echo x > .git/config",
    ":(){ :|:& };:",
    "env -u ls sh -c 'touch pwned'",
    "ls \r#; touch pwned",
];

fn expected(cmd: &str) -> Case {
    table()
        .into_iter()
        .find(|c| c.command == cmd && c.settings.is_empty())
        .unwrap_or_else(|| panic!("{cmd:?} is not in the table"))
}

#[test]
fn policy_check_on_the_command_line_shows_verdict_class_and_person_only() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in SAMPLES {
        let c = expected(cmd);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_toolpilot"))
            .args(["policy", "check", "--json", cmd, "--workspace"])
            .arg(dir.path())
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .env_remove("TOOLPILOT_CONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let sandboxed = v["sandbox"]["available"] == true;
        if !sandboxed && c.verdict == Verdict::Allow {
            assert_eq!(v["decision"], "ask", "{cmd}: {v}");
            assert_eq!(v["class"], "unsandboxed", "{cmd}: {v}");
            continue;
        }
        assert_eq!(v["decision"], c.verdict.label(), "{cmd}: {v}");
        assert_eq!(v["class"], c.class.label(), "{cmd}: {v}");
        assert_eq!(v["person_only"], c.verdict.person_only(), "{cmd}: {v}");
        assert!(v["parts"].as_array().is_some(), "{v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_check_over_http_shows_verdict_class_and_person_only() {
    let s = TestServer::builder().yes().start().await;
    for cmd in SAMPLES {
        let c = expected(cmd);
        let r = s
            .post_raw("/v1/policy/check", json!({"command": cmd}).to_string())
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        if r.body["sandboxed"] != true && c.verdict == Verdict::Allow {
            assert_eq!(r.body["decision"], "ask", "{cmd}: {}", r.text);
            continue;
        }
        assert_eq!(r.body["decision"], c.verdict.label(), "{cmd}: {}", r.text);
        assert_eq!(r.body["class"], c.class.label(), "{cmd}: {}", r.text);
        assert_eq!(
            r.body["person_only"],
            c.verdict.person_only(),
            "{cmd}: {}",
            r.text
        );
        // --yes approves asks, but never one only a person may answer.
        assert_eq!(
            r.body["approved_by_yes"],
            c.verdict == Verdict::Ask,
            "{cmd}: {}",
            r.text
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yes_does_not_approve_what_only_a_person_may() {
    let s = TestServer::builder()
        .yes()
        .file(".env", "API_KEY=hunter2\n")
        .file("notes.txt", "notes\n")
        .script(json!({"rounds": [{"tool_calls": [
            {"id": "secret", "name": "run_terminal_command", "arguments": {"command": "cat .env"}},
            {"id": "hook", "name": "run_terminal_command", "arguments": {"command": "echo x > .git/config"}},
            {"id": "plain", "name": "run_terminal_command", "arguments": {"command": "cat notes.txt"}}
        ]}, {"text": "done"}]}))
        .start()
        .await;
    s.chat(ask("x")).await;
    let reqs = s.requests();
    let secret = tool_result(&reqs[1], "secret");
    assert!(
        secret.contains("only a person can approve this") && !secret.contains("hunter2"),
        "{secret}"
    );
    assert!(secret.contains("sensitive file"), "{secret}");
    let hook = tool_result(&reqs[1], "hook");
    assert!(hook.contains("only a person can approve this"), "{hook}");
    assert!(hook.contains("protected path"), "{hook}");
    assert!(
        !s.path(".git/config").exists()
            || std::fs::read_to_string(s.path(".git/config")).unwrap() != "x\n"
    );
    // An ordinary ask is still approved by --yes (or allowed outright with a sandbox).
    let plain = tool_result(&reqs[1], "plain");
    assert!(plain.contains("notes"), "{plain}");
}
