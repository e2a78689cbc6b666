//! Where a stream shows server-side tool activity (`server.progress`): reasoning deltas,
//! visible text, SSE comments or nothing; the model's own answer stays as it wrote it.

use serde_json::{Value, json};

use crate::support::*;

fn script() -> Value {
    json!({"rounds": [
        {"text": "Let me look.", "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"filepath": "a.txt"}}]},
        {"text": "It says hi.", "chunk_size": 3}
    ]})
}

async fn server(progress: &str) -> TestServer {
    TestServer::builder()
        .config(&format!("[server]\nprogress = \"{progress}\"\n"))
        .file("a.txt", "hi\n")
        .script(script())
        .start()
        .await
}

fn reasoning(reply: &StreamReply) -> String {
    reply
        .chunks
        .iter()
        .filter_map(|c| c["choices"].get(0)?["delta"]["reasoning_content"].as_str())
        .collect()
}

fn toolpilot_comments(reply: &StreamReply) -> Vec<&String> {
    reply
        .comments
        .iter()
        .filter(|c| c.contains("toolpilot:"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_channel() {
    let s = server("reasoning").await;
    let r = s.chat_stream(ask("read a.txt")).await;
    assert_eq!(r.content(), "Let me look.\n\nIt says hi.");
    let thought = reasoning(&r);
    assert!(
        thought.starts_with(
            "toolpilot: running read_file {\"filepath\":\"a.txt\"}\ntoolpilot: read_file ok in "
        ),
        "{thought}"
    );
    assert!(toolpilot_comments(&r).is_empty(), "{:?}", r.comments);
    // Never text and reasoning in one delta.
    for c in &r.chunks {
        let d = &c["choices"][0]["delta"];
        assert!(
            !(d["content"].is_string() && d["reasoning_content"].is_string()),
            "{c}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_channel_puts_progress_on_its_own_lines() {
    let s = server("text").await;
    let r = s.chat_stream(ask("read a.txt")).await;
    let text = r.content();
    let mut lines = text.split("\n\n");
    assert_eq!(lines.next(), Some("Let me look."));
    assert_eq!(
        lines.next(),
        Some("> toolpilot: running read_file {\"filepath\":\"a.txt\"}")
    );
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("> toolpilot: read_file ok in ")
    );
    assert_eq!(lines.next(), Some("It says hi."));
    assert_eq!(lines.next(), None);
    assert!(reasoning(&r).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn comments_and_none() {
    let s = server("comments").await;
    let r = s.chat_stream(ask("read a.txt")).await;
    assert_eq!(r.content(), "Let me look.\n\nIt says hi.");
    let comments = toolpilot_comments(&r);
    assert_eq!(comments.len(), 2, "{comments:?}");
    assert!(comments[0].contains("toolpilot: running read_file"));

    let s = server("none").await;
    let r = s.chat_stream(ask("read a.txt")).await;
    assert_eq!(r.content(), "Let me look.\n\nIt says hi.");
    assert!(toolpilot_comments(&r).is_empty());
    assert!(reasoning(&r).is_empty());
    // The tool still ran.
    assert_eq!(tool_result(&s.requests()[1], "c1"), "hi\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_progress_value_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let args = toolpilot::config::CommonArgs {
        workspace: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "[server]\nprogress = \"loud\"\n").unwrap();
    let args = toolpilot::config::CommonArgs {
        config: Some(cfg),
        state_dir: Some(dir.path().join("state")),
        ..args
    };
    let e = toolpilot::config::Config::load_from(&args, &[]).unwrap_err();
    assert!(
        e.to_string()
            .contains("server.progress: \"loud\" is not one of \"reasoning\", \"text\", \"comments\", \"none\""),
        "{e}"
    );
}

/// What the official SDK shows in each channel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_sees_progress_as_reasoning_or_text() {
    let Some(py) = super::python_sdk::python_with_sdk() else {
        return;
    };
    for (mode, want_reasoning, want_text_progress) in [
        ("reasoning", true, false),
        ("text", false, true),
        ("comments", false, false),
        ("none", false, false),
    ] {
        let s = server(mode).await;
        let out = tokio::process::Command::new(&py)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/py/sdk_progress.py"
            ))
            .arg(s.url("/v1"))
            .env("NO_PROXY", "127.0.0.1")
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let content = v["content"].as_str().unwrap();
        let thought = v["reasoning"].as_str().unwrap();
        assert_eq!(
            thought.contains("toolpilot: running read_file"),
            want_reasoning,
            "{mode}: {v}"
        );
        assert_eq!(
            content.contains("> toolpilot: running read_file"),
            want_text_progress,
            "{mode}: {v}"
        );
        assert!(
            content.starts_with("Let me look.") && content.ends_with("It says hi."),
            "{mode}: {v}"
        );
        assert_eq!(v["mixed"], false);
    }
}
