//! Protected paths hold, through the real server: under `--yes`, with odd spellings, through
//! links, and around commands, which may not create or change them unless a person approved
//! the command. Nothing toolpilot does on the host side follows a link a command planted: a
//! canary file outside the workspace stays byte-identical.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;

const CANARY: &str = "CANARY-outside-the-workspace-5b1e\n";
const CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n";

fn git(ws: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .args(args)
        .current_dir(ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap()
}

/// A real git repository as the workspace, with a known config and a hook sample, and a canary
/// file and folder outside it.
fn make_repo(s: &TestServer) {
    assert!(git(&s.ws, &["init", "-q"]).status.success());
    std::fs::write(s.path(".git/config"), CONFIG).unwrap();
    std::fs::write(s.path(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
    let top = s.dir.path();
    std::fs::write(top.join("canary.txt"), CANARY).unwrap();
    std::fs::create_dir_all(top.join("outside")).unwrap();
    std::fs::write(top.join("outside/keep.txt"), CANARY).unwrap();
}

fn assert_outside_untouched(s: &TestServer, what: &str) {
    let top = s.dir.path();
    assert_eq!(
        std::fs::read_to_string(top.join("canary.txt")).unwrap(),
        CANARY,
        "{what}: the canary outside the workspace changed"
    );
    let names: Vec<String> = std::fs::read_dir(top.join("outside"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["keep.txt"], "{what}: the outside folder changed");
    assert_eq!(
        std::fs::read_to_string(top.join("outside/keep.txt")).unwrap(),
        CANARY,
        "{what}"
    );
}

fn cmd(c: &str) -> (&'static str, Value) {
    ("run_terminal_command", json!({"command": c}))
}

/// The four ways a command could make toolpilot's host-side code write outside the
/// workspace: a link as `.git/config`, as `.git/hooks`, inside `.git/hooks`, and `.git`
/// itself replaced by a link. Run with the default policy and with `--yes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_planted_by_commands_are_never_written_through() {
    // The protected names go through a variable, as a command could write them, so that the
    // policy (which refuses the literal spellings under --yes) does not stop them first: the
    // layers behind it are what this tests.
    let shapes = [
        (
            "link as .git/config",
            "g=.git; cp -sf @TOP@/canary.txt $g/config",
        ),
        (
            "link as .git/config (ln)",
            "g=.git; ln -sf @TOP@/canary.txt $g/config",
        ),
        (
            "link as .git/hooks",
            "g=.git; rm -rf $g/hooks && ln -s @TOP@/outside $g/hooks",
        ),
        (
            "link inside .git/hooks",
            "g=.git; ln -s @TOP@/canary.txt $g/hooks/pre-commit; ln -sf @TOP@/canary.txt $g/hooks/pre-commit.sample",
        ),
        (
            ".git replaced by a link",
            "g=.git; mv $g $g-moved && ln -s @TOP@/outside $g",
        ),
        ("literal spelling", "cp -sf @TOP@/canary.txt .git/config"),
    ];
    for (yes, no_ns) in [(false, false), (true, false), (true, true)] {
        for (what, line) in shapes {
            let mut b = TestServer::builder()
                .script(calls_script(&[cmd(line)]))
                .tweak(move |c| c.terminal.no_namespaces = no_ns);
            if yes {
                b = b.yes();
            }
            let s = b.start().await;
            make_repo(&s);
            let out = send_and_collect(&s, ask("go"), 1).await;
            let what = format!("{what} (--yes: {yes}, no namespaces: {no_ns}): {}", out[0]);
            assert_outside_untouched(&s, &what);
            let meta = std::fs::symlink_metadata(s.path(".git")).unwrap();
            assert!(!meta.file_type().is_symlink(), "{what}");
            for p in [".git/config", ".git/hooks", ".git/hooks/pre-commit"] {
                let m = std::fs::symlink_metadata(s.path(p));
                assert!(
                    m.map_or(true, |m| !m.file_type().is_symlink()),
                    "{what}: {p} is still a link"
                );
            }
            assert_eq!(
                std::fs::read_to_string(s.path(".git/config")).unwrap(),
                CONFIG,
                "{what}"
            );
            assert_eq!(
                std::fs::read_to_string(s.path(".git/hooks/pre-commit.sample")).unwrap(),
                "#!/bin/sh\n",
                "{what}"
            );
        }
    }
}

/// `--yes` never approves writing a protected path with the file tools, however it is
/// spelled; the model is told why and how a person can allow it; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yes_does_not_approve_writing_protected_paths() {
    let create = |p: &str| {
        (
            "create_new_file",
            json!({"filepath": p, "contents": "{\"x\": 1}\n"}),
        )
    };
    let replace = |p: &str| {
        (
            "single_find_and_replace",
            json!({"filepath": p, "old_string": "ORIGINAL", "new_string": "CHANGED"}),
        )
    };
    let calls = [
        create(".git/hooks/pre-commit"),
        replace(".git/config"),
        create(".vscode/tasks.json"),
        replace(".vscode/launch.json"),
        create(".vscode/settings.json"),
        replace(".claude/settings.local.json"),
        create(".claude/settings.json"),
        create(".cursor/mcp.json"),
        create(".continue/mcpServers/evil.yaml"),
        create(".envrc"),
        create(".GIT/hooks/post-checkout"),
        create(".g\u{200c}it/config"),
        create("git~1/hooks/pre-push"),
        create(".continueignore"),
        create(".mcp.json"),
        create("sub/.git/hooks/pre-commit"),
        create("docs/v/launch.json"),
        create("sub/.VSCode/tasks.json"),
        create("src/ok.rs"),
    ];
    let b = TestServer::builder()
        .yes()
        .file(".git/config", "ORIGINAL\n")
        .file(".vscode/launch.json", "ORIGINAL\n")
        .file(".claude/settings.local.json", "ORIGINAL\n")
        .file("docs/readme.md", "x\n");
    let s = b.script(calls_script(&calls)).start().await;
    symlink("../.vscode", s.path("docs/v")).unwrap();
    let out = send_and_collect(&s, ask("go"), calls.len()).await;
    for (i, (_, args)) in calls.iter().enumerate() {
        let p = args["filepath"].as_str().unwrap();
        if p == "src/ok.rs" {
            assert!(
                out[i].contains("Created") || out[i].contains("created"),
                "{}",
                out[i]
            );
            continue;
        }
        assert!(
            out[i].contains("needs a person's approval") && out[i].contains("--yes"),
            "{p}: {}",
            out[i]
        );
        assert!(out[i].contains("policy.allow"), "{p}: {}", out[i]);
    }
    for unchanged in [
        ".git/config",
        ".vscode/launch.json",
        ".claude/settings.local.json",
    ] {
        assert_eq!(
            std::fs::read_to_string(s.path(unchanged)).unwrap(),
            "ORIGINAL\n"
        );
    }
    for absent in [
        ".git/hooks/pre-commit",
        ".vscode/tasks.json",
        ".vscode/settings.json",
        ".claude/settings.json",
        ".cursor",
        ".continue",
        ".envrc",
        ".GIT",
        ".g\u{200c}it",
        "git~1",
        ".continueignore",
        ".mcp.json",
        "sub",
    ] {
        assert!(!s.path(absent).exists(), "{absent} was created");
    }
}

/// An allow rule that names the protected path lets `--yes` write it; one that does not
/// name it (a bare tool, `**`) does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_allow_rule_that_names_the_path_allows_it() {
    let create = |p: &str| {
        (
            "create_new_file",
            json!({"filepath": p, "contents": "{}\n"}),
        )
    };
    let calls = [create(".vscode/tasks.json"), create(".vscode/launch.json")];
    let (s, out) = run_calls(
        TestServer::builder().yes().config(
            "[policy]\nallow = [\"create_new_file\", \"create_new_file(**)\", \"create_new_file(.vscode/tasks.json)\"]\n",
        ),
        &calls,
    )
    .await;
    assert!(s.path(".vscode/tasks.json").exists(), "{}", out[0]);
    assert!(out[1].contains("needs a person's approval"), "{}", out[1]);
    assert!(!s.path(".vscode/launch.json").exists());
}

/// A person can still approve a protected write while the server runs with `--yes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_can_approve_a_protected_write_under_yes() {
    let s = TestServer::builder()
        .yes()
        .config("[approvals]\nmode = \"wait\"\ntimeout_secs = 60\n")
        .script(one_call(
            "create_new_file",
            json!({"filepath": ".vscode/tasks.json", "contents": "{}\n"}),
        ))
        .start()
        .await;
    let remote = s.client_clone();
    let run = tokio::spawn(async move { remote.chat(ask("go")).await });
    approve_pending(&s).await;
    let reply = run.await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text);
    assert_eq!(
        std::fs::read_to_string(s.path(".vscode/tasks.json")).unwrap(),
        "{}\n"
    );
}

