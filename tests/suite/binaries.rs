//! The real executables: `run`, `tools`, `serve` and `mock-upstream` as separate processes.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_toolpilot");

fn toolpilot() -> Command {
    isolated(Command::new(BIN))
}

/// toolpilot started from a shell whose open-file soft limit is `soft`.
fn toolpilot_with_nofile(soft: u32) -> Command {
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg(format!("ulimit -Sn {soft} && exec \"$0\" \"$@\""))
        .arg(BIN);
    isolated(sh)
}

/// The tests decide the configuration; nothing leaks in from the developer's shell, and
/// nothing leaks out: home, state folder (the default `--state-dir`) and working directory
/// (the default `--workspace`) are a temporary folder of the test binary, not the
/// developer's.
fn isolated(mut c: Command) -> Command {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLPILOT_") || k == "OPENAI_API_KEY" || k == "RUST_LOG" {
            c.env_remove(k);
        }
    }
    let home = HOME
        .get_or_init(|| tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap())
        .path();
    c.env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .current_dir(home);
    c.kill_on_drop(true);
    c
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(
        &dir.path().join("README.md"),
        "# Rocket Garden\n\nGrows rockets.\n",
    );
    write(&dir.path().join("src/lib.rs"), "pub fn launch() {}\n");
    dir
}

/// Reads lines from a child's output until one contains `needle`; returns that line.
async fn wait_for_line(
    lines: &mut tokio::io::Lines<BufReader<impl tokio::io::AsyncRead + Unpin>>,
    needle: &str,
) -> String {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains(needle) {
                return line;
            }
        }
        panic!("the process ended before printing {needle:?}");
    })
    .await;
    found.unwrap_or_else(|_| panic!("no line with {needle:?} within 30 s"))
}

/// `http://127.0.0.1:PORT/v1` from a line that contains it.
fn url_in(line: &str) -> String {
    let start = line.find("http://").unwrap();
    line[start..]
        .split_whitespace()
        .next()
        .unwrap()
        .trim_end_matches([')', ','])
        .to_string()
}

