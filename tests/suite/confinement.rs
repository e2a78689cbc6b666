//! Tools reach files under the workspace root and nothing else, whatever path spelling the
//! model uses; security-sensitive files are refused. Driven through the real server: the
//! scripted model calls read_file, read_file_range and ls with hostile paths.

use std::os::unix::fs::symlink;

use serde_json::{Value, json};

use crate::support::*;

/// In files outside the workspace; must never reach the model.
const SECRET: &str = "OUTSIDE-SECRET-7f3a9c";
/// In security-sensitive files inside the workspace; must never reach the model either.
const SENSITIVE: &str = "SENSITIVE-VALUE-52e1";

/// A workspace with ordinary files, sensitive files, and a secret file and folder next to it;
/// symlinks inside the workspace point out (`link-out`, `dir-out`) and in (`link-in`).
fn builder() -> Builder {
    TestServer::builder()
        .file("inside.txt", "inside content\n")
        .file("src/a.rs", "fn a() {}\n")
        .file(".env", format!("API_KEY={SENSITIVE}\n"))
        .file("id_rsa", format!("-----BEGIN {SENSITIVE}-----\n"))
        .file("keys/server.txt", format!("{SENSITIVE}\n"))
        .file("deploy/prod.env", format!("TOKEN={SENSITIVE}\n"))
}

/// Creates the files outside the workspace and the symlinks; call right after `start`.
fn plant_outside(s: &TestServer) {
    let top = s.dir.path();
    write(&top.join("secret.txt"), &format!("{SECRET}\n"));
    write(&top.join("outside_dir/secret.txt"), &format!("{SECRET}\n"));
    write(&top.join("outside_dir/plans.txt"), &format!("{SECRET}\n"));
    symlink(top.join("secret.txt"), s.path("link-out")).unwrap();
    symlink(top.join("outside_dir"), s.path("dir-out")).unwrap();
    symlink("inside.txt", s.path("link-in")).unwrap();
    symlink("../inside.txt", s.path("src/link-up")).unwrap();
    symlink("src", s.path("src-link")).unwrap();
    // In-workspace aliases of sensitive files.
    symlink(".env", s.path("env-alias.txt")).unwrap();
    symlink("keys", s.path("not-keys")).unwrap();
}

/// Runs `calls` in one round on a fresh workspace and returns the results; also checks that
/// nothing from outside the workspace, and nothing sensitive, reached the model.
async fn run(calls: &[(&str, Value)]) -> Vec<String> {
    let s = builder().script(calls_script(calls)).start().await;
    plant_outside(&s);
    let out = send_and_collect(&s, ask("go"), calls.len()).await;
    let all = all_tool_messages(&s);
    assert_eq!(all.len(), calls.len());
    for m in &all {
        assert!(
            !m.contains(SECRET),
            "outside content reached the model: {m}"
        );
        assert!(
            !m.contains(SENSITIVE),
            "sensitive content reached the model: {m}"
        );
        assert!(
            !m.contains("root:x:0:0"),
            "/etc/passwd reached the model: {m}"
        );
    }
    out
}

fn read(p: &str) -> (&'static str, Value) {
    ("read_file", json!({"filepath": p}))
}

fn range(p: &str) -> (&'static str, Value) {
    (
        "read_file_range",
        json!({"filepath": p, "startLine": 1, "endLine": 5}),
    )
}

fn ls(p: &str) -> (&'static str, Value) {
    ("ls", json!({"dirPath": p}))
}

#[track_caller]
fn outside(out: &str, tool: &str, raw: &str) {
    let want = format!("{tool} failed: path \"{raw}\" is outside the workspace (");
    assert!(out.starts_with(&want), "expected {want:?}…, got {out:?}");
    assert!(
        out.contains("tools can only reach files under the workspace root"),
        "{out}"
    );
}