/// Commands the policy or `--yes` let run cannot leave a protected path created or changed:
/// the planted-fsmonitor attack of issue 21, a nested repository, editor tasks, an `.envrc`.
/// With a mount namespace the existing ones are read-only; without one (the fallback), what
/// the command changed is put back and what it created removed. Either way the model is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_plant_code_in_protected_paths() {
    let attack = "mkdir -p .git/x && cp -r .git/objects .git/refs .git/x/ && printf '[core]\\n\\tfsmonitor = \"touch PWNED\"\\n' | tee .git/x/config >/dev/null && printf 'x\\n' | tee .git/commondir >/dev/null";
    // Each twice: as written (the policy refuses the protected names under --yes), and with
    // the names through a variable (the sandbox and the guard stop them).
    let calls = [
        cmd(attack),
        cmd("mkdir -p .vscode && printf '{}' > .vscode/tasks.json"),
        cmd("mkdir -p sub && cd sub && git init -q && git config core.fsmonitor 'touch PWNED'"),
        cmd("printf 'touch PWNED' > .envrc; printf x > notes.txt"),
        cmd("printf '[core]\\n\\tfsmonitor = touch PWNED\\n' >> .git/config"),
        cmd(&format!("g=.git; {}", attack.replace(".git", "$g"))),
        cmd("v=.vscode; mkdir -p $v && printf '{}' > $v/tasks.json"),
        cmd("e=.envrc; printf 'touch PWNED' > $e; printf x > notes.txt"),
        cmd("g=.git; printf '[core]\\n\\tfsmonitor = touch PWNED\\n' >> $g/config"),
    ];
    for no_ns in [false, true] {
        let s = TestServer::builder()
            .yes()
            .tweak(move |c| c.terminal.no_namespaces = no_ns)
            .script(calls_script(&calls))
            .start()
            .await;
        make_repo(&s);
        let out = send_and_collect(&s, ask("go"), calls.len()).await;
        let fsmonitor = git(&s.ws, &["config", "core.fsmonitor"]);
        assert!(
            fsmonitor.stdout.is_empty(),
            "core.fsmonitor = {} (no namespaces: {no_ns}): {out:#?}",
            String::from_utf8_lossy(&fsmonitor.stdout)
        );
        assert_eq!(
            std::fs::read_to_string(s.path(".git/config")).unwrap(),
            CONFIG
        );
        for gone in [
            ".git/commondir",
            ".git/x/config",
            ".vscode",
            "sub/.git",
            ".envrc",
        ] {
            assert!(!s.path(gone).exists(), "{gone} is still there: {out:#?}");
        }
        assert!(s.path("notes.txt").exists(), "ordinary writes stay");
        for (i, o) in out.iter().enumerate() {
            let told = o.contains("[Protected paths: toolpilot");
            let refused = o.contains("Read-only file system");
            let not_run = o.starts_with("run_terminal_command was not run")
                && o.contains("only a person can approve this");
            assert!(
                told || not_run || (refused && !no_ns),
                "call {i} (no namespaces: {no_ns}): {o}"
            );
            if i >= 5 {
                assert!(
                    !not_run,
                    "call {i}: the disguised form got past the policy: {o}"
                );
            }
        }
        assert!(!s.ws.join("PWNED").exists());
        // git still works in the workspace.
        assert!(git(&s.ws, &["status", "--short"]).status.success());
    }
}