/// The admin token in a log line that shows the console's address (`…/#admin=TOKEN`).
fn admin_token_in(line: &str) -> String {
    let start = line.find("#admin=").unwrap() + "#admin=".len();
    line[start..].split_whitespace().next().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_answers_one_question_with_the_demo_model() {
    let ws = workspace();
    let out = toolpilot()
        .args(["run", "What is this project?", "--workspace"])
        .arg(ws.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("[toolpilot demo model]"), "{stdout}");
    assert!(stdout.contains("> # Rocket Garden"), "{stdout}");
    assert!(
        stdout.contains("You asked: \"What is this project?\""),
        "{stdout}"
    );
    assert!(stderr.contains("no upstream configured"), "{stderr}");
    assert!(
        stderr.contains("→ ls") && stderr.contains("→ read_file"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_lists_every_tool_with_its_effective_policy() {
    let ws = workspace();
    let cfg = ws
        .path()
        .join("..")
        .join(format!("tp-{}.toml", std::process::id()));
    std::fs::write(
        &cfg,
        "[policy.tools]\ngrep_search = \"deny\"\n[policy]\nallow = [\"read_file(src/**)\"]\n",
    )
    .unwrap();
    let out = toolpilot()
        .arg("tools")
        .arg("--config")
        .arg(&cfg)
        .output()
        .await
        .unwrap();
    std::fs::remove_file(&cfg).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = |tool: &str| {
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(tool))
            .unwrap_or_else(|| panic!("no line for {tool} in\n{text}"))
            .to_string()
    };
    for (tool, policy) in [
        ("read_file", "allowedWithoutPermission"),
        ("read_currently_open_file", "allowedWithPermission"),
        ("create_new_file", "allowedWithPermission"),
        ("run_terminal_command", "allowedWithPermission"),
        ("request_rule", "disabled"),
        ("create_rule_block", "disabled"),
        ("search_web", "allowedWithoutPermission"),
        ("view_subdirectory", "allowedWithPermission"),
    ] {
        assert!(line(tool).contains(policy), "{tool}: {}", line(tool));
    }
    assert!(line("grep_search").contains("disabled") && line("grep_search").contains("config"));
    assert!(
        text.contains("rule: policy.allow[0] `read_file(src/**)`"),
        "{text}"
    );
    let tool_lines = text
        .lines()
        .filter(|l| {
            toolpilot::policy::known_tool_names()
                .contains(&l.split_whitespace().next().unwrap_or(""))
        })
        .count();
    assert_eq!(tool_lines, 24);
}

/// A bad rule stops every command before it does anything, with the rule's key named, as it
/// did when the configuration itself compiled the rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_rule_stops_every_command_with_its_key_named() {
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let cfg = state.path().join("c.toml");
    std::fs::write(&cfg, "[policy]\ndeny = [\"read_file(\"]\n").unwrap();
    for args in [&["tools"][..], &["runs"], &["run", "hello"]] {
        let out = toolpilot()
            .args(args)
            .arg("--config")
            .arg(&cfg)
            .arg("--workspace")
            .arg(ws.path())
            .arg("--state-dir")
            .arg(state.path())
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            stderr.starts_with(
                "toolpilot: policy.deny[0] \"read_file(\": a rule is `tool` or `tool(specifier)`"
            ),
            "{args:?}: {stderr}"
        );
    }
}

async fn spawn_mock(script: serde_json::Value) -> (Child, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("script.json");
    std::fs::write(&path, script.to_string()).unwrap();
    let mut child = toolpilot()
        .args(["mock-upstream", "--bind", "127.0.0.1:0", "--script"])
        .arg(&path)
        .arg("--record")
        .arg(dir.path().join("record.json"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = wait_for_line(&mut lines, "listening on").await;
    (child, url_in(&line), dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_mock_upstream_as_real_processes() {
    let (_mock, mock_url, mock_dir) = spawn_mock(json!({"rounds": [
        {"tool_calls": [{"id": "c1", "name": "grep_search", "arguments": {"query": "fn launch"}}]},
        {"text": "launch() is in src/lib.rs"}
    ]}))
    .await;
    let ws = workspace();
    let mut server = toolpilot()
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "mock-model",
            "--upstream",
            &mock_url,
            "--workspace",
        ])
        .arg(ws.path())
        .env("TOOLPILOT_LOG", "info")
        .env("TOOLPILOT_UPSTREAM_API_KEY", "sk-test-secret-123")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let line = wait_for_line(&mut lines, "listening on").await;
    let base = url_in(&line);
    let client = client();
    let r = to_reply(
        client
            .post(format!("{base}/chat/completions"))
            .body(ask("where is launch?").to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.body["choices"][0]["message"]["content"],
        "launch() is in src/lib.rs"
    );
    // The mock's record file shows the tool result and the API key sent upstream.
    let record: Vec<toolpilot::mock::Recorded> = serde_json::from_str(
        &std::fs::read_to_string(mock_dir.path().join("record.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(record.len(), 2);
    assert_eq!(
        record[0].headers["authorization"],
        "Bearer sk-test-secret-123"
    );
    let grep = tool_result(&record[1], "c1");
    assert!(
        grep.starts_with("src/lib.rs\n1:pub fn launch() {}"),
        "{grep}"
    );

    // SIGTERM shuts it down cleanly.
    let pid = server.id().unwrap();
    let _ = std::process::Command::new("kill")
        .arg(pid.to_string())
        .status();
    let status = tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("serve did not exit after SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");
    // The key never appears in the log.
    let mut log = String::new();
    while let Ok(Some(l)) = lines.next_line().await {
        log.push_str(&l);
        log.push('\n');
    }
    assert!(!log.contains("sk-test-secret-123"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsafe_or_invalid_start_ups_are_refused() {
    let out = toolpilot()
        .args(["serve", "--bind", "0.0.0.0:0"])
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without a bearer token"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[agent]\nmax_round = 3\n").unwrap();
    let out = toolpilot()
        .arg("tools")
        .arg("--config")
        .arg(&cfg)
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown field `max_round`"), "{err}");

    let out = toolpilot()
        .args(["run", "x"])
        .env("TOOLPILOT_AGENT__MAX_ROUNDS", "zero")
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TOOLPILOT_AGENT__MAX_ROUNDS (agent.max_rounds)"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reports_upstream_failures_with_a_non_zero_exit() {
    let (_mock, mock_url, _dir) = spawn_mock(json!({"repeat_last": true, "rounds": [
        {"status": 401, "error": "invalid api key"}
    ]}))
    .await;
    let ws = workspace();
    let out = toolpilot()
        .args([
            "run",
            "hello",
            "--model",
            "m",
            "--upstream",
            &mock_url,
            "--workspace",
        ])
        .arg(ws.path())
        .output()
        .await
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the upstream answered HTTP 401: invalid api key"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_commands() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = toolpilot::mock::MockUpstream::start(
        serde_json::from_value(json!({"rounds": [
            {"tool_calls": [{"id": "env", "name": "run_terminal_command", "arguments": {"command": "env; cat /proc/self/limits"}}]},
            {"text": "done"}
        ]}))
        .unwrap(),
        listener,
    )
    .unwrap();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    // The server raises its own open-file limit; commands get the user's back.
    let mut server = toolpilot_with_nofile(256)
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "m",
            "--upstream",
            &mock.base_url(),
            "--workspace",
        ])
        .arg(ws.path())
        .arg("--state-dir")
        .arg(state.path())
        .env("TOOLPILOT_LOG", "info")
        .env("TOOLPILOT_UPSTREAM_API_KEY", "sk-upstream-secret-1")
        .env("OPENAI_API_KEY", "sk-openai-secret-2")
        .env("MY_SERVICE_TOKEN", "service-token-3")
        .env("DB_PASSWORD", "hunter2-4")
        .env("PLAIN_SETTING", "visible-5")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let base = url_in(&wait_for_line(&mut lines, "listening on").await);
    let r = to_reply(
        client()
            .post(format!("{base}/chat/completions"))
            .body(ask("show env").to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let env = tool_result(&mock.requests()[1], "env");
    assert!(env.contains("PLAIN_SETTING=visible-5"), "{env}");
    // Soft and hard open-file limits, from a /proc/PID/limits text.
    let open_files = |limits: &str| -> (String, String) {
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .unwrap();
        let v: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
        (v[0].to_string(), v[1].to_string())
    };
    assert_eq!(open_files(&env).0, "256", "{env}");
    let (soft, hard) = open_files(
        &std::fs::read_to_string(format!("/proc/{}/limits", server.id().unwrap())).unwrap(),
    );
    assert_eq!(soft, hard, "the server's open-file limit was not raised");
    assert!(
        env.contains("CI=1") && env.contains("GIT_TERMINAL_PROMPT=0") && env.contains("PAGER=cat"),
        "{env}"
    );
    for secret in [
        "sk-upstream-secret-1",
        "sk-openai-secret-2",
        "service-token-3",
        "hunter2-4",
    ] {
        assert!(
            !env.contains(secret),
            "{secret} leaked into the command environment:\n{env}"
        );
    }
    // The upstream still got its key.
    assert_eq!(
        mock.requests()[0].headers["authorization"],
        "Bearer sk-upstream-secret-1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_jobs_die_with_the_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = toolpilot::mock::MockUpstream::start(
        serde_json::from_value(json!({"rounds": [
            {"tool_calls": [{"id": "bg", "name": "run_terminal_command", "arguments": {"command": "sleep 4242", "waitForCompletion": false}}]},
            {"text": "started"}
        ]}))
        .unwrap(),
        listener,
    )
    .unwrap();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let mut server = toolpilot()
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "m",
            "--upstream",
            &mock.base_url(),
            "--workspace",
        ])
        .arg(ws.path())
        .arg("--state-dir")
        .arg(state.path())
        .env("TOOLPILOT_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let base = url_in(&wait_for_line(&mut lines, "listening on").await);
    // The admin token (for /v1/jobs) is in the console's address the log shows.
    let admin = admin_token_in(&wait_for_line(&mut lines, "#admin=").await);
    let r = to_reply(
        client()
            .post(format!("{base}/chat/completions"))
            .body(ask("start").to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let jobs = to_reply(
        admin_client(&admin)
            .get(format!("{base}/jobs"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(jobs.body["data"][0]["state"], "running", "{}", jobs.text);
    let pid = jobs.body["data"][0]["pid"].as_u64().unwrap();
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let _ = std::process::Command::new("kill")
        .arg(server.id().unwrap().to_string())
        .status();
    let status = tokio::time::timeout(Duration::from_secs(10), server.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    // The job's supervisor (and its sleep) are gone.
    assert!(eventually(|| !std::path::Path::new(&format!("/proc/{pid}")).exists()).await);
    let sleeping = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x004242\x00"));
    assert!(!sleeping, "the job's process survived the server");
}

/// The peak resident memory of a process, in KiB (`VmHWM` in /proc/PID/status).
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// issue 21: `read_file_range` read a whole first line into memory (twice) before it looked at
/// the range. A file whose first line is 200 MiB (sparse: it takes no disk) must not make the
/// server's memory grow by that, whichever lines are asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_first_line_is_never_held_in_memory() {
    let ws = workspace();
    {
        use std::io::Write;
        let mut f = std::fs::File::create(ws.path().join("huge.txt")).unwrap();
        f.write_all(&vec![b'a'; 64 * 1024]).unwrap();
        // The rest of the first line: 200 MiB of zeros that are never written to disk.
        f.set_len(200 << 20).unwrap();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(ws.path().join("huge.txt"))
            .unwrap();
        f.write_all(b"\nthe second line\n").unwrap();
    }
    let range = |id: &str, start: u32, end: u32| {
        json!({"id": id, "name": "read_file_range",
               "arguments": {"filepath": "huge.txt", "startLine": start, "endLine": end}})
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = toolpilot::mock::MockUpstream::start(
        serde_json::from_value(json!({"rounds": [
            {"tool_calls": [range("first", 1, 1), range("second", 2, 2), range("both", 1, 2)]},
            {"text": "read"}
        ]}))
        .unwrap(),
        listener,
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut server = toolpilot()
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "m",
            "--upstream",
        ])
        .arg(mock.base_url())
        .arg("--workspace")
        .arg(ws.path())
        .arg("--state-dir")
        .arg(state.path())
        .env("TOOLPILOT_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let base = url_in(&wait_for_line(&mut lines, "listening on").await);
    let pid = server.id().unwrap();
    let before = peak_rss_kib(pid);
    let r = to_reply(
        client()
            .post(format!("{base}/chat/completions"))
            .body(ask("read it").to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = mock.requests();
    let first = tool_result(&reqs[1], "first");
    assert!(first.starts_with("aaaa"), "{}", &first[..100]);
    assert!(
        first.ends_with("bytes. Search it with grep_search instead.]")
            && first.contains("[line 1 is longer than the output budget; showing its first "),
        "{}",
        &first[first.len() - 200..]
    );
    assert_eq!(tool_result(&reqs[1], "second"), "the second line\n");
    assert!(
        tool_result(&reqs[1], "both").contains("[line 1 is longer than the output budget"),
        "a range that starts with the long line shows its head"
    );
    // Reading it whole once would be 200 MiB; the server stays far below that.
    let after = peak_rss_kib(pid);
    assert!(
        after < before + 100 * 1024,
        "the server's peak memory grew from {before} KiB to {after} KiB"
    );
    let _ = server.start_kill();
}

/// An admin token chosen in the environment (here under another variable name): the serve log
/// does not print it, requests need it, and a command does not get it in its environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_from_the_environment_stays_out_of_logs_and_commands() {
    const SECRET: &str = "admin-secret-0123456789abcdef";
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mock = toolpilot::mock::MockUpstream::start(
        serde_json::from_value(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "run_terminal_command", "arguments": {"command":
                "env > env.txt"}}]},
            {"text": "looked"}
        ]}))
        .unwrap(),
        listener,
    )
    .unwrap();
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let mut server = toolpilot()
        .args([
            "serve",
            "--yes",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "m",
            "--upstream",
        ])
        .arg(mock.base_url())
        .arg("--workspace")
        .arg(ws.path())
        .arg("--state-dir")
        .arg(state.path())
        .env("TOOLPILOT_LOG", "info")
        .env("TOOLPILOT_SERVER__ADMIN_TOKEN_ENV", "MY_ADMIN_SECRET")
        .env("MY_ADMIN_SECRET", SECRET)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let listening = wait_for_line(&mut lines, "listening on").await;
    let base = url_in(&listening);
    let console = wait_for_line(&mut lines, "#admin=").await;
    assert!(
        console.contains("/#admin=<the value of $MY_ADMIN_SECRET>"),
        "{console}"
    );
    let r = to_reply(
        client()
            .post(format!("{base}/chat/completions"))
            .body(ask("look around").to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let env = std::fs::read_to_string(ws.path().join("env.txt")).unwrap();
    assert!(env.contains("PATH=") && !env.contains(SECRET), "{env}");
    let runs = |token: Option<&str>| {
        let c = match token {
            Some(t) => admin_client(t),
            None => client(),
        };
        let url = format!("{base}/runs");
        async move { to_reply(c.get(url).send().await.unwrap()).await }
    };
    let refused = runs(None).await;
    assert_eq!(refused.status, 401);
    assert!(
        refused
            .text
            .contains("the token is the value of $MY_ADMIN_SECRET (server.admin_token_env)"),
        "{}",
        refused.text
    );
    assert_eq!(runs(Some(SECRET)).await.status, 200);
    let _ = server.start_kill();
    let _ = server.wait().await;
    let mut log = String::new();
    while let Ok(Some(l)) = lines.next_line().await {
        log.push_str(&l);
    }
    assert!(
        !(listening + &console + &log).contains(SECRET),
        "the log shows the token"
    );
}

/// PIDs of live processes whose command line is exactly `argv` (words joined by spaces).
fn live_pids(argv: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let alive = std::fs::read_to_string(format!("/proc/{p}/stat"))
                .is_ok_and(|s| !s.contains(") Z "));
            alive
                && std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                    String::from_utf8_lossy(&c)
                        .trim_end_matches('\0')
                        .replace('\0', " ")
                        == argv
                })
        })
        .collect()
}

/// `toolpilot serve --yes` against the mock at `upstream`, with `[server]` settings; returns
/// the process, its base URL and its log lines.
async fn serve_for_shutdown(
    upstream: &str,
    server_toml: &str,
    ws: &std::path::Path,
    state: &std::path::Path,
) -> (
    Child,
    String,
    tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
) {
    let cfg = state.join("toolpilot.toml");
    std::fs::write(&cfg, format!("[server]\n{server_toml}\n")).unwrap();
    let mut server = toolpilot()
        .args([
            "serve",
            "--yes",
            "--bind",
            "127.0.0.1:0",
            "--model",
            "mock-model",
            "--upstream",
            upstream,
            "--workspace",
        ])
        .arg(ws)
        .arg("--state-dir")
        .arg(state)
        .arg("--config")
        .arg(&cfg)
        .env("TOOLPILOT_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let base = url_in(&wait_for_line(&mut lines, "listening on").await);
    (server, base, lines)
}

fn sigterm(child: &Child) {
    let ok = std::process::Command::new("kill")
        .arg(child.id().unwrap().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Reads a streamed response until the end, with a generous limit.
async fn read_stream(r: reqwest::Response) -> StreamReply {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let raw = tokio::time::timeout(Duration::from_secs(60), r.text())
        .await
        .expect("the stream did not end")
        .unwrap();
    parse_sse(status, headers, raw)
}

/// SIGTERM while a run streams: no new connection is accepted, and the run, finishing within
/// the grace period, ends normally; then the server exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_a_run_in_flight_finishes_within_the_grace_period() {
    let (_mock, mock_url, _mock_dir) = spawn_mock(json!({"rounds": [
        {"text": "a slow but complete answer", "chunk_size": 4, "hold_after": 2}
    ]}))
    .await;
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let (mut server, base, mut lines) = serve_for_shutdown(
        &mock_url,
        "shutdown_grace_secs = 60",
        ws.path(),
        state.path(),
    )
    .await;
    let mut stream = client()
        .post(format!("{base}/chat/completions"))
        .body(
            json!({"model": "mock-model", "stream": true,
                     "messages": [{"role": "user", "content": "x"}]})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    // The first text has arrived: the run is in flight, held by the mock.
    let first = stream.chunk().await.unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&first).contains("data:"),
        "{first:?}"
    );
    sigterm(&server);
    wait_for_line(&mut lines, "shutting down").await;
    // New connections are refused while the run goes on.
    let refused = eventually_async(|| async {
        tokio::net::TcpStream::connect(base.trim_start_matches("http://").trim_end_matches("/v1"))
            .await
            .is_err()
    })
    .await;
    assert!(
        refused,
        "the server still accepts connections after SIGTERM"
    );
    // The run finishes: the rest of the answer and [DONE].
    let released = client()
        .post(mock_url.replace("/v1", "/_mock/release"))
        .send()
        .await
        .unwrap();
    assert!(released.status().is_success());
    let mut raw = String::from_utf8_lossy(&first).into_owned();
    while let Some(c) = stream.chunk().await.unwrap() {
        raw.push_str(&String::from_utf8_lossy(&c));
    }
    let st = parse_sse(200, Default::default(), raw);
    assert_eq!(st.content(), "a slow but complete answer");
    assert!(st.done_last, "{}", st.raw);
    let status = tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("serve did not exit after its runs finished")
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// SIGTERM while runs wait on commands that outlast the grace period: each run ends with an
/// error (an `error` event and no `[DONE]` when streamed, a 503 otherwise), its command's
/// process tree is killed, the run record says why, and the server exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_grace_period_runs_end_with_an_error_and_their_commands_are_killed() {
    let sleep = |id: &str| {
        json!({"tool_calls": [{"id": id, "name": "run_terminal_command",
                               "arguments": {"command": "sleep 31415"}}]})
    };
    let (_mock, mock_url, _mock_dir) = spawn_mock(json!({"rounds": [
        sleep("s1"), sleep("s2"), {"text": "never"}, {"text": "never"}
    ]}))
    .await;
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let (mut server, base, mut lines) = serve_for_shutdown(
        &mock_url,
        "shutdown_grace_secs = 1",
        ws.path(),
        state.path(),
    )
    .await;
    let streamed = tokio::spawn(
        client()
            .post(format!("{base}/chat/completions"))
            .body(
                json!({"model": "mock-model", "stream": true,
                         "messages": [{"role": "user", "content": "x"}]})
                .to_string(),
            )
            .send(),
    );
    assert!(
        eventually(|| live_pids("sleep 31415").len() == 1).await,
        "the first command did not start"
    );
    let plain = tokio::spawn(
        client()
            .post(format!("{base}/chat/completions"))
            .body(ask("y").to_string())
            .send(),
    );
    assert!(
        eventually(|| live_pids("sleep 31415").len() == 2).await,
        "the second command did not start"
    );
    sigterm(&server);
    wait_for_line(&mut lines, "grace period is over").await;

    let st = read_stream(streamed.await.unwrap().unwrap()).await;
    assert_eq!(st.status, 200);
    let err = st.error_message().expect("an error event");
    assert!(err.contains("the server is shutting down"), "{err}");
    assert!(!st.done, "{}", st.raw);
    let r = to_reply(plain.await.unwrap().unwrap()).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.body["error"]["code"], "server_shutting_down");

    let status = tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("serve did not exit")
        .unwrap();
    assert!(status.success(), "{status:?}");
    assert!(
        eventually(|| live_pids("sleep 31415").is_empty()).await,
        "a command outlived its run: {:?}",
        live_pids("sleep 31415")
    );
    // The run records were written before the exit.
    let mut records = String::new();
    for e in walk(state.path()) {
        if e.ends_with("runs.jsonl") {
            records.push_str(&std::fs::read_to_string(&e).unwrap());
        }
    }
    assert_eq!(
        records
            .lines()
            .filter(|l| l.contains("\"failed\"") && l.contains("shutting down"))
            .count(),
        2,
        "{records}"
    );
}

/// A second signal does not wait for the grace period: the server exits at once and its
/// commands die with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_exits_at_once() {
    let (_mock, mock_url, _mock_dir) = spawn_mock(json!({"rounds": [
        {"tool_calls": [{"id": "s", "name": "run_terminal_command",
                         "arguments": {"command": "sleep 31416"}}]},
        {"text": "never"}
    ]}))
    .await;
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let (mut server, base, mut lines) = serve_for_shutdown(
        &mock_url,
        "shutdown_grace_secs = 600",
        ws.path(),
        state.path(),
    )
    .await;
    let request = tokio::spawn(
        client()
            .post(format!("{base}/chat/completions"))
            .body(ask("x").to_string())
            .send(),
    );
    assert!(eventually(|| live_pids("sleep 31416").len() == 1).await);
    sigterm(&server);
    wait_for_line(&mut lines, "shutting down").await;
    sigterm(&server);
    let status = tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("the second signal did not make serve exit")
        .unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}");
    assert!(
        eventually(|| live_pids("sleep 31416").is_empty()).await,
        "the command outlived the server"
    );
    // The client's connection was closed without an answer.
    assert!(request.await.unwrap().is_err());
}

/// Every file below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// SIGTERM while an MCP client's call runs: the call counts as a run, so it gets the grace
/// period, its client gets the result, and the server exits after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sigterm_an_mcp_call_in_flight_finishes_within_the_grace_period() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    let ws = workspace();
    let state = tempfile::tempdir().unwrap();
    let cfg = state.path().join("toolpilot.toml");
    std::fs::write(&cfg, "[server]\nshutdown_grace_secs = 60\n").unwrap();
    let mut server = toolpilot()
        .args(["serve", "--yes", "--bind", "127.0.0.1:0", "--workspace"])
        .arg(ws.path())
        .arg("--state-dir")
        .arg(state.path())
        .arg("--config")
        .arg(&cfg)
        .env("TOOLPILOT_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(server.stderr.take().unwrap()).lines();
    let base = url_in(&wait_for_line(&mut lines, "listening on").await);
    let mcp = format!("{}/mcp", base.trim_end_matches("/v1"));
    let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
        client(),
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(mcp),
    );
    let session = ().serve(transport).await.unwrap();
    // The command waits for a file the test writes once the shutdown has begun.
    let mut p = CallToolRequestParams::new("run_terminal_command");
    p.arguments = json!({"command":
        "touch started; while [ ! -f release ]; do sleep 0.05; done; echo released"})
    .as_object()
    .cloned();
    let call = tokio::spawn(async move {
        let r = session.call_tool(p).await;
        (session, r)
    });
    let started = eventually_async(|| async { ws.path().join("started").exists() }).await;
    assert!(started, "the command never started");
    sigterm(&server);
    let line = wait_for_line(&mut lines, "shutting down").await;
    // The server counts the call among the runs it waits for.
    assert!(line.contains("runs=1"), "{line}");
    write(&ws.path().join("release"), "");
    let (session, result) = tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("the MCP call did not finish")
        .unwrap();
    let result = result.expect("the MCP call failed at the protocol level");
    let text: String = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect();
    assert_eq!(result.is_error, Some(false), "{text}");
    assert!(text.contains("released"), "{text}");
    drop(session);
    let status = tokio::time::timeout(Duration::from_secs(30), server.wait())
        .await
        .expect("serve did not exit after the MCP call finished")
        .unwrap();
    assert!(status.success(), "{status:?}");
}
