//! The command sandbox through the server, as an attacker would try it: killing the
//! supervisor or the server, writing protected paths, reading secrets and the state folder,
//! sending UDP with network off. `--yes` lets every command run: what stops them here is the
//! sandbox, not the policy. Each test says what it skips where the kernel lacks the feature
//! (the status on `/healthz` tells).

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::*;

/// A value that must never reach the model.
const SECRET: &str = "CREDENTIAL-VALUE-9d41e7";

fn cmd(id: &str, c: &str) -> Value {
    json!({"id": id, "name": "run_terminal_command", "arguments": {"command": c}})
}

/// A model that runs each command in a round of its own, then answers.
fn commands(cmds: &[&str]) -> Value {
    let rounds: Vec<Value> = cmds
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"tool_calls": [cmd(&format!("c{i}"), c)]}))
        .chain([json!({"text": "done"})])
        .collect();
    json!({"rounds": rounds})
}

/// Runs the script; returns each command's result in order.
async fn results(s: &TestServer, n: usize) -> Vec<String> {
    let r = s.chat(ask("go")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = s.requests();
    (0..n)
        .map(|i| tool_result(&reqs[i + 1], &format!("c{i}")))
        .collect()
}

async fn status(s: &TestServer) -> Value {
    s.get("/healthz").await.body["sandbox"]["landlock"].clone()
}

/// PIDs of live processes whose command line is exactly `argv` (words joined by spaces).
fn pids_with(argv: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let live = std::fs::read_to_string(format!("/proc/{p}/stat"))
                .is_ok_and(|s| !s.contains(") Z "));
            live && std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                String::from_utf8_lossy(&c)
                    .trim_end_matches('\0')
                    .replace('\0', " ")
                    == argv
            })
        })
        .collect()
}