/// Waits for the one call that waits for approval and answers it as a person would.
async fn approve_pending(s: &TestServer) {
    let mut id = String::new();
    for _ in 0..400 {
        let list = s.get("/v1/approvals").await.body;
        if let Some(a) = list["data"].as_array().and_then(|a| a.first()) {
            id = a["id"].as_str().unwrap_or_default().to_string();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(!id.is_empty(), "nothing waited for approval");
    let r = s
        .post_raw(&format!("/v1/approvals/{id}"), r#"{"decision":"approve"}"#)
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

/// A command a person approved may change a protected path; the change is in the run's
/// checkpoint, and undo puts it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_approved_command_may_change_protected_paths_and_undo_restores_them() {
    let s = TestServer::builder()
        .config("[approvals]\nmode = \"wait\"\ntimeout_secs = 60\n")
        .script(calls_script(&[cmd(
            "git config user.name Someone && printf 'use flake' > .envrc",
        )]))
        .start()
        .await;
    make_repo(&s);
    let remote = s.client_clone();
    let run = tokio::spawn(async move { remote.chat(ask("go")).await });
    approve_pending(&s).await;
    let reply = run.await.unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text);
    let out = collected(&s, 1);
    assert!(!out[0].contains("Protected paths: toolpilot"), "{}", out[0]);
    assert!(
        std::fs::read_to_string(s.path(".git/config"))
            .unwrap()
            .contains("Someone")
    );
    assert!(s.path(".envrc").exists());
    let run_id = reply.headers["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let u = s.post_raw(&format!("/v1/runs/{run_id}/undo"), "").await;
    assert_eq!(u.status, 200, "{}", u.text);
    assert_eq!(
        std::fs::read_to_string(s.path(".git/config")).unwrap(),
        CONFIG
    );
    assert!(!s.path(".envrc").exists(), "{}", u.text);
}

/// A background job is held like a foreground command: what it planted is removed when it
/// ends, and its report says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_job_cannot_leave_a_hook_behind() {
    // Without namespaces, so that the hook is really written and must be taken away.
    let s = TestServer::builder()
        .yes()
        .tweak(|c| c.terminal.no_namespaces = true)
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "run_terminal_command", "arguments": {
                "command": "g=.git; printf '#!/bin/sh\\ntouch PWNED\\n' > $g/hooks/post-checkout; sleep 1",
                "waitForCompletion": false}}]},
            {"text": "started"},
            {"tool_calls": [{"id": "c2", "name": "check_background_job", "arguments": {"job_id": "job-1"}}]},
            {"text": "checked"}
        ]}))
        .start()
        .await;
    make_repo(&s);
    let r = s.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut ended = false;
    for _ in 0..400 {
        let jobs = s.get("/v1/jobs").await.body;
        if jobs["data"][0]["state"] != "running" && !jobs["data"][0].is_null() {
            ended = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert!(ended, "the job did not end");
    assert!(!s.path(".git/hooks/post-checkout").exists());
    let r = s.chat(ask("and now?")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let report = tool_result(s.requests().last().unwrap(), "c2");
    assert!(
        report.contains("[Protected paths: toolpilot removed .git/hooks/post-checkout"),
        "{report}"
    );
}

/// A saved "always allow" rule that does not name a protected path (here one saved by an older
/// version, without the leading `/`) does not approve writing it: protected paths are checked
/// before saved rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_rule_wider_than_a_protected_path_does_not_approve_it() {
    let first = TestServer::builder().start().await;
    let dir = first.dir.clone();
    drop(first);
    let folders: Vec<_> = std::fs::read_dir(dir.path().join("state/workspaces"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(folders.len(), 1);
    std::fs::write(
        folders[0].path().join("approved-rules.toml"),
        "allow = [\"create_new_file(pre-commit)\", \"create_new_file(**)\", \"single_find_and_replace(config)\"]\n",
    )
    .unwrap();
    let calls = [
        (
            "create_new_file",
            json!({"filepath": ".git/hooks/pre-commit", "contents": "#!/bin/sh\n"}),
        ),
        (
            "single_find_and_replace",
            json!({"filepath": ".git/config", "old_string": "ORIGINAL", "new_string": "CHANGED"}),
        ),
        (
            "create_new_file",
            json!({"filepath": "notes/pre-commit", "contents": "ok\n"}),
        ),
    ];
    let s = TestServer::builder()
        .yes()
        .reuse_dir(dir)
        .file(".git/config", "ORIGINAL\n")
        .script(calls_script(&calls))
        .start()
        .await;
    let out = send_and_collect(&s, ask("go"), calls.len()).await;
    assert!(out[0].contains("needs a person's approval"), "{}", out[0]);
    assert!(out[1].contains("needs a person's approval"), "{}", out[1]);
    assert!(!s.path(".git/hooks/pre-commit").exists());
    assert_eq!(
        std::fs::read_to_string(s.path(".git/config")).unwrap(),
        "ORIGINAL\n"
    );
    assert!(s.path("notes/pre-commit").exists(), "{}", out[2]);
}

/// A person editing a protected file while a command runs loses nothing: with a mount
/// namespace the command could not have made the change, so it stays; without one, the file is
/// put back and the person's version is kept in the quarantine the result names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_edit_during_a_command_is_never_lost() {
    for no_ns in [false, true] {
        let s = TestServer::builder()
            .yes()
            .tweak(move |c| c.terminal.no_namespaces = no_ns)
            .file(".vscode/settings.json", "{\"before\": 1}\n")
            .script(calls_script(&[cmd(
                "touch started; while [ ! -f go ]; do sleep 0.05; done; echo done",
            )]))
            .start()
            .await;
        let remote = s.client_clone();
        let run = tokio::spawn(async move { remote.chat(ask("go")).await });
        assert!(
            eventually(|| s.path("started").exists()).await,
            "the command did not start"
        );
        // The person's edit, from outside the command.
        std::fs::write(s.path(".vscode/settings.json"), "{\"mine\": 2}\n").unwrap();
        std::fs::write(s.path("go"), "").unwrap();
        assert_eq!(run.await.unwrap().status, 200);
        let out = collected(&s, 1);
        let now = std::fs::read_to_string(s.path(".vscode/settings.json")).unwrap();
        if no_ns {
            assert_eq!(now, "{\"before\": 1}\n", "{}", out[0]);
            let kept = out[0]
                .split("is kept in ")
                .nth(1)
                .and_then(|r| r.split(" (in case").next())
                .unwrap_or_else(|| panic!("no quarantine named: {}", out[0]));
            assert_eq!(
                std::fs::read_to_string(std::path::Path::new(kept).join(".vscode/settings.json"))
                    .unwrap(),
                "{\"mine\": 2}\n"
            );
        } else {
            assert_eq!(now, "{\"mine\": 2}\n", "{}", out[0]);
            assert!(!out[0].contains("Protected paths: toolpilot"), "{}", out[0]);
        }
    }
}
