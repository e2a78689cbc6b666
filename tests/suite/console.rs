//! The console in a real browser: headless Chromium driven by Playwright (`playwright-core`,
//! Debian's `/usr/bin/chromium`; `.ci/run` installs both and sets TOOLPILOT_REQUIRE_BROWSER=1).

use serde_json::{Value, json};

use crate::support::*;

/// Node with playwright-core installed under tests/browser, and Chromium, if present.
fn browser_ready() -> bool {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser");
    let chromium =
        std::env::var("TOOLPILOT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let ok = std::path::Path::new(&format!("{dir}/node_modules/playwright-core")).exists()
        && std::path::Path::new(&chromium).exists()
        && std::process::Command::new("node")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok && std::env::var("TOOLPILOT_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
        panic!(
            "the browser test is required (TOOLPILOT_REQUIRE_BROWSER=1) but node, {chromium} or \
             {dir}/node_modules/playwright-core is missing (npm ci --prefix tests/browser)"
        );
    }
    if !ok {
        eprintln!("skipping: no Chromium/Playwright (see .ci/run)");
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_approves_a_waiting_call_and_shows_the_run_finish() {
    if !browser_ready() {
        return;
    }
    let s = TestServer::builder()
        .config(
            "[policy]\nask = [\"create_new_file(notes/**)\"]\n[approvals]\nmode = \"wait\"\ntimeout_secs = 60\n",
        )
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "w1", "name": "create_new_file",
                             "arguments": {"filepath": "notes/todo.md", "contents": "remember the milk\n"}}]},
            {"text": "Noted."}
        ]}))
        .start()
        .await;
    let chat = s.client_clone();
    let run = tokio::spawn(async move { chat.chat(ask("note it down")).await });
    let shot = s.dir.path().join("console.png");
    let out = tokio::process::Command::new("node")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/browser/console.mjs"
        ))
        .arg(s.console_url())
        .arg(&shot)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(v.get("failure").is_none(), "{v:#}");
    assert_eq!(v["errors"], json!([]), "the page logged errors: {v:#}");
    assert_eq!(v["title"], "toolpilot console");
    // Without the admin token the page says where it is, and shows nothing that waits (the
    // API refused it); with it, no such note.
    let without = v["without_token"].as_str().unwrap();
    assert!(without.contains("#admin="), "{without}");
    assert_eq!(v["approvals_without_token"], 0);
    assert_eq!(v["auth_hidden"], true, "{v:#}");
    let approval = v["approval"].as_str().unwrap();
    assert!(approval.contains("create_new_file"), "{approval}");
    assert!(approval.contains("notes/todo.md"), "{approval}");
    assert!(approval.contains("policy.ask[0]"), "{approval}");
    assert_eq!(v["badge"], "1");
    assert!(v["row"].as_str().unwrap().contains("note it down"), "{v:#}");
    let timeline = v["timeline"].as_str().unwrap();
    for want in [
        "approval for create_new_file: waiting",
        "approval for create_new_file: approved",
        "create_new_file: ok",
        "remember the milk",
        "done: stop",
    ] {
        assert!(timeline.contains(want), "missing {want:?} in\n{timeline}");
    }
    assert!(shot.exists());
    // The chat request finished because of the click, and the file is there.
    let reply = run.await.unwrap();
    assert_eq!(reply.body["choices"][0]["message"]["content"], "Noted.");
    assert_eq!(
        std::fs::read_to_string(s.path("notes/todo.md")).unwrap(),
        "remember the milk\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_locked_down_and_same_origin_calls_pass() {
    let s = TestServer::builder()
        .env("TOOLPILOT_BEARER_TOKEN", "sekrit")
        .start()
        .await;
    let page = s.get("/").await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("<title>toolpilot console</title>"));
    let csp = page.headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert_eq!(s.get("/console.js").await.status, 200);
    // The API still needs a token…
    let bare = client().get(s.url("/v1/approvals")).send().await.unwrap();
    assert_eq!(bare.status(), 401);
    let with = |req: reqwest::RequestBuilder| req.header("authorization", "Bearer sekrit");
    // …and a same-origin call (the console's) passes, while another origin is refused.
    let origin = format!("http://{}", s.addr);
    let ok = with(
        s.client
            .post(s.url("/v1/approvals/ap-none"))
            .header("origin", &origin),
    )
    .body("{\"decision\":\"approve\"}")
    .send()
    .await
    .unwrap();
    assert_eq!(ok.status(), 404);
    let other = with(
        s.client
            .post(s.url("/v1/approvals/ap-none"))
            .header("origin", "http://127.0.0.1:1"),
    )
    .body("{\"decision\":\"approve\"}")
    .send()
    .await
    .unwrap();
    assert_eq!(other.status(), 403);
}