/// Waits until no process runs any of `argvs`; returns those still running.
async fn all_gone(argvs: &[&str]) -> Vec<String> {
    eventually(|| argvs.iter().all(|a| pids_with(a).is_empty())).await;
    argvs
        .iter()
        .filter(|a| !pids_with(a).is_empty())
        .map(|a| a.to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_kill_its_supervisor_or_toolpilot() {
    let me = std::process::id();
    let s = TestServer::builder()
        .yes()
        .script(commands(&[
            &format!(
                "sleep 3141 & kill -9 $PPID; echo supervisor=$?; kill -9 {me}; echo server=$?"
            ),
            "echo still here",
        ]))
        .start()
        .await;
    if lacks(status(&s).await["signal_scope"] == true, Needs::Landlock(6)) {
        return; // without the signal scope: see the fallback test
    }
    let r = results(&s, 2).await;
    assert!(
        r[0].contains("kill: Operation not permitted") && r[0].contains("supervisor=1"),
        "{}",
        r[0]
    );
    assert!(r[0].contains("server=1"), "{}", r[0]);
    assert!(r[0].contains("cannot signal toolpilot"), "{}", r[0]);
    // The supervisor lived to reap the background child when the command ended.
    assert_eq!(all_gone(&["sleep 3141"]).await, Vec::<String>::new());
    assert!(r[1].contains("still here"), "{}", r[1]);
    assert_eq!(s.get("/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_tries_to_kill_its_supervisor_still_times_out_whole() {
    let s = TestServer::builder()
        .yes()
        .config("[terminal]\ntimeout_secs = 1\n")
        .script(commands(&[
            "kill -9 $PPID; sleep 3142 & setsid sleep 3143 & sleep 3144",
        ]))
        .start()
        .await;
    if lacks(status(&s).await["signal_scope"] == true, Needs::Landlock(6)) {
        return; // without the signal scope: see the fallback test
    }
    let r = results(&s, 1).await;
    assert!(
        r[0].contains("Command was stopped after the 1.00 s time limit"),
        "{}",
        r[0]
    );
    assert_eq!(
        all_gone(&["sleep 3142", "sleep 3143", "sleep 3144"]).await,
        Vec::<String>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_signal_scope_a_killed_supervisor_leaves_nothing_behind() {
    // Landlock ABI 5 has no signal scope: the command can kill its supervisor, and toolpilot
    // has to find what is left (a process in the command's session, and one that left it).
    let s = TestServer::builder()
        .yes()
        .tweak(|c| c.terminal.max_landlock_abi = Some(5))
        .script(commands(&[
            "setsid sleep 3151 & sleep 3152 & kill -9 $PPID; sleep 3153",
            "echo still here",
        ]))
        .start()
        .await;
    if lacks(status(&s).await["available"] == true, Needs::Landlock(1)) {
        return;
    }
    assert_eq!(status(&s).await["signal_scope"], false);
    let r = results(&s, 2).await;
    assert!(
        r[0].contains("Command's supervisor was killed by signal 9")
            && r[0].contains("toolpilot then killed"),
        "{}",
        r[0]
    );
    assert!(
        r[0].contains("can signal the user's processes (Landlock ABI below 6)"),
        "{}",
        r[0]
    );
    assert_eq!(
        all_gone(&["sleep 3151", "sleep 3152", "sleep 3153"]).await,
        Vec::<String>::new()
    );
    assert!(r[1].contains("still here"), "{}", r[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_paths_are_read_only_for_commands() {
    let s = TestServer::builder()
        .yes()
        .config("[terminal]\nreadonly = [\".git\", \"notes/keep.txt\", \"link\"]\n")
        .file(".git/config", "[core]\n")
        .file(".git/hooks/pre-commit.sample", "sample\n")
        .file("notes/keep.txt", "keep\n")
        .file("other.txt", "other\n")
        .script(commands(&[
            // Through a variable, as a command could, so that the policy does not see the
            // protected path and the kernel's layer is what refuses.
            "g=.git; echo x > $g/config",
            "g=.git; touch $g/hooks/pre-commit",
            "g=.git; mv $g/config moved",
            "g=.git; rm -rf $g",
            "echo y > notes/keep.txt; rm notes/keep.txt; mv notes/keep.txt gone.txt",
            "echo ok > other.txt && echo new > notes/new.txt && mkdir -p made/deep && \
             echo z > made/deep/f && cat other.txt notes/new.txt made/deep/f",
        ]))
        .start()
        .await;
    std::os::unix::fs::symlink("notes", s.path("link")).unwrap();
    if lacks(
        status(&s).await["mount_namespace"] == true,
        Needs::Namespace("mount"),
    ) {
        return; // without it, protected paths are only restored (the guard's own tests)
    }
    let r = results(&s, 6).await;
    let refused = |t: &str| t.contains("Read-only file system") || t.contains("busy");
    for (i, out) in r.iter().take(5).enumerate() {
        assert!(refused(out), "command {i} was not refused: {out}");
        assert!(out.contains("protected paths read-only"), "{out}");
    }
    assert!(
        r[0].contains(
            "[Sandbox: not made read-only for this command: link (it is a symbolic link).]"
        ),
        "{}",
        r[0]
    );
    assert_eq!(
        std::fs::read_to_string(s.path(".git/config")).unwrap(),
        "[core]\n"
    );
    assert!(!s.path(".git/hooks/pre-commit").exists());
    // `mv` across mounts falls back to copy and delete: the copy is made, the delete refused.
    assert!(s.path(".git/config").exists() && s.path("notes/keep.txt").exists());
    assert_eq!(
        std::fs::read_to_string(s.path("notes/keep.txt")).unwrap(),
        "keep\n"
    );
    // The rest of the workspace stays writable, next to and inside protected folders' parents.
    assert!(r[5].contains("ok\nnew\nz\n"), "{}", r[5]);
    assert_eq!(
        std::fs::read_to_string(s.path("other.txt")).unwrap(),
        "ok\n"
    );
    assert!(s.path("made/deep/f").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_read_credentials_or_the_state_folder() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let home = dir.path().join("home");
    write(&home.join(".ssh/id_rsa"), &format!("{SECRET}\n"));
    write(&home.join(".aws/credentials"), &format!("{SECRET}\n"));
    write(&home.join("notes.txt"), "readable notes\n");
    let s = TestServer::builder()
        .yes()
        .reuse_dir(Arc::clone(&dir))
        .env("HOME", home.to_str().unwrap())
        .file("README.md", "# project\n")
        .script(commands(&[
            // Through variables, as a command could, so that the policy does not see the
            // secret's name and the sandbox is what refuses.
            "d=@TOP@/home/.ssh; k=id_rsa; cat $d/$k",
            "HOME=@TOP@/home; a=.aws; cat ~/$a/credentials; base64 ~/$a/credentials",
            "cat @TOP@/state/planted.txt; j=json; cat @TOP@/state/*/*/*.$j 2>&1 | head -3",
            "cat @TOP@/home/notes.txt README.md && head -c 4 /usr/bin/env | wc -c && ls -a @TOP@/home",
            "echo made > $TMPDIR/t && cat $TMPDIR/t && echo cached > $XDG_CACHE_HOME/c && cat $XDG_CACHE_HOME/c",
        ]))
        .start()
        .await;
    write(
        &dir.path().join("state/planted.txt"),
        &format!("{SECRET}\n"),
    );
    if lacks(status(&s).await["available"] == true, Needs::Landlock(1)) {
        return;
    }
    let r = results(&s, 5).await;
    for out in &r {
        assert!(!out.contains(SECRET), "a secret reached the model: {out}");
    }
    for out in &r[..3] {
        assert!(out.contains("Permission denied"), "{out}");
    }
    assert!(r[0].contains("secrets unreadable"), "{}", r[0]);
    assert!(
        r[3].contains("readable notes\n# project\n4\n"),
        "the rest of the home folder, the workspace and /usr are readable: {}",
        r[3]
    );
    // Folders on the way to a denied path can be listed.
    assert!(
        r[3].contains(".ssh") && r[3].contains("notes.txt"),
        "{}",
        r[3]
    );
    // The command's own folders inside the state folder are carved back in.
    assert!(r[4].contains("made\ncached\n"), "{}", r[4]);
    let health = s.get("/healthz").await.body;
    let denied = health["sandbox"]["deny_read"].as_array().unwrap().clone();
    assert!(denied.contains(&json!(home.join(".ssh"))), "{denied:?}");
    assert_eq!(denied.last(), Some(&json!(dir.path().join("state"))));
}

/// Runs `bash -c 'echo … > /dev/udp/127.0.0.1/PORT'` with the given network setting; returns
/// the result and whether the datagram arrived.
async fn send_udp(network: bool) -> Option<(String, bool)> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let s = TestServer::builder()
        .yes()
        .config(&format!("[terminal]\nnetwork = {network}\n"))
        .script(commands(&[&format!(
            "bash -c 'echo datagram > /dev/udp/127.0.0.1/{port}'; echo sent=$?"
        )]))
        .start()
        .await;
    if !network
        && lacks(
            status(&s).await["network_namespace"] == true,
            Needs::Namespace("network"),
        )
    {
        return None; // UDP and DNS are not blocked then (documented)
    }
    let r = results(&s, 1).await;
    // The command has ended: a datagram it sent over loopback is already queued.
    socket.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 64];
    let arrived = socket.recv_from(&mut buf).is_ok();
    Some((r.into_iter().next().unwrap(), arrived))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_and_dns_do_not_leave_a_command_without_network() {
    let Some((out, arrived)) = send_udp(false).await else {
        return;
    };
    assert!(!arrived, "the datagram arrived: {out}");
    assert!(out.contains("Network is unreachable"), "{out}");
    assert!(out.contains("network off (no TCP, UDP or DNS)"), "{out}");
    let (out, arrived) = send_udp(true).await.unwrap();
    assert!(
        arrived,
        "with network on, the datagram should arrive: {out}"
    );
    assert!(
        out.contains("sent=0") && out.contains("network allowed"),
        "{out}"
    );
}

fn chown_tree(path: &Path, id: u32) {
    std::os::unix::fs::lchown(path, Some(id), Some(id)).unwrap();
    if path.is_dir() && !path.is_symlink() {
        for e in std::fs::read_dir(path).unwrap().flatten() {
            chown_tree(&e.path(), id);
        }
    }
}

/// The same protections for a server that is not root: the namespaces then need a user
/// namespace. Run as `nobody` (with `setpriv`) when the tests run as root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprivileged_server_gets_the_same_protections_through_a_user_namespace() {
    use tokio::io::AsyncBufReadExt;
    let setpriv = std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    // Starting a server as another user needs root and setpriv (`.ci/run` requires the
    // user namespace only where it has both).
    if lacks(
        rustix::process::geteuid().as_raw() == 0 && setpriv,
        Needs::Namespace("user"),
    ) {
        return;
    }
    const NOBODY: u32 = 65534;
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path();
    write(&top.join("ws/.git/config"), "[core]\n");
    write(&top.join("ws/README.md"), "# project\n");
    write(&top.join("home/.ssh/id_rsa"), &format!("{SECRET}\n"));
    write(&top.join("cfg.toml"), "[terminal]\nreadonly = [\".git\"]\n");
    std::fs::create_dir_all(top.join("state")).unwrap();
    chown_tree(top, NOBODY);
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let mock = extra_mock(commands(&[
        "id -u; g=.git; echo x > $g/config",
        &format!("d={}; k=id_rsa; cat $d/$k", top.join("home/.ssh").display()),
        &format!("bash -c 'echo datagram > /dev/udp/127.0.0.1/{port}'"),
    ]))
    .await;
    let mut server = tokio::process::Command::new("setpriv");
    server
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            env!("CARGO_BIN_EXE_toolpilot"),
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--yes",
            "--model",
            "mock-model",
            "--upstream",
        ])
        .arg(mock.base_url())
        .arg("--workspace")
        .arg(top.join("ws"))
        .arg("--state-dir")
        .arg(top.join("state"))
        .arg("--config")
        .arg(top.join("cfg.toml"))
        .env("HOME", top.join("home"))
        .env("TOOLPILOT_LOG", "info")
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        if k.starts_with("TOOLPILOT_") && k != "TOOLPILOT_LOG" || k == "OPENAI_API_KEY" {
            server.env_remove(k);
        }
    }
    let mut server = server.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let base = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(i) = line.find("listening on http://") {
                let url = &line[i + "listening on ".len()..];
                return url.split_whitespace().next().unwrap().to_string();
            }
        }
        panic!("the server ended before listening");
    })
    .await
    .expect("the server did not start within 30 s");
    let client = client();
    let health = to_reply(
        client
            .get(base.replace("/v1", "/healthz"))
            .send()
            .await
            .unwrap(),
    )
    .await
    .body;
    let st = &health["sandbox"]["landlock"];
    if lacks(
        st["user_namespace"] == true && st["mount_namespace"] == true,
        Needs::Namespace("user"),
    ) {
        return;
    }
    let r = client
        .post(format!("{base}/chat/completions"))
        .body(ask("go").to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let reqs = mock.requests();
    let out: Vec<String> = (0..3)
        .map(|i| tool_result(&reqs[i + 1], &format!("c{i}")))
        .collect();
    assert!(out[0].contains("65534\n"), "{}", out[0]);
    assert!(out[0].contains("Read-only file system"), "{}", out[0]);
    assert_eq!(
        std::fs::read_to_string(top.join("ws/.git/config")).unwrap(),
        "[core]\n"
    );
    assert!(
        out[1].contains("Permission denied") && !out[1].contains(SECRET),
        "{}",
        out[1]
    );
    assert!(out[2].contains("Network is unreachable"), "{}", out[2]);
    socket.set_nonblocking(true).unwrap();
    assert!(socket.recv_from(&mut [0u8; 64]).is_err());
}
