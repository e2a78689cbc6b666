//! The permission policy through the server: defaults, rules, --yes, disabled tools.

use serde_json::json;

use crate::support::*;

fn files() -> Vec<(&'static str, &'static str)> {
    vec![
        ("src/a.rs", "fn a() {}\n"),
        ("src/gen/out.rs", "// generated\n"),
        ("secret/plan.txt", "the plan\n"),
        ("README.md", "# readme\n"),
    ]
}

async fn server(config: &str, yes: bool, script: serde_json::Value) -> TestServer {
    let mut b = TestServer::builder().config(config).script(script);
    for (p, c) in files() {
        b = b.file(p, c);
    }
    if yes {
        b = b.yes();
    }
    b.start().await
}

fn reads(paths: &[&str]) -> serde_json::Value {
    let calls: Vec<_> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"id": format!("c{i}"), "name": "read_file", "arguments": {"filepath": p}}))
        .collect();
    json!({"rounds": [{"tool_calls": calls}, {"text": "ok"}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_ask_allow_rules_in_order() {
    let s = server(
        "[policy]\ndeny = [\"read_file(secret/**)\"]\nask = [\"read_file(src/gen/**)\"]\n",
        false,
        reads(&["secret/plan.txt", "src/gen/out.rs", "src/a.rs"]),
    )
    .await;
    s.chat(ask("x")).await;
    let reqs = s.requests();
    let denied = tool_result(&reqs[1], "c0");
    assert!(denied.starts_with("read_file was not run: the permission policy refuses this call (denied by policy.deny[0] `read_file(secret/**)`)"), "{denied}");
    assert!(!denied.contains("the plan"));
    let asked = tool_result(&reqs[1], "c1");
    assert!(
        asked.contains(
            "needs the user's approval (policy.ask[0] `read_file(src/gen/**)` requires approval)"
        ),
        "{asked}"
    );
    assert!(asked.contains("without --yes"), "{asked}");
    assert_eq!(tool_result(&reqs[1], "c2"), "fn a() {}\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yes_approves_asks_but_never_denies() {
    let s = server(
        "[policy]\ndeny = [\"read_file(secret/**)\"]\nask = [\"read_file(src/gen/**)\"]\n",
        true,
        reads(&["secret/plan.txt", "src/gen/out.rs"]),
    )
    .await;
    s.chat(ask("x")).await;
    let reqs = s.requests();
    assert!(tool_result(&reqs[1], "c0").contains("refuses this call"));
    assert_eq!(tool_result(&reqs[1], "c1"), "// generated\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_ask_tools_and_allow_rules() {
    // view_subdirectory defaults to ask (as in Continue); an allow rule opens one folder.
    let script = json!({"rounds": [{"tool_calls": [
        {"id": "src", "name": "view_subdirectory", "arguments": {"directory_path": "src"}},
        {"id": "secret", "name": "view_subdirectory", "arguments": {"directory_path": "secret"}}]},
        {"text": "ok"}]});
    let s = server(
        "[policy]\nallow = [\"view_subdirectory(src)\"]\n",
        false,
        script,
    )
    .await;
    s.chat(ask("x")).await;
    let reqs = s.requests();
    let src = tool_result(&reqs[1], "src");
    assert!(
        src.contains("src/a.rs") && src.contains("src/gen/out.rs"),
        "{src}"
    );
    let secret = tool_result(&reqs[1], "secret");
    assert!(
        secret.contains(
            "default policy of view_subdirectory (allowedWithPermission) requires approval"
        ),
        "{secret}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tool_levels_override_the_defaults() {
    let script = json!({"rounds": [{"tool_calls": [
        {"id": "ls", "name": "ls", "arguments": {}},
        {"id": "rd", "name": "read_currently_open_file", "arguments": {}}]},
        {"text": "ok"}]});
    let s = server(
        "[policy.tools]\nls = \"allowedWithPermission\"\nread_currently_open_file = \"allow\"\n",
        false,
        script,
    )
    .await;
    let mut req = ask("x");
    req["toolpilot"] = json!({"current_file": "README.md"});
    s.chat(req).await;
    let reqs = s.requests();
    assert!(
        tool_result(&reqs[1], "ls")
            .contains("policy.tools.ls = allowedWithPermission requires approval")
    );
    assert_eq!(tool_result(&reqs[1], "rd"), "```README.md\n# readme\n```");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_tool_called_anyway_is_refused() {
    let s = server(
        "[policy.tools]\nread_file = \"disabled\"\n",
        true,
        reads(&["README.md"]),
    )
    .await;
    s.chat(ask("x")).await;
    let reqs = s.requests();
    let offered: Vec<String> = reqs[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!offered.contains(&"read_file".to_string()));
    let r = tool_result(&reqs[1], "c0");
    assert!(
        r.contains("There is no tool named \"read_file\" in this conversation"),
        "{r}"
    );
}

/// The configuration keeps rules as text; the engine compiles them and names the key of a bad
/// one (and only blames the saved "always allow" rules when one of those is bad).
#[test]
fn a_bad_rule_stops_start_up_with_its_key_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[policy]\ndeny = [\"read_file(\"]\n").unwrap();
    let args = toolpilot::config::CommonArgs {
        config: Some(path),
        workspace: Some(dir.path().to_path_buf()),
        state_dir: Some(dir.path().join("state")),
        ..Default::default()
    };
    let config = toolpilot::config::Config::load_from(&args, &[]).unwrap();
    let Err(e) = toolpilot::agent::Engine::new(config) else {
        panic!("a bad rule was accepted");
    };
    assert!(
        e.starts_with("policy.deny[0] \"read_file(\": a rule is `tool` or `tool(specifier)`"),
        "{e}"
    );
    assert!(!e.contains("policy.approved rules come from"), "{e}");
}
