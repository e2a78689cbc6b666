//! The edit tools through the server: the matching ladder, placeholders, diffs, file
//! formats, atomicity, concurrency, protected paths and undo.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use crate::support::*;

/// Edit tools run without approval in these tests (protected paths still ask).
const ALLOW_EDITS: &str = "[policy.tools]\ncreate_new_file = \"allow\"\nedit_existing_file = \"allow\"\nsingle_find_and_replace = \"allow\"\nmulti_edit = \"allow\"\nsearch_and_replace_in_file = \"allow\"\n";

async fn edit_server(files: &[(&str, &[u8])], calls: Vec<Value>) -> TestServer {
    let calls: Vec<Value> = calls
        .into_iter()
        .enumerate()
        .map(|(i, mut c)| {
            c["id"] = json!(format!("e{i}"));
            c
        })
        .collect();
    let mut b = TestServer::builder()
        .config(ALLOW_EDITS)
        .script(json!({"rounds": [{"tool_calls": calls}, {"text": "done"}]}));
    for (p, c) in files {
        b = b.file(p, c);
    }
    b.start().await
}

/// Runs the scripted calls and returns each tool result in order.
async fn results(s: &TestServer, n: usize) -> Vec<String> {
    let r = s.chat(ask("edit")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    (0..n)
        .map(|i| tool_result(&reqs[1], &format!("e{i}")))
        .collect()
}

fn sfr(path: &str, old: &str, new: &str) -> Value {
    json!({"name": "single_find_and_replace", "arguments": {"filepath": path, "old_string": old, "new_string": new}})
}

fn read(s: &TestServer, p: &str) -> String {
    std::fs::read_to_string(s.path(p)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rung_of_the_ladder() {
    let file = "fn main() {\n    let x = 1;   \n        call(a,\n             b);\n    say(\"it’s – fine\");\n}\n\nimpl A {\n        fn f() {\n            one();\n        }\n}\n";
    let s = edit_server(
        &[("a.rs", file.as_bytes())],
        vec![
            sfr("a.rs", "fn main() {", "fn main() -> () {"),
            sfr("a.rs", "    let x = 1;\n", "    let x = 2;\n"),
            sfr("a.rs", "fn f() {\n    one();\n}", "fn f() {\n    two();\n}"),
            sfr("a.rs", "call(a, b);", "call(a, c);"),
            sfr("a.rs", "say(\"it's - fine\");", "say(\"ok\");"),
        ],
    )
    .await;
    let r = results(&s, 5).await;
    assert!(
        r[0].starts_with("Edited a.rs: replaced 1 occurrence at line 1 (matched exactly)."),
        "{}",
        r[0]
    );
    assert!(
        r[1].contains("(matched after ignoring trailing whitespace)"),
        "{}",
        r[1]
    );
    assert!(
        r[2].contains(
            "(matched with different indentation; the replacement was re-indented to the file)"
        ),
        "{}",
        r[2]
    );
    assert!(
        r[3].contains("(matched after ignoring whitespace differences)"),
        "{}",
        r[3]
    );
    assert!(
        r[4].contains("(matched after normalising Unicode punctuation"),
        "{}",
        r[4]
    );
    assert_eq!(
        read(&s, "a.rs"),
        "fn main() -> () {\n    let x = 2;\n        call(a, c);\n    say(\"ok\");\n}\n\nimpl A {\n        fn f() {\n            two();\n        }\n}\n"
    );
    // Each result carries a numbered diff.
    assert!(
        r[0].contains("@@ -1,")
            && r[0].contains("-    1| fn main() {")
            && r[0].contains("+    1| fn main() -> () {"),
        "{}",
        r[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_and_missing_matches_change_nothing() {
    let file = "a = 1\nb = 2\na = 1\n";
    let s = edit_server(
        &[("x.py", file.as_bytes())],
        vec![
            sfr("x.py", "a = 1", "a = 3"),
            sfr("x.py", "c = 9", "c = 0"),
            json!({"name": "single_find_and_replace", "arguments": {"filepath": "x.py", "old_string": "b = 2", "new_string": "b = 2"}}),
            json!({"name": "single_find_and_replace", "arguments": {"filepath": "x.py", "old_string": "a = 1", "new_string": "a = 5", "replace_all": true}}),
        ],
    )
    .await;
    let r = results(&s, 4).await;
    assert!(
        r[0].contains("appears 2 times in the file (matched exactly, at lines 1, 3)"),
        "{}",
        r[0]
    );
    assert!(r[0].contains("replace_all"), "{}", r[0]);
    assert!(
        r[1].contains("old_string was not found in the file"),
        "{}",
        r[1]
    );
    assert!(
        r[1].contains("closest part of the file is lines"),
        "{}",
        r[1]
    );
    assert!(
        r[2].contains("old_string and new_string must be different"),
        "{}",
        r[2]
    );
    assert!(
        r[3].starts_with("Edited x.py: replaced 2 occurrences at lines 1, 3"),
        "{}",
        r[3]
    );
    assert_eq!(read(&s, "x.py"), "a = 5\nb = 2\na = 5\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_edit_is_sequential_and_all_or_nothing() {
    let file = "one\ntwo\nthree\n";
    let me = |edits: Value| json!({"name": "multi_edit", "arguments": {"filepath": "f.txt", "edits": edits}});
    let s = edit_server(
        &[("f.txt", file.as_bytes())],
        vec![
            me(json!([{"old_string": "one", "new_string": "1"}, {"old_string": "nope", "new_string": "x"}])),
            me(json!([])),
            me(json!("not an array")),
            me(json!([{"old_string": "one", "new_string": "1"}, {"old_string": "", "new_string": "x"}])),
            me(json!([{"old_string": "one", "new_string": "1"}, {"old_string": "1\ntwo", "new_string": "1\n2"}])),
        ],
    )
    .await;
    let r = results(&s, 5).await;
    assert!(
        r[0].contains("edit at index 1: old_string was not found"),
        "{}",
        r[0]
    );
    assert!(r[0].contains("No edit was applied"), "{}", r[0]);
    assert!(
        r[1].contains("edits array must contain at least one edit"),
        "{}",
        r[1]
    );
    assert!(r[2].contains("edits array is required"), "{}", r[2]);
    assert!(
        r[3].contains("Edit at index 1: old_string cannot be empty"),
        "{}",
        r[3]
    );
    assert!(
        r[4].starts_with("Edited f.txt: applied 2 edits"),
        "{}",
        r[4]
    );
    assert_eq!(read(&s, "f.txt"), "1\n2\nthree\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_and_replace_blocks() {
    let file = "def a():\n    return 1\n\ndef b():\n    return 2\n";
    let sr = |diffs: Value| json!({"name": "search_and_replace_in_file", "arguments": {"filepath": "m.py", "diffs": diffs}});
    let s = edit_server(
        &[("m.py", file.as_bytes())],
        vec![
            sr(json!(["------- SEARCH\n    return 1\n=======\n    return 10\n+++++++ REPLACE\n------- SEARCH\nnot there\n=======\nx\n+++++++ REPLACE"])),
            sr(json!(["=======\n"])),
            sr(json!([
                "------- SEARCH\n    return 1\n=======\n    return 10\n+++++++ REPLACE",
                "------- SEARCH\ndef b():\n    return 2\n=======\ndef b():\n    return 20\n+++++++ REPLACE"
            ])),
        ],
    )
    .await;
    let r = results(&s, 3).await;
    assert!(
        r[0].contains("block 2: old_string was not found") && r[0].contains("No block was applied"),
        "{}",
        r[0]
    );
    assert!(
        r[1].contains("comes before any `------- SEARCH` marker"),
        "{}",
        r[1]
    );
    assert!(
        r[2].starts_with("Edited m.py: applied 2 blocks"),
        "{}",
        r[2]
    );
    assert_eq!(
        read(&s, "m.py"),
        "def a():\n    return 10\n\ndef b():\n    return 20\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_markers_are_exact_and_unfinished_blocks_are_skipped() {
    let file = "a = 1\nb = 2\n";
    let sr = |diff: &str| json!({"name": "search_and_replace_in_file", "arguments": {"filepath": "v.py", "diffs": [diff]}});
    let s = edit_server(
        &[("v.py", file.as_bytes())],
        vec![
            sr("-------SEARCH\na = 1\n=======\na = 9\n+++++++ REPLACE"),
            sr("------- SEARCH\na = 1\n======= \na = 9\n+++++++ REPLACE"),
            sr("------- SEARCH\na = 1\n------- SEARCH\nb = 2\n=======\nb = 3\n+++++++ REPLACE"),
        ],
    )
    .await;
    let r = results(&s, 3).await;
    assert!(
        r[0].contains(
            "diffs[0] line 1: `-------SEARCH` is not a block marker; expected `------- SEARCH`"
        ) && r[0].contains("the file is unchanged"),
        "{}",
        r[0]
    );
    assert!(
        r[1].contains("diffs[0] line 3: `======= ` is not a block marker; expected `=======`"),
        "{}",
        r[1]
    );
    assert!(
        r[2].starts_with("Edited v.py: applied 1 block (1 unfinished block was skipped)")
            && r[2].contains(
                "- diffs[0] lines 1-2: a block without its `+++++++ REPLACE` marker was skipped"
            ),
        "{}",
        r[2]
    );
    assert_eq!(read(&s, "v.py"), "a = 1\nb = 3\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_new_file_makes_folders_and_never_overwrites() {
    let cnf = |p: &str, c: &str| json!({"name": "create_new_file", "arguments": {"filepath": p, "contents": c}});
    let s = edit_server(
        &[("exists.txt", b"keep me\n")],
        vec![
            cnf("src/deep/new.rs", "pub fn x() {}\n"),
            cnf("exists.txt", "overwrite?\n"),
            cnf("../outside.txt", "no"),
        ],
    )
    .await;
    let r = results(&s, 3).await;
    assert!(
        r[0].starts_with(
            "Created src/deep/new.rs (1 line, 14 bytes), with the new folders src, src/deep."
        ),
        "{}",
        r[0]
    );
    assert!(r[0].contains("+    1| pub fn x() {}"), "{}", r[0]);
    assert_eq!(read(&s, "src/deep/new.rs"), "pub fn x() {}\n");
    assert!(
        r[1].contains("File exists.txt already exists") && r[1].contains("edit_existing_file"),
        "{}",
        r[1]
    );
    assert_eq!(read(&s, "exists.txt"), "keep me\n");
    assert!(r[2].contains("outside the workspace"), "{}", r[2]);
    assert!(!s.dir.path().join("outside.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formats_are_kept_crlf_bom_final_newline_permissions() {
    let s = edit_server(
        &[
            ("win.txt", b"\xEF\xBB\xBFfirst\r\nsecond\r\nthird\r\n"),
            ("nonl.txt", b"alpha\nbeta"),
            ("run.sh", b"#!/bin/sh\necho hi\n"),
        ],
        vec![
            sfr("win.txt", "second\nthird", "2nd\nthird\nfourth"),
            sfr("nonl.txt", "beta", "gamma"),
            sfr("run.sh", "echo hi", "echo bye"),
        ],
    )
    .await;
    std::fs::set_permissions(s.path("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
    let r = results(&s, 3).await;
    assert!(
        r[0].contains("(kept CRLF line endings and the byte-order mark)"),
        "{}",
        r[0]
    );
    assert_eq!(
        std::fs::read(s.path("win.txt")).unwrap(),
        b"\xEF\xBB\xBFfirst\r\n2nd\r\nthird\r\nfourth\r\n"
    );
    assert_eq!(std::fs::read(s.path("nonl.txt")).unwrap(), b"alpha\ngamma");
    assert_eq!(read(&s, "run.sh"), "#!/bin/sh\necho bye\n");
    let mode = std::fs::metadata(s.path("run.sh"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o750);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_and_invalid_utf8_files_are_refused_untouched() {
    let png = b"\x89PNG\r\n\x1a\n\0\0\0IHDR";
    let bad = b"caf\xe9 au lait\n";
    let s = edit_server(
        &[("i.png", png), ("l1.txt", bad)],
        vec![sfr("i.png", "IHDR", "X"), sfr("l1.txt", "lait", "milk")],
    )
    .await;
    let r = results(&s, 2).await;
    assert!(r[0].contains("binary file (PNG image)"), "{}", r[0]);
    assert!(r[1].contains("not valid UTF-8"), "{}", r[1]);
    assert_eq!(std::fs::read(s.path("i.png")).unwrap(), png);
    assert_eq!(std::fs::read(s.path("l1.txt")).unwrap(), bad);
}

fn eef(path: &str, changes: &str) -> Value {
    json!({"name": "edit_existing_file", "arguments": {"filepath": path, "changes": changes}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_existing_file_expands_placeholders_in_several_languages() {
    let rs = "use std::io;\n\nfn a() {\n    println!(\"a\");\n}\n\nfn b() {\n    println!(\"b\");\n}\n\nfn c() {\n    println!(\"c\");\n}\n";
    let py = "import os\n\n\nclass Greeter:\n    def __init__(self):\n        self.n = 0\n\n    def hello(self):\n        return \"hello\"\n";
    let html = "<html>\n<body>\n  <h1>Title</h1>\n  <p>Old text</p>\n  <footer>f</footer>\n</body>\n</html>\n";
    let s = edit_server(
        &[("a.rs", rs.as_bytes()), ("g.py", py.as_bytes()), ("p.html", html.as_bytes())],
        vec![
            eef("a.rs", "// ... existing code ...\n\nfn b() {\n    println!(\"B!\");\n}\n\n// ... existing code ...\n"),
            eef("g.py", "# ... existing code ...\n\n    def hello(self):\n        return \"hi\"\n\n    def bye(self):\n        return \"bye\"\n"),
            eef("p.html", "<!-- ... existing code ... -->\n  <h1>Title</h1>\n  <p>New text</p>\n  <footer>f</footer>\n<!-- ... existing code ... -->\n"),
        ],
    )
    .await;
    let r = results(&s, 3).await;
    for (i, x) in r.iter().enumerate() {
        assert!(x.starts_with("Edited "), "{i}: {x}");
    }
    // Rust and Python are placed by their syntax tree, HTML line by line.
    assert!(
        r[0].contains("placed `changes` by the Rust syntax tree"),
        "{}",
        r[0]
    );
    assert!(
        r[0].contains("line 1 of `changes` kept lines 1–5: use std::io;, a"),
        "{}",
        r[0]
    );
    assert!(
        r[1].contains("placed `changes` by the Python syntax tree"),
        "{}",
        r[1]
    );
    assert!(r[1].contains("in `Greeter`: added `bye`"), "{}", r[1]);
    assert!(r[2].contains("expanded the placeholders"), "{}", r[2]);
    assert!(
        r[2].contains("- line 1 of `changes` kept lines 1–2\n")
            && r[2].contains("- line 5 of `changes` kept lines 6–7\n"),
        "{}",
        r[2]
    );
    assert_eq!(
        read(&s, "a.rs"),
        rs.replace("println!(\"b\")", "println!(\"B!\")")
    );
    assert_eq!(
        read(&s, "g.py"),
        "import os\n\n\nclass Greeter:\n    def __init__(self):\n        self.n = 0\n\n    def hello(self):\n        return \"hi\"\n\n    def bye(self):\n        return \"bye\"\n"
    );
    assert_eq!(read(&s, "p.html"), html.replace("Old text", "New text"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_existing_file_diffs_rewrites_and_refusals() {
    let long: String = (1..=40).map(|i| format!("line {i}\n")).collect();
    let s = edit_server(
        &[("d.txt", b"a\nb\nc\n"), ("w.txt", b"old\n"), ("long.txt", long.as_bytes()), ("u.rs", b"fn x() {\n    1\n}\n")],
        vec![
            eef("d.txt", "--- a/d.txt\n+++ b/d.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n"),
            eef("w.txt", "brand new content\n"),
            eef("long.txt", "line 1\nline 2\n"),
            eef("u.rs", "// ... existing code ...\nfn nowhere_in_the_file() {\n    2\n}\n// ... existing code ...\n"),
            eef("missing.txt", "x"),
        ],
    )
    .await;
    let r = results(&s, 5).await;
    assert!(r[0].contains("applied the unified diff"), "{}", r[0]);
    assert_eq!(read(&s, "d.txt"), "a\nB\nc\n");
    assert!(r[1].contains("replaced the whole file"), "{}", r[1]);
    assert_eq!(read(&s, "w.txt"), "brand new content\n");
    assert!(
        r[2].contains("not written") && r[2].contains("would replace the whole file"),
        "{}",
        r[2]
    );
    assert_eq!(read(&s, "long.txt"), long);
    assert!(
        r[3].contains("could not be placed") && r[3].contains("Nothing was written"),
        "{}",
        r[3]
    );
    assert_eq!(read(&s, "u.rs"), "fn x() {\n    1\n}\n");
    assert!(
        r[4].contains("does not exist") && r[4].contains("create_new_file"),
        "{}",
        r[4]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_applies_what_cannot_be_placed_and_its_output_is_verified() {
    let file = "fn x() {\n    1\n}\n\nfn y() {\n    2\n}\n";
    let changes =
        "// ... existing code ...\nfn brand_new() {\n    3\n}\n// ... existing code ...\n";
    let s = TestServer::builder()
        .config(ALLOW_EDITS)
        .config("[tools]\nllm_apply = true\n")
        .file("z.rs", file)
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "e0", "name": "edit_existing_file", "arguments": {"filepath": "z.rs", "changes": changes}}]},
            // The apply round: the model returns the whole file.
            {"text": "```rust\nfn x() {\n    1\n}\n\nfn brand_new() {\n    3\n}\n\nfn y() {\n    2\n}\n```"},
            {"tool_calls": [{"id": "e1", "name": "edit_existing_file", "arguments": {"filepath": "z.rs", "changes": "// ... existing code ...\nfn other_new() {}\n// ... existing code ...\n"}}]},
            // A bad apply: it drops the change.
            {"text": "```\nfn x() {}\n```"},
            {"text": "done"}
        ]}))
        .start()
        .await;
    let r = s.chat(ask("add a function")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    assert_eq!(reqs.len(), 5);
    // The apply round is a plain request without tools.
    assert!(reqs[1].body.get("tools").is_none());
    assert!(
        reqs[1].body["messages"][1]["content"]
            .as_str()
            .unwrap()
            .contains("fn brand_new()")
    );
    let ok = tool_result(&reqs[2], "e0");
    assert!(
        ok.contains("the model applied the changes and the result was verified"),
        "{ok}"
    );
    let bad = tool_result(&reqs[4], "e1");
    assert!(
        bad.contains("the apply model's result was rejected"),
        "{bad}"
    );
    assert_eq!(
        read(&s, "z.rs"),
        "fn x() {\n    1\n}\n\nfn brand_new() {\n    3\n}\n\nfn y() {\n    2\n}\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_paths_need_approval() {
    let s = edit_server(
        &[(".git/config", b"[core]\n"), ("src/ok.txt", b"ok\n")],
        vec![
            sfr(".git/config", "[core]", "[core]\n\thooksPath = /tmp/evil"),
            json!({"name": "create_new_file", "arguments": {"filepath": ".github/workflows/ci.yml", "contents": "on: push\n"}}),
            json!({"name": "create_new_file", "arguments": {"filepath": ".vscode/tasks.json", "contents": "{}"}}),
            sfr("src/ok.txt", "ok", "fine"),
        ],
    )
    .await;
    let r = results(&s, 4).await;
    assert!(
        r[0].contains(
            "writing .git/config needs a person's approval: it matches the protected path `**/.git/**`"
        ),
        "{}",
        r[0]
    );
    assert!(
        r[1].contains("protected path `**/.github/workflows/**`"),
        "{}",
        r[1]
    );
    assert!(r[2].contains("protected path `**/.vscode/**`"), "{}", r[2]);
    assert!(r[3].starts_with("Edited src/ok.txt"), "{}", r[3]);
    assert_eq!(read(&s, ".git/config"), "[core]\n");
    assert!(!s.path(".github").exists() && !s.path(".vscode").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_edits_of_one_file_are_serialised() {
    let s = TestServer::builder()
        .config(ALLOW_EDITS)
        .config("[agent]\nmax_rounds = 1\n")
        .file("count.txt", "counter\n")
        .script(json!({"repeat_last": true, "rounds": [
            {"tool_calls": [{"name": "single_find_and_replace", "arguments": {"filepath": "count.txt", "old_string": "counter", "new_string": "counter+"}}]}
        ]}))
        .start()
        .await;
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let client = s.client.clone();
        let url = s.url("/v1/chat/completions");
        tasks.push(tokio::spawn(async move {
            client
                .post(url)
                .body(ask("bump").to_string())
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    // Six read-modify-write cycles, none lost.
    assert_eq!(read(&s, "count.txt"), "counter++++++\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_based_on_a_stale_read_fails_cleanly() {
    // Request 1 reads the file, then (held) edits it; request 2 changes the file in between.
    let s = TestServer::builder()
        .config(ALLOW_EDITS)
        .file("s.txt", "version one\n")
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "r", "name": "read_file", "arguments": {"filepath": "s.txt"}}]},
            {"tool_calls": [{"id": "late", "name": "single_find_and_replace", "arguments": {"filepath": "s.txt", "old_string": "version", "new_string": "edition"}}], "hold_after": 1},
            {"tool_calls": [{"id": "other", "name": "single_find_and_replace", "arguments": {"filepath": "s.txt", "old_string": "one", "new_string": "two"}}]},
            {"text": "other done"},
            {"text": "first done"}
        ]}))
        .start()
        .await;
    let client = s.client.clone();
    let url = s.url("/v1/chat/completions");
    let first = tokio::spawn(async move {
        client
            .post(url)
            .body(ask("first").to_string())
            .send()
            .await
            .unwrap()
            .status()
    });
    assert!(eventually(|| s.requests().len() == 2).await);
    let r = s.chat(ask("second")).await;
    assert_eq!(r.status, 200);
    assert_eq!(read(&s, "s.txt"), "version two\n");
    s.mock().release();
    assert_eq!(first.await.unwrap().as_u16(), 200);
    let reqs = s.requests();
    let late = tool_result(&reqs[4], "late");
    assert!(
        late.contains("s.txt changed since this conversation last read or wrote it"),
        "{late}"
    );
    assert_eq!(read(&s, "s.txt"), "version two\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_restores_what_a_run_changed() {
    let s = edit_server(
        &[("keep.txt", b"original\n"), ("tool.sh", b"#!/bin/sh\n")],
        vec![
            sfr("keep.txt", "original", "changed"),
            sfr("tool.sh", "#!/bin/sh", "#!/bin/bash"),
            json!({"name": "create_new_file", "arguments": {"filepath": "new/dir/made.txt", "contents": "fresh\n"}}),
        ],
    )
    .await;
    std::fs::set_permissions(s.path("tool.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = s.chat(ask("change stuff")).await;
    let run_id = r.headers["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(read(&s, "keep.txt"), "changed\n");
    assert_eq!(read(&s, "new/dir/made.txt"), "fresh\n");

    // Someone edits a file after the run: undo refuses, and changes nothing.
    std::fs::write(s.path("keep.txt"), "changed\nby hand\n").unwrap();
    let r = s.post_raw(&format!("/v1/runs/{run_id}/undo"), "").await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(
        r.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("keep.txt (edited since)"),
        "{}",
        r.text
    );
    assert_eq!(read(&s, "new/dir/made.txt"), "fresh\n");
    // Forced, it restores everything exactly.
    let r = s
        .post_raw(&format!("/v1/runs/{run_id}/undo"), "{\"force\": true}")
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["removed"], json!(["new/dir/made.txt"]));
    assert_eq!(r.body["dirs_removed"], json!(["new/dir", "new"]));
    assert_eq!(read(&s, "keep.txt"), "original\n");
    assert_eq!(read(&s, "tool.sh"), "#!/bin/sh\n");
    assert_eq!(
        std::fs::metadata(s.path("tool.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755
    );
    assert!(!s.path("new").exists());
    let r = s.post_raw(&format!("/v1/runs/{run_id}/undo"), "").await;
    assert_eq!(r.status, 409);
    assert!(r.text.contains("already undone"));
    let r = s.post_raw("/v1/runs/nope/undo", "").await;
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_undo_from_the_command_line() {
    let s = edit_server(&[("a.txt", b"A\n")], vec![sfr("a.txt", "A", "B")]).await;
    let r = s.chat(ask("make it B")).await;
    let run_id = r.headers["x-toolpilot-run-id"]
        .to_str()
        .unwrap()
        .to_string();
    let bin = env!("CARGO_BIN_EXE_toolpilot");
    let state = s.dir.path().join("state");
    let out = std::process::Command::new(bin)
        .args(["runs", "--workspace"])
        .arg(&s.ws)
        .arg("--state-dir")
        .arg(&state)
        .env_remove("TOOLPILOT_CONFIG")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&run_id) && text.contains("make it B"),
        "{text}"
    );
    let out = std::process::Command::new(bin)
        .args(["undo", &run_id, "--workspace"])
        .arg(&s.ws)
        .arg("--state-dir")
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("restored a.txt"));
    assert_eq!(read(&s, "a.txt"), "A\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_edit_tools_run_here_when_allowed_and_go_to_the_client_when_they_need_approval() {
    let script = json!({"rounds": [
        {"tool_calls": [{"id": "e0", "name": "single_find_and_replace", "arguments": {"filepath": "a.txt", "old_string": "A", "new_string": "B"}}]},
        {"text": "done"}
    ]});
    let tools = json!([{"type": "function", "function": {"name": "single_find_and_replace", "parameters": {"type": "object"}}}]);
    // Allowed: toolpilot edits the file itself.
    let s = TestServer::builder()
        .config(ALLOW_EDITS)
        .file("a.txt", "A\n")
        .script(script.clone())
        .start()
        .await;
    let mut req = ask("edit");
    req["tools"] = tools.clone();
    let r = s.chat(req.clone()).await;
    assert_eq!(r.body["choices"][0]["finish_reason"], "stop", "{}", r.text);
    assert_eq!(read(&s, "a.txt"), "B\n");
    // Default policy (ask) and no --yes: the IDE that declared the tool gets the call.
    let s = TestServer::builder()
        .file("a.txt", "A\n")
        .script(script)
        .start()
        .await;
    let r = s.chat(req).await;
    assert_eq!(
        r.body["choices"][0]["finish_reason"], "tool_calls",
        "{}",
        r.text
    );
    assert_eq!(r.body["choices"][0]["message"]["tool_calls"][0]["id"], "e0");
    assert_eq!(read(&s, "a.txt"), "A\n");
}
