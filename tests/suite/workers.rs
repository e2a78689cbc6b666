//! The serving threads (`server.workers`): connections spread over them, and each thread's
//! requests reach the upstream over that thread's own connections.

use serde_json::json;

use crate::support::*;

/// The `toolpilot_connections` gauge of `/metrics`, one number per worker thread.
async fn connections(s: &TestServer) -> Vec<usize> {
    let r = s.get("/metrics").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.text
        .lines()
        .filter(|l| l.starts_with("toolpilot_connections{"))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect()
}

/// The answer to a chat request sent over `c`'s own connection.
async fn answer_over(c: &reqwest::Client, s: &TestServer) -> String {
    let r = to_reply(
        c.post(s.url("/v1/chat/completions"))
            .body(ask("hi").to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn connections_are_spread_evenly_over_the_worker_threads() {
    let s = TestServer::builder()
        .config("[server]\nworkers = 2")
        .start()
        .await;
    // Six clients, one connection each, kept open (idle, as keep-alive clients leave them).
    let mut clients = Vec::new();
    for _ in 0..6 {
        let c = client();
        let r = c.get(s.url("/healthz")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        clients.push(c);
    }
    // The seventh is the harness's own client, asking for the metrics.
    let counts = connections(&s).await;
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert_eq!(counts.iter().sum::<usize>(), 7, "{counts:?}");
    assert!(counts[0].abs_diff(counts[1]) <= 1, "{counts:?}");
    // Closed connections stop counting.
    drop(clients);
    assert!(eventually_async(|| async { connections(&s).await.iter().sum::<usize>() == 1 }).await);
}

#[tokio::test]
async fn each_worker_thread_reaches_the_upstream_over_its_own_connections() {
    let s = TestServer::builder()
        .config("[server]\nworkers = 2")
        .script(json!({"rounds": [
            {"text": "a1"}, {"text": "b1"}, {"text": "a2"}, {"text": "b2"}
        ]}))
        .start()
        .await;
    // Two clients, each with one connection, so each is served by one thread throughout (the
    // second connects while the first is open, so it goes to the other thread).
    let (a, b) = (client(), client());
    for (c, want) in [(&a, "a1"), (&b, "b1"), (&a, "a2"), (&b, "b2")] {
        assert_eq!(answer_over(c, &s).await, want);
    }
    let peers: Vec<String> = s
        .requests()
        .iter()
        .map(|r| r.peer.clone().unwrap())
        .collect();
    // One upstream connection per thread, each reused by that thread's requests (one pool
    // shared by both threads would have reused a single connection for all four).
    assert_eq!(peers[0], peers[2], "{peers:?}");
    assert_eq!(peers[1], peers[3], "{peers:?}");
    assert_ne!(peers[0], peers[1], "{peers:?}");
}

#[tokio::test]
async fn one_worker_thread_serves_everything() {
    let s = TestServer::builder()
        .config("[server]\nworkers = 1")
        .script(json!({"rounds": [{"text": "one"}, {"text": "two"}]}))
        .start()
        .await;
    let (a, b) = (client(), client());
    for (c, want) in [(&a, "one"), (&b, "two")] {
        assert_eq!(answer_over(c, &s).await, want);
    }
    assert_eq!(connections(&s).await, [3]);
    let peers: Vec<_> = s.requests().into_iter().map(|r| r.peer).collect();
    assert_eq!(
        peers[0], peers[1],
        "one thread, one pool: the connection is reused"
    );
}
