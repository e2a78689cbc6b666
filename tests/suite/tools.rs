//! Every read-only built-in tool, driven the way a user drives it: the scripted model calls
//! the tool, toolpilot runs it on real files in a temporary workspace, and the test reads the
//! tool message the model got back in its next request.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::support::*;

/// The next line the read_file cut note tells the model to read from.
fn next_start_line(note: &str) -> u64 {
    let tail = note
        .split("\"startLine\": ")
        .nth(1)
        .unwrap_or_else(|| panic!("no startLine in {note:?}"));
    tail.split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// read_file

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_returns_the_file_exactly() {
    let text = "fn main() {\n    println!(\"héllo\");\t// tab\r\n}\n\n";
    let s = tool_server(
        "read_file",
        json!({"filepath": "src/main.rs"}),
        &[("src/main.rs", text)],
    )
    .await;
    assert_eq!(run_tool(&s, "read_file").await, text);

    // No trailing newline is kept as it is, too.
    let s = tool_server(
        "read_file",
        json!({"filepath": "a.txt"}),
        &[("a.txt", "x = 1")],
    )
    .await;
    assert_eq!(run_tool(&s, "read_file").await, "x = 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_says_an_empty_file_is_empty() {
    let s = tool_server(
        "read_file",
        json!({"filepath": "empty.txt"}),
        &[("empty.txt", "")],
    )
    .await;
    assert_eq!(
        run_tool(&s, "read_file").await,
        "[\"empty.txt\" is empty: 0 bytes]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_cuts_a_large_file_at_a_line_and_says_where_to_go_on() {
    // 100 lines of 28 bytes: 2,800 bytes against a budget of 1,000.
    let text: String = (1..=100)
        .map(|i| format!("line {i:04}: some filler text\n"))
        .collect();
    let (_s, out) = run_calls(
        TestServer::builder()
            .file("big.txt", &text)
            .config("[tools]\noutput_budget = 1000"),
        &[
            ("read_file", json!({"filepath": "big.txt"})),
            (
                "read_file_range",
                json!({"filepath": "big.txt", "startLine": 40, "endLine": 41}),
            ),
        ],
    )
    .await;
    let got = &out[0];
    assert!(
        got.len() <= 1000,
        "over the budget ({} bytes): {got}",
        got.len()
    );
    let (body, note) = got
        .rsplit_once('\n')
        .unwrap_or_else(|| panic!("no note line: {got}"));
    // Whole lines from the first one, then the note.
    let shown: Vec<&str> = body.lines().collect();
    assert!(shown.len() >= 10, "{got}");
    for (i, l) in shown.iter().enumerate() {
        assert_eq!(*l, format!("line {:04}: some filler text", i + 1), "{got}");
    }
    assert!(
        note.starts_with(&format!(
            "[file cut at the output budget: showing lines 1-{} ",
            shown.len()
        )),
        "{note}"
    );
    assert!(note.contains("of 100 lines, 2,800 bytes"), "{note}");
    assert!(
        note.contains("Read further with read_file_range {\"filepath\": \"big.txt\""),
        "{note}"
    );
    assert_eq!(next_start_line(note), shown.len() as u64 + 1, "{note}");
    assert!(!got.contains("[output cut"), "cut twice: {got}");
    // The line numbers the note uses are the ones read_file_range reads.
    assert_eq!(
        out[1],
        "line 0040: some filler text\nline 0041: some filler text\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_shows_the_head_of_a_single_huge_line() {
    let line = "abcdefghij".repeat(500);
    let (_s, out) = run_calls(
        TestServer::builder()
            .file("min.js", &line)
            .config("[tools]\noutput_budget = 1000"),
        &[("read_file", json!({"filepath": "min.js"}))],
    )
    .await;
    let got = &out[0];
    assert!(
        got.len() <= 1000,
        "over the budget ({} bytes): {got}",
        got.len()
    );
    let (head, note) = got.split_once('\n').unwrap();
    assert!(head.len() >= 100 && line.starts_with(head), "{got}");
    assert_eq!(
        note,
        format!(
            "[file cut at the output budget: its first line alone is longer than {0} bytes \
             (the file has 1 lines, 5,000 bytes); showing the first {0} bytes. Search it with \
             grep_search instead.]",
            head.len()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_describes_binary_files_instead_of_dumping_them() {
    let png: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01";
    let nul: &[u8] = b"abc\0def\n";
    let (_s, out) = run_calls(
        TestServer::builder()
            .file("img.png", png)
            .file("blob.dat", nul),
        &[
            ("read_file", json!({"filepath": "img.png"})),
            ("read_file", json!({"filepath": "blob.dat"})),
            (
                "read_file_range",
                json!({"filepath": "blob.dat", "startLine": 1, "endLine": 3}),
            ),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        "read_file failed: \"img.png\" is a binary file (PNG image, 20 bytes); its contents \
         cannot be shown as text."
    );
    assert_eq!(
        out[1],
        "read_file failed: \"blob.dat\" is a binary file (contains NUL bytes, 8 bytes); its \
         contents cannot be shown as text."
    );
    assert_eq!(
        out[2],
        "read_file_range failed: \"blob.dat\" is a binary file (contains NUL bytes); it has no \
         lines to read."
    );
    assert!(
        out.iter()
            .all(|o| !o.contains("IHDR") && !o.contains("abc"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_replaces_invalid_utf8_and_says_so() {
    let (_s, out) = run_calls(
        TestServer::builder().file("latin1.txt", b"caf\xe9 au lait\nna\xefve\n"),
        &[("read_file", json!({"filepath": "latin1.txt"}))],
    )
    .await;
    assert_eq!(
        out[0],
        "caf\u{FFFD} au lait\nna\u{FFFD}ve\n[\"latin1.txt\" is not valid UTF-8: 2 invalid byte \
         sequence(s) are shown as \u{FFFD}]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_explains_missing_files_and_directories() {
    let (_s, out) = run_calls(
        TestServer::builder().file("src/a.rs", "fn a() {}\n"),
        &[
            ("read_file", json!({"filepath": "src/nope.rs"})),
            ("read_file", json!({"filepath": "src"})),
            ("read_file", json!({"filepath": "."})),
            ("read_file", json!({})),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        "read_file failed: File \"src/nope.rs\" does not exist. Check the path (it is relative \
         to the workspace root) or find the file with file_glob_search or ls."
    );
    assert_eq!(
        out[1],
        "read_file failed: \"src\" is a directory, not a file; use ls to list it"
    );
    assert_eq!(
        out[2],
        "read_file failed: \".\" is a directory, not a file; use ls to list it"
    );
    assert_eq!(
        out[3],
        "read_file was not run because its arguments are invalid: `filepath` is required and \
         must be a non-empty string"
    );
}

// ---------------------------------------------------------------------------------------
// read_file_range

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_range_reads_lines_and_explains_bad_ranges() {
    let text = "one\ntwo\nthree\nfour\nfive\n";
    let range = |s: Value, e: Value| json!({"filepath": "f.txt", "startLine": s, "endLine": e});
    let (_s, out) = run_calls(
        TestServer::builder().file("f.txt", text),
        &[
            ("read_file_range", range(json!(2), json!(4))),
            ("read_file_range", range(json!(4), json!(10))),
            ("read_file_range", range(json!(7), json!(9))),
            ("read_file_range", range(json!(0), json!(2))),
            ("read_file_range", range(json!(3), json!(2))),
            ("read_file_range", range(json!("2"), json!("3"))),
            ("read_file_range", range(json!(1), json!(0))),
            ("read_file_range", range(json!("two"), json!(3))),
            ("read_file_range", range(json!(5), json!(5))),
        ],
    )
    .await;
    assert_eq!(out[0], "two\nthree\nfour\n");
    assert_eq!(out[1], "four\nfive\n[end of file: \"f.txt\" has 5 lines]");
    assert_eq!(
        out[2],
        "read_file_range failed: startLine 7 is past the end of \"f.txt\", which has 5 lines"
    );
    assert_eq!(
        out[3],
        "read_file_range was not run because its arguments are invalid: startLine must be 1 or \
         greater (got 0); lines are numbered from 1"
    );
    assert_eq!(
        out[4],
        "read_file_range was not run because its arguments are invalid: endLine (2) must be \
         greater than or equal to startLine (3)"
    );
    assert_eq!(out[5], "two\nthree\n");
    assert_eq!(
        out[6],
        "read_file_range was not run because its arguments are invalid: endLine must be 1 or \
         greater (got 0); lines are numbered from 1"
    );
    assert_eq!(
        out[7],
        "read_file_range was not run because its arguments are invalid: `startLine` must be a \
         number, got \"two\""
    );
    assert_eq!(out[8], "five\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_range_cut_at_the_budget_names_the_next_line() {
    let text: String = (1..=100)
        .map(|i| format!("line {i:04}: some filler text\n"))
        .collect();
    let (_s, out) = run_calls(
        TestServer::builder()
            .file("big.txt", &text)
            .config("[tools]\noutput_budget = 1000"),
        &[(
            "read_file_range",
            json!({"filepath": "big.txt", "startLine": 10, "endLine": 90}),
        )],
    )
    .await;
    let got = &out[0];
    assert!(
        got.len() <= 1000,
        "over the budget ({} bytes): {got}",
        got.len()
    );
    let (body, note) = got.rsplit_once('\n').unwrap();
    let shown: Vec<&str> = body.lines().collect();
    for (i, l) in shown.iter().enumerate() {
        assert_eq!(*l, format!("line {:04}: some filler text", i + 10), "{got}");
    }
    let last = 9 + shown.len();
    assert_eq!(
        note,
        format!(
            "[range cut at the output budget: showing lines 10-{last} of the 10-90 asked for. \
             Continue with startLine {}.]",
            last + 1
        )
    );
}

// ---------------------------------------------------------------------------------------
// read_currently_open_file

fn open_file_server() -> Builder {
    TestServer::builder()
        .file("src/a.rs", "fn a() {}\n")
        .script(one_call("read_currently_open_file", json!({})))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_currently_open_file_reads_the_file_named_in_the_body() {
    let s = open_file_server().yes().start().await;
    let mut body = ask("what is open?");
    body["toolpilot"] = json!({"current_file": "src/a.rs"});
    let r = s.chat(body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    assert_eq!(
        tool_result(&reqs[1], "call_1"),
        "```src/a.rs\nfn a() {}\n```"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_currently_open_file_reads_the_file_named_in_the_header() {
    let s = open_file_server().yes().start().await;
    let resp = s
        .client
        .post(s.url("/v1/chat/completions"))
        .header("X-Toolpilot-Current-File", "./src/a.rs")
        .body(ask("what is open?").to_string())
        .send()
        .await
        .unwrap();
    let r = to_reply(resp).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    check_conversation_invariants(&reqs);
    assert_eq!(
        tool_result(&reqs[1], "call_1"),
        "```src/a.rs\nfn a() {}\n```"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_currently_open_file_without_a_current_file() {
    let s = open_file_server().yes().start().await;
    let out = run_tool(&s, "read_currently_open_file").await;
    assert!(
        out.starts_with("There are no files currently open: the client did not say which file"),
        "{out}"
    );
    assert!(out.contains("X-Toolpilot-Current-File"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_currently_open_file_needs_approval_without_yes() {
    let s = open_file_server().start().await;
    let mut body = ask("what is open?");
    body["toolpilot"] = json!({"current_file": "src/a.rs"});
    let r = s.chat(body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let out = tool_result(&s.requests()[1], "call_1");
    assert!(
        out.starts_with(
            "read_currently_open_file was not run: it needs the user's approval (default \
             policy of read_currently_open_file (allowedWithPermission) requires approval)"
        ),
        "{out}"
    );
    assert!(out.contains("without --yes"), "{out}");
    assert!(!out.contains("fn a()"), "{out}");
}

// ---------------------------------------------------------------------------------------
// ls

fn ls_workspace() -> Builder {
    TestServer::builder()
        .file("README.md", "# hi\n")
        .file("src/main.rs", "fn main() {}\n")
        .file("src/lib/mod.rs", "\n")
        .file(".hidden", "dot\n")
        .file(".gitignore", "target/\n*.log\n")
        .file("target/out.bin", "x")
        .file("debug.log", "log\n")
        .file(".git/HEAD", "ref: refs/heads/main\n")
        .file(".git/objects/ab/cdef", "x")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_lists_sorted_entries_and_follows_ignore_rules() {
    let (_s, out) = run_calls(
        ls_workspace(),
        &[
            ("ls", json!({})),
            ("ls", json!({"dirPath": ".", "recursive": true})),
            ("ls", json!({"dirPath": "src"})),
            ("ls", json!({"dirPath": "src\\lib", "recursive": "true"})),
            ("ls", json!({"dirPath": "nope"})),
            ("ls", json!({"dirPath": "README.md"})),
        ],
    )
    .await;
    assert_eq!(out[0], ".gitignore\n.hidden\nREADME.md\nsrc/");
    assert_eq!(
        out[1],
        ".gitignore\n.hidden\nREADME.md\nsrc/\nsrc/lib/\nsrc/lib/mod.rs\nsrc/main.rs"
    );
    assert_eq!(out[2], "lib/\nmain.rs");
    assert_eq!(out[3], "mod.rs");
    assert_eq!(
        out[4],
        "ls failed: Directory \"nope\" not found. Paths are relative to the workspace root; list \
         the root with ls to see what exists."
    );
    assert_eq!(
        out[5],
        "ls failed: \"README.md\" is a file, not a directory; read it with read_file."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_says_how_many_entries_it_left_out() {
    let (_s, out) = run_calls(
        ls_workspace().config("[tools]\nls_max_entries = 3"),
        &[
            ("ls", json!({})),
            ("ls", json!({"recursive": true})),
            ("ls", json!({"dirPath": "src"})),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        ".gitignore\n.hidden\nREADME.md\n[1 more entries not shown (the listing is capped at 3). \
         Find specific files with file_glob_search.]"
    );
    assert_eq!(
        out[1],
        ".gitignore\n.hidden\nREADME.md\n[4 more entries not shown (the listing is capped at 3). \
         List a subdirectory, use a non-recursive listing, or find files with file_glob_search.]"
    );
    assert_eq!(out[2], "lib/\nmain.rs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_of_an_empty_directory() {
    let s = TestServer::builder()
        .script(one_call("ls", json!({"dirPath": "empty"})))
        .start()
        .await;
    std::fs::create_dir(s.path("empty")).unwrap();
    assert_eq!(
        run_tool(&s, "ls").await,
        "No files or folders found in empty"
    );
}

// ---------------------------------------------------------------------------------------
// file_glob_search

fn glob_workspace() -> Builder {
    TestServer::builder()
        .file("lib.rs", "")
        .file("src/main.rs", "")
        .file("src/App.RS", "")
        .file("src/deep/util.rs", "")
        .file(".hidden/x.rs", "")
        .file(".secret.rs", "")
        .file(".gitignore", "ignored/\n")
        .file("ignored/gen.rs", "")
        .file(".env", "KEY=1\n")
        .file("config/prod.env", "KEY=2\n")
        .file("keys/deploy/id.rs", "")
        .file("src/deep/Server.PEM", "")
        .file("notes.txt", "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_glob_search_matches_like_ripgrep_iglob() {
    let glob = |p: &str| ("file_glob_search", json!({"pattern": p}));
    let (_s, out) = run_calls(
        glob_workspace(),
        &[
            glob("*.rs"),
            glob("src/*.rs"),
            glob("**/UTIL.RS"),
            glob("*env*"),
            glob("*.zig"),
            glob("a["),
            glob("src/**"),
            glob("*.pem"),
        ],
    )
    .await;
    assert_eq!(out[0], "lib.rs\nsrc/App.RS\nsrc/deep/util.rs\nsrc/main.rs");
    assert_eq!(out[1], "src/App.RS\nsrc/main.rs");
    assert_eq!(out[2], "src/deep/util.rs");
    let none = |p: &str| {
        format!(
            "No files match the glob {p:?}. Matching is case-insensitive; a pattern without / \
             matches file names at any depth (e.g. *.rs), one with / matches from the workspace \
             root (e.g. src/**/*.rs). Ignored, hidden and security-sensitive files are not \
             included."
        )
    };
    // .env is hidden and sensitive, config/prod.env is sensitive: neither is found.
    assert_eq!(out[3], none("*env*"));
    assert_eq!(out[4], none("*.zig"));
    assert!(
        out[5].starts_with(
            "file_glob_search was not run because its arguments are invalid: `pattern` \"a[\" \
             is not a valid glob:"
        ),
        "{}",
        out[5]
    );
    assert_eq!(out[6], "src/App.RS\nsrc/deep/util.rs\nsrc/main.rs");
    // A sensitive file is left out whatever the case of its name; a sensitive folder
    // (keys/deploy/id.rs under out[0]) is not entered.
    assert_eq!(out[7], none("*.pem"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_glob_search_says_how_many_matches_it_left_out() {
    let (_s, out) = run_calls(
        glob_workspace().config("[tools]\nglob_max_results = 2"),
        &[("file_glob_search", json!({"pattern": "*.rs"}))],
    )
    .await;
    assert_eq!(
        out[0],
        "lib.rs\nsrc/App.RS\n[2 more matching files not shown (capped at 2, 4 in all). Use \
         a more specific pattern, for example one limited to a folder.]"
    );
}

// ---------------------------------------------------------------------------------------
// grep_search

const GREP_A: &str = "fn alpha() {
    let x = 1;
    Needle here
    let y = 2;
    let z = 3;
    let w = 4;
    let v = 5;
    let u = 6;
    another needle
}
";

fn grep_workspace() -> Builder {
    TestServer::builder()
        .file("src/a.rs", GREP_A)
        .file("src/b.rs", "// NEEDLE in b\n")
        .file(".gitignore", "gen/\n")
        .file("gen/out.rs", "needle in generated code\n")
        .file(".ignore", "skip.txt\n")
        .file("skip.txt", "needle in .ignore'd file\n")
        .file(".continueignore", "notes.md\n")
        .file("notes.md", "needle in .continueignore'd file\n")
        .file(".hidden/h.rs", "needle in hidden dir\n")
        .file("data.bin", b"needle\0\x01\x02 binary needle\n")
        .file(".env", "NEEDLE_KEY=hunter2\n")
        .file("deploy/prod.env", "needle=SECRET_TOKEN_123\n")
        .file("keys/k.txt", "needle private key\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_search_skips_files_over_the_size_limit() {
    let big = format!("needle at the top\n{}", "padding line\n".repeat(400));
    let (_s, out) = run_calls(
        TestServer::builder()
            .file("small.txt", "needle\n")
            .file("big.log", big)
            .config("[tools]\ngrep_max_file_bytes = 4096"),
        &[("grep_search", json!({"query": "needle"}))],
    )
    .await;
    assert_eq!(out[0], "small.txt\n1:needle\n[1 matching line in 1 file]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_search_numbers_lines_and_skips_what_it_should() {
    let grep = |q: &str| ("grep_search", json!({"query": q}));
    let (s, out) = run_calls(
        grep_workspace(),
        &[
            grep("needle"),
            grep("zzq+x"),
            grep("foo("),
            grep("let [xy] = \\d"),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        "src/a.rs
1-fn alpha() {
2-    let x = 1;
3:    Needle here
4-    let y = 2;
5-    let z = 3;
--
7-    let v = 5;
8-    let u = 6;
9:    another needle
10-}

src/b.rs
1:// NEEDLE in b
[3 matching lines in 2 files]"
    );
    assert_eq!(
        out[1],
        "No matches found for the regular expression \"zzq+x\" (case-insensitive). Ignored, \
         hidden, binary and security-sensitive files are not searched."
    );
    assert!(
        out[2].starts_with(
            "grep_search was not run because its arguments are invalid: the query \"foo(\" is \
             not a valid regular expression:"
        ),
        "{}",
        out[2]
    );
    assert!(
        out[2].ends_with("escape those characters with \\."),
        "{}",
        out[2]
    );
    // Adjacent matches share their context.
    assert_eq!(
        out[3],
        "src/a.rs
1-fn alpha() {
2:    let x = 1;
3-    Needle here
4:    let y = 2;
5-    let z = 3;
6-    let w = 4;
[2 matching lines in 1 file]"
    );
    for o in all_tool_messages(&s) {
        for leak in [
            "hunter2",
            "SECRET_TOKEN",
            "generated",
            "ignore'd",
            "hidden dir",
            "binary needle",
            "private key",
        ] {
            assert!(!o.contains(leak), "{leak:?} leaked: {o}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grep_search_caps_its_results_and_says_so() {
    let (_s, out) = run_calls(
        TestServer::builder()
            .file("m.txt", "hit\nhit\nhit\nhit\nhit\n")
            .file("z.txt", "hit\n")
            .config("[tools]\ngrep_max_results = 3"),
        &[("grep_search", json!({"query": "HIT"}))],
    )
    .await;
    assert_eq!(
        out[0],
        "m.txt\n1:hit\n2:hit\n3:hit\n[showing the first 3 of 6 matching lines in 2 files (capped \
         at 3); refine the query or search for something more specific to see the rest]"
    );
}

// ---------------------------------------------------------------------------------------
// view_diff

/// Runs git in `dir` with a fixed identity and no user or system configuration.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with a committed a.txt and b.txt, then a staged change to a.txt, an unstaged
/// change to b.txt and an untracked new.txt.
fn make_repo_with_changes(ws: &Path) {
    git(ws, &["init", "-q"]);
    git(ws, &["add", "-A"]);
    git(ws, &["commit", "-q", "-m", "init"]);
    std::fs::write(ws.join("a.txt"), "one\nTWO\n").unwrap();
    git(ws, &["add", "a.txt"]);
    std::fs::write(ws.join("b.txt"), "bee\nbuzz\n").unwrap();
    std::fs::write(ws.join("new.txt"), "brand new\n").unwrap();
}

fn check_diff_sections(out: &str) {
    let staged = out
        .find("Staged changes (git diff --cached):\ndiff --git a/a.txt b/a.txt\n")
        .unwrap_or_else(|| panic!("no staged section: {out}"));
    let unstaged = out
        .find("Unstaged changes (git diff):\ndiff --git a/b.txt b/b.txt\n")
        .unwrap_or_else(|| panic!("no unstaged section: {out}"));
    let untracked = out
        .find("Untracked files (new, not in the diff; read them with read_file):\nnew.txt")
        .unwrap_or_else(|| panic!("no untracked section: {out}"));
    assert!(staged < unstaged && unstaged < untracked, "{out}");
    assert!(out.contains("\n-two\n+TWO\n"), "{out}");
    assert!(out.contains("\n bee\n+buzz\n"), "{out}");
    assert!(!out.contains("brand new"), "{out}");
}

fn diff_server() -> Builder {
    TestServer::builder()
        .file("a.txt", "one\ntwo\n")
        .file("b.txt", "bee\n")
        .script(one_call("view_diff", json!({})))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_diff_shows_staged_unstaged_and_untracked_changes() {
    let s = diff_server().start().await;
    make_repo_with_changes(&s.ws);
    let out = run_tool(&s, "view_diff").await;
    check_diff_sections(&out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_diff_of_a_clean_repository_and_of_no_repository() {
    let s = diff_server().start().await;
    assert_eq!(
        run_tool(&s, "view_diff").await,
        "The workspace is not inside a git repository, so there is no diff to show (git said: \
         fatal: not a git repository (or any of the parent directories): .git)."
    );

    let s = diff_server().start().await;
    git(&s.ws, &["init", "-q"]);
    git(&s.ws, &["add", "-A"]);
    git(&s.ws, &["commit", "-q", "-m", "init"]);
    assert_eq!(
        run_tool(&s, "view_diff").await,
        "The current diff is empty: no staged or unstaged changes and no untracked files."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_diff_never_runs_programs_the_repository_configures() {
    let s = diff_server()
        .file(".gitattributes", "* filter=evil diff=evil\n")
        .start()
        .await;
    make_repo_with_changes(&s.ws);
    // Armed only now, so the setup above ran none of it.
    let traps = s.dir.path().join("traps");
    std::fs::create_dir(&traps).unwrap();
    let script = |name: &str, body: &str| -> String {
        let p = traps.join(format!("{name}.sh"));
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\ntouch '{}'\n{body}\n",
                traps.join(format!("marker-{name}")).display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p.display().to_string()
    };
    let ext = script("external", "exit 0");
    let cmd = script("command", "exit 0");
    let textconv = script("textconv", "cat \"$1\"");
    let smudge = script("smudge", "cat");
    let process = script("process", "exit 1");
    let fsmonitor = script("fsmonitor", "exit 0");
    let clean_marker = traps.join("marker-clean");
    let cfg = [
        ("diff.external", ext),
        ("diff.evil.command", cmd),
        ("diff.evil.textconv", textconv),
        (
            "filter.evil.clean",
            format!("touch '{}'", clean_marker.display()),
        ),
        ("filter.evil.smudge", smudge),
        ("filter.evil.process", process),
        ("core.fsmonitor", fsmonitor),
        ("core.pager", script("pager", "cat")),
    ];
    for (k, v) in &cfg {
        git(&s.ws, &["config", k, v]);
    }
    // Make sure git has to look at the worktree file again.
    std::fs::write(s.path("b.txt"), "bee\nbuzz\n").unwrap();

    let markers = || -> Vec<PathBuf> {
        std::fs::read_dir(&traps)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("marker-")
            })
            .collect()
    };
    let out = run_tool(&s, "view_diff").await;
    assert_eq!(
        markers(),
        Vec::<PathBuf>::new(),
        "git ran a configured program"
    );
    check_diff_sections(&out);
    assert!(!out.contains("external diff"), "{out}");

    // The traps are real: a plain git diff in this repository springs them.
    let _ = Command::new("git")
        .current_dir(&s.ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["--no-pager", "diff"])
        .output()
        .unwrap();
    // (git prefers a filter's `process` to its `clean`, and a driver's `command` to
    // `diff.external`, so those are the ones that run.)
    let sprung = markers();
    assert!(sprung.contains(&traps.join("marker-process")), "{sprung:?}");
    assert!(
        sprung.contains(&traps.join("marker-fsmonitor")),
        "{sprung:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_diff_shows_only_the_workspace_part_of_an_enclosing_repository() {
    let s = diff_server().start().await;
    // The repository is the workspace's parent; a file next to the workspace changes too.
    let top = s.dir.path();
    std::fs::write(top.join("outside.txt"), "public\n").unwrap();
    git(top, &["init", "-q"]);
    git(top, &["add", "outside.txt", "ws"]);
    git(top, &["commit", "-q", "-m", "init"]);
    std::fs::write(top.join("outside.txt"), "OUTSIDE-SECRET-31337\n").unwrap();
    std::fs::write(top.join("outside-new.txt"), "x\n").unwrap();
    std::fs::write(s.path("b.txt"), "bee\nbuzz\n").unwrap();
    std::fs::write(s.path("new.txt"), "brand new\n").unwrap();
    let out = run_tool(&s, "view_diff").await;
    assert!(!out.contains("OUTSIDE-SECRET"), "{out}");
    assert!(!out.contains("outside"), "{out}");
    assert!(
        out.starts_with("Unstaged changes (git diff):\ndiff --git a/b.txt b/b.txt\n"),
        "{out}"
    );
    assert!(out.contains("\n+buzz\n"), "{out}");
    assert!(
        out.ends_with("Untracked files (new, not in the diff; read them with read_file):\nnew.txt"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_diff_cut_at_the_budget_keeps_its_own_note() {
    let long: String = (1..=200).map(|i| format!("original line {i}\n")).collect();
    let s = TestServer::builder()
        .file("long.txt", &long)
        .config("[tools]\noutput_budget = 1000")
        .script(one_call("view_diff", json!({})))
        .start()
        .await;
    git(&s.ws, &["init", "-q"]);
    git(&s.ws, &["add", "-A"]);
    git(&s.ws, &["commit", "-q", "-m", "init"]);
    std::fs::write(s.path("long.txt"), long.replace("original", "changed")).unwrap();
    let out = run_tool(&s, "view_diff").await;
    assert!(
        out.len() <= 1000,
        "over the budget ({} bytes): {out}",
        out.len()
    );
    assert!(
        out.starts_with("Unstaged changes (git diff):\ndiff --git a/long.txt b/long.txt\n"),
        "{out}"
    );
    let note = out.lines().last().unwrap();
    assert!(
        note.starts_with("[output cut: showing ")
            && note.ends_with("Look at single files with read_file.]"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------
// view_subdirectory

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_subdirectory_lists_files_with_workspace_paths() {
    let (_s, out) = run_calls(
        TestServer::builder()
            .file("src/a.rs", "")
            .file("src/inner/b.rs", "")
            .file("src/.hidden.rs", "")
            .file("src/.gitignore", "gen.rs\n")
            .file("src/gen.rs", "")
            .file("other.rs", "")
            .yes(),
        &[
            ("view_subdirectory", json!({"directory_path": "src"})),
            ("view_subdirectory", json!({"directory_path": "nope"})),
            ("view_subdirectory", json!({"directory_path": "other.rs"})),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        "Files in src/ (2 in all):\nsrc/a.rs\nsrc/inner/b.rs"
    );
    assert_eq!(
        out[1],
        "view_subdirectory failed: Directory path \"nope\" does not exist or is not accessible \
         (paths are relative to the workspace root)."
    );
    assert_eq!(
        out[2],
        "view_subdirectory failed: Directory path \"other.rs\" does not exist or is not \
         accessible (paths are relative to the workspace root)."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn view_subdirectory_needs_approval_without_yes() {
    let (_s, out) = run_calls(
        TestServer::builder().file("src/a.rs", ""),
        &[("view_subdirectory", json!({"directory_path": "src"}))],
    )
    .await;
    assert!(
        out[0].starts_with("view_subdirectory was not run: it needs the user's approval"),
        "{}",
        out[0]
    );
    assert!(!out[0].contains("src/a.rs"), "{}", out[0]);
}

/// A FIFO where a file was expected is refused at once: opening it used to wait for a writer
/// forever, and reading it had no end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_a_fifo_is_refused_not_waited_on() {
    let s = tool_server("read_file", json!({"filepath": "pipe"}), &[]).await;
    assert!(
        std::process::Command::new("mkfifo")
            .arg(s.path("pipe"))
            .status()
            .unwrap()
            .success()
    );
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        run_tool(&s, "read_file"),
    )
    .await
    .expect("reading a FIFO hung");
    assert_eq!(
        out,
        "read_file failed: \"pipe\" is a named pipe (FIFO), not a regular file; only regular \
         files are read or written, so nothing was done with it"
    );
}