#[track_caller]
fn through_symlink(out: &str, tool: &str, raw: &str) {
    let want = format!(
        "{tool} failed: path \"{raw}\" leads outside the workspace through a symbolic link"
    );
    assert!(out.starts_with(&want), "expected {want:?}…, got {out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_refuses_every_way_out_of_the_workspace() {
    let calls = [
        read("../secret.txt"),
        read("src/../../secret.txt"),
        read("/etc/passwd"),
        read("~/x"),
        read("file:///etc/passwd"),
        read("link-out"),
        read("dir-out/secret.txt"),
        read("a\u{0}b"),
        read(&"a/".repeat(2500)),
        read(&"x".repeat(300)),
        read("link-in"),
        read("src/link-up"),
        read("src-link/a.rs"),
        read("./src/./a.rs"),
    ];
    let out = run(&calls).await;
    outside(&out[0], "read_file", "../secret.txt");
    outside(&out[1], "read_file", "src/../../secret.txt");
    outside(&out[2], "read_file", "/etc/passwd");
    outside(&out[3], "read_file", "~/x");
    outside(&out[4], "read_file", "file:///etc/passwd");
    through_symlink(&out[5], "read_file", "link-out");
    through_symlink(&out[6], "read_file", "dir-out/secret.txt");
    assert_eq!(
        out[7],
        "read_file failed: path contains a NUL byte; send the path as plain text"
    );
    assert_eq!(
        out[8],
        "read_file failed: path is too long (5000 bytes; the limit is 4096 bytes)"
    );
    assert_eq!(
        out[9],
        "read_file failed: path is too long (300 bytes; the limit is 255 bytes)"
    );
    // Symlinks that stay inside are followed.
    assert_eq!(out[10], "inside content\n");
    assert_eq!(out[11], "inside content\n");
    assert_eq!(out[12], "fn a() {}\n");
    assert_eq!(out[13], "fn a() {}\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_and_file_uri_paths_work_inside_and_are_refused_outside() {
    // `@WS@` is the workspace and `@TOP@` the folder that holds it (see the harness).
    let calls = [
        read("@WS@/inside.txt"),
        read("file://@WS@/src/a.rs"),
        read("file://@TOP@/secret.txt"),
        read("@TOP@/secret.txt"),
        read("@WS@/../secret.txt"),
        read("@WS@/link-out"),
        read("file://localhost@WS@/inside.txt"),
        read("FILE://@WS@/src/a%2Ers"),
        read("file://otherhost/etc/passwd"),
        ls("@WS@/src"),
        ls("file://@WS@"),
    ];
    let out = run(&calls).await;
    assert_eq!(out[0], "inside content\n");
    assert_eq!(out[1], "fn a() {}\n");
    assert!(
        out[2].starts_with("read_file failed: path \"file://")
            && out[2].contains("is outside the workspace"),
        "{}",
        out[2]
    );
    assert!(out[3].contains("is outside the workspace"), "{}", out[3]);
    assert!(out[4].contains("is outside the workspace"), "{}", out[4]);
    assert!(
        out[5].contains("leads outside the workspace through a symbolic link"),
        "{}",
        out[5]
    );
    assert_eq!(out[6], "inside content\n");
    assert_eq!(out[7], "fn a() {}\n");
    assert!(
        out[8].contains("must name a local absolute path"),
        "{}",
        out[8]
    );
    assert_eq!(out[9], "a.rs\nlink-up");
    assert!(out[10].contains("inside.txt\n"), "{}", out[10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_file_range_and_ls_are_confined_too() {
    let calls = [
        range("../secret.txt"),
        range("link-out"),
        range("dir-out/secret.txt"),
        range("/etc/passwd"),
        range("link-in"),
        ls(".."),
        ls("/etc"),
        ls("dir-out"),
        ls("~"),
        ls("src/../.."),
        ("ls", json!({"recursive": true})),
        ls("a\u{0}b"),
        ls(&"d/".repeat(2500)),
        ls("src-link"),
    ];
    let out = run(&calls).await;
    outside(&out[0], "read_file_range", "../secret.txt");
    through_symlink(&out[1], "read_file_range", "link-out");
    through_symlink(&out[2], "read_file_range", "dir-out/secret.txt");
    outside(&out[3], "read_file_range", "/etc/passwd");
    assert_eq!(
        out[4],
        "inside content\n[end of file: \"link-in\" has 1 lines]"
    );
    outside(&out[5], "ls", "..");
    outside(&out[6], "ls", "/etc");
    through_symlink(&out[7], "ls", "dir-out");
    outside(&out[8], "ls", "~");
    outside(&out[9], "ls", "src/../..");
    // A recursive listing shows symlinks by name but never descends into them.
    let listing = &out[10];
    for name in [
        "dir-out",
        "link-out",
        "link-in",
        "src-link",
        "inside.txt",
        "src/a.rs",
    ] {
        assert!(
            listing.lines().any(|l| l == name),
            "{name} missing: {listing}"
        );
    }
    assert!(!listing.contains("plans.txt"), "{listing}");
    assert!(!listing.contains("dir-out/"), "{listing}");
    assert_eq!(
        out[11],
        "ls failed: path contains a NUL byte; send the path as plain text"
    );
    assert_eq!(
        out[12],
        "ls failed: path is too long (5000 bytes; the limit is 4096 bytes)"
    );
    // An in-workspace symlink to a folder is listed like the folder.
    assert_eq!(out[13], "a.rs\nlink-up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sensitive_files_are_refused_by_the_read_tools() {
    let calls = [
        read(".env"),
        read("id_rsa"),
        read("keys/server.txt"),
        read("deploy/prod.env"),
        range(".env"),
        ("read_currently_open_file", json!({})),
        read("env-alias.txt"),
        read("not-keys/server.txt"),
        range("env-alias.txt"),
    ];
    // read_currently_open_file asks by default: --yes so that only the sensitive-file rule
    // can stop it.
    let s = builder().script(calls_script(&calls)).yes().start().await;
    plant_outside(&s);
    let mut body = ask("go");
    body["toolpilot"] = json!({"current_file": ".env"});
    let out = send_and_collect(&s, body, calls.len()).await;
    let sensitive = |o: &str, tool: &str, shown: &str, pattern: &str| {
        let want = format!(
            "{tool} was not run: the permission policy refuses this call ({shown} is a \
             security-sensitive file (matches `{pattern}` in the sensitive-file list); reading \
             or editing it is not allowed). Do not retry it;"
        );
        assert!(o.starts_with(&want), "expected {want:?}…, got {o:?}");
    };
    sensitive(&out[0], "read_file", ".env", ".env*");
    sensitive(&out[1], "read_file", "id_rsa", "id_rsa");
    sensitive(&out[2], "read_file", "keys/server.txt", "keys/");
    sensitive(&out[3], "read_file", "deploy/prod.env", "*.env");
    sensitive(&out[4], "read_file_range", ".env", ".env*");
    sensitive(&out[5], "read_currently_open_file", ".env", ".env*");
    // An in-workspace symlink is no way around the list.
    for o in &out[6..] {
        assert!(o.contains("security-sensitive"), "{o}");
    }
    for m in all_tool_messages(&s) {
        assert!(
            !m.contains(SENSITIVE),
            "sensitive content reached the model: {m}"
        );
    }
}
