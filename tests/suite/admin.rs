//! The admin token (issue 21): approvals, runs, jobs and undo answer only requests that carry
//! it, also on loopback, and commands cannot find it.

use serde_json::{Value, json};

use crate::support::*;

const ASK_GEN: &str = "[policy]\nask = [\"read_file(src/gen/**)\"]\n\
                       [approvals]\nmode = \"wait\"\ntimeout_secs = 60\n";

/// Waits until one call is listed (asked with the token), and returns it.
async fn the_pending_call(s: &TestServer) -> Value {
    for _ in 0..200 {
        let data = s.get("/v1/approvals").await.body["data"].clone();
        if let Some(one) = data.get(0) {
            return one.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("no call ever waited for approval");
}

/// A request through a client with the given admin token (none: no header at all).
async fn request(s: &TestServer, token: Option<&str>, method: &str, path: &str) -> Reply {
    let client = match token {
        Some(t) => admin_client(t),
        None => client(),
    };
    let builder = match method {
        "GET" => client.get(s.url(path)),
        _ => client
            .post(s.url(path))
            .body(json!({"decision": "approve", "always": true}).to_string()),
    };
    to_reply(builder.send().await.unwrap()).await
}

/// What a background job of a command could do on today's main: list the waiting calls and
/// approve its own with "always", read every run, cancel, undo, list jobs. Now each of those
/// requests is refused without the token, with a message that says where the token is; the
/// same requests with the token work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_runs_jobs_and_undo_refuse_a_request_without_the_admin_token() {
    let s = TestServer::builder()
        .config(ASK_GEN)
        .file("src/gen/out.rs", "// generated\n")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "src/gen/out.rs"}}]},
            {"text": "done"}
        ]}))
        .start()
        .await;
    let chat = s.client_clone();
    let run = tokio::spawn(async move { chat.chat(ask("read the generated file")).await });
    let pending = the_pending_call(&s).await;
    let id = pending["id"].as_str().unwrap().to_string();
    let run_id = pending["run_id"].as_str().unwrap().to_string();
    let token_file = std::fs::read_dir(s.dir.path().join("state/workspaces"))
        .unwrap()
        .flatten()
        .map(|d| d.path().join("admin-token"))
        .find(|p| p.exists())
        .expect("the admin token file");
    let endpoints = [
        ("GET", "/v1/approvals".to_string()),
        ("POST", format!("/v1/approvals/{id}")),
        ("GET", "/v1/runs".to_string()),
        ("GET", format!("/v1/runs/{run_id}")),
        ("GET", format!("/v1/runs/{run_id}/events")),
        ("GET", format!("/v1/runs/{run_id}/attach")),
        ("POST", format!("/v1/runs/{run_id}/cancel")),
        ("POST", format!("/v1/runs/{run_id}/undo")),
        ("GET", "/v1/jobs".to_string()),
    ];
    for (method, path) in &endpoints {
        let r = request(&s, None, method, path).await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
        assert_eq!(r.body["error"]["type"], "authentication_error");
        assert_eq!(r.body["error"]["code"], "invalid_admin_token");
        let msg = r.body["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with(
                "this endpoint needs toolpilot's admin token in the `x-toolpilot-admin-token` \
                 header (approvals, runs, jobs and undo are for the person using toolpilot, not \
                 for other local programs); the token is new at each start of the server: the \
                 serve log shows it in the console's address (http://…/#admin=TOKEN), and it is \
                 saved in "
            ) && msg.contains(&token_file.display().to_string()),
            "{msg}"
        );
        let r = request(&s, Some("0123456789abcdef-wrong"), method, path).await;
        assert_eq!(r.status, 401, "{method} {path}: {}", r.text);
        assert!(
            r.text
                .contains("the admin token in the `x-toolpilot-admin-token` header is wrong"),
            "{}",
            r.text
        );
    }
    // Nothing was approved, cancelled or saved by those requests: the call still waits.
    let still = s.get("/v1/approvals").await;
    assert_eq!(still.body["data"][0]["id"], id.as_str(), "{}", still.text);
    assert!(!token_file.with_file_name("approved-rules.toml").exists());
    // What needs no token: the API itself, health and the aggregate metrics.
    assert_eq!(request(&s, None, "GET", "/healthz").await.status, 200);
    assert_eq!(request(&s, None, "GET", "/metrics").await.status, 200);
    // With the token, the same requests work.
    let token = s.admin_token.clone();
    assert_eq!(
        std::fs::read_to_string(&token_file).unwrap(),
        format!("{token}\n")
    );
    for (method, path) in &endpoints[2..4] {
        let r = request(&s, Some(&token), method, path).await;
        assert_eq!(r.status, 200, "{method} {path}: {}", r.text);
    }
    let r = request(&s, Some(&token), "POST", &format!("/v1/approvals/{id}")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        run.await.unwrap().body["choices"][0]["message"]["content"],
        "done"
    );
}

/// A command finds the token neither in its environment nor in the workspace; the server keeps
/// it in the workspace's state folder, readable by its owner only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_find_the_admin_token() {
    let s = TestServer::builder()
        .yes()
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "run_terminal_command",
                             "arguments": {"command": "env > env.txt"}}]},
            {"tool_calls": [{"id": "c2", "name": "run_terminal_command",
                             "arguments": {"command": "for f in @TOP@/state/workspaces/*/admin-token; do cat \"$f\"; done > stolen.txt 2> err.txt"}}]},
            {"text": "done"}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("show the environment")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let token = &s.admin_token;
    assert_eq!(token.len(), 64, "256 random bits, in hex");
    // Read from the disk, not through the tool result (which the redactor would clean).
    let env = std::fs::read_to_string(s.path("env.txt")).unwrap();
    assert!(env.contains("PATH="), "{env}");
    assert!(
        !env.contains(token.as_str()),
        "the token is in the command's environment"
    );
    assert!(!env.contains("TOOLPILOT_ADMIN_TOKEN"), "{env}");
    // The state folder is unreadable to commands where the sandbox runs.
    if s.get("/healthz").await.body["sandbox"]["landlock"]["available"] == true {
        let stolen = std::fs::read_to_string(s.path("stolen.txt")).unwrap();
        let err = std::fs::read_to_string(s.path("err.txt")).unwrap();
        assert!(stolen.is_empty(), "a command read the admin token file");
        assert!(err.contains("Permission denied"), "{err}");
    }
    for entry in walk(&s.ws) {
        let bytes = std::fs::read(&entry).unwrap();
        if entry.ends_with("stolen.txt") && bytes.is_empty() {
            continue;
        }
        assert!(
            !String::from_utf8_lossy(&bytes).contains(token.as_str()),
            "the token is in {} inside the workspace",
            entry.display()
        );
    }
    let file = std::fs::read_dir(s.dir.path().join("state/workspaces"))
        .unwrap()
        .flatten()
        .map(|d| d.path().join("admin-token"))
        .find(|p| p.exists())
        .expect("the admin token file");
    assert!(!file.starts_with(&s.ws));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", file.display());
}

/// Every file below `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if e.file_type().unwrap().is_dir() {
            out.extend(walk(&p));
        } else if e.file_type().unwrap().is_file() {
            out.push(p);
        }
    }
    out
}
