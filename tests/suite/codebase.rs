//! The `codebase` index and `view_repo_map` through the real server: retrieval quality on a
//! small fixture repository in several languages, incremental refresh, embedding re-rank,
//! and the repository map of every supported language.

use std::path::Path;

use serde_json::{Value, json};

use crate::support::*;

/// The fixture repository (`tests/fixtures/retrieval`), with `_gitignore` and `_env` stored
/// under names git does not act on, written as `.gitignore` and `.env`.
fn with_fixture(mut b: Builder) -> Builder {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/retrieval");
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let rel = match rel.as_str() {
                "_gitignore" => ".gitignore".to_string(),
                "_env" => ".env".to_string(),
                _ => rel,
            };
            b = b.file(&rel, std::fs::read(&p).unwrap());
        }
    }
    b
}

/// The path of the first snippet of a codebase result (`path:start-end — reason`).
fn top_file(result: &str) -> String {
    result
        .lines()
        .find(|l| l.contains(" — matched"))
        .and_then(|l| l.split(':').next())
        .unwrap_or_else(|| panic!("no result line in:\n{result}"))
        .to_string()
}

/// Natural-language and identifier queries, and the file that must rank first.
const QUERIES: &[(&str, &str)] = &[
    (
        "where is the configuration file parsed",
        "src/config/loader.rs",
    ),
    ("exponential backoff with jitter", "src/http/retry.rs"),
    ("RetryPolicy", "src/http/retry.rs"),
    ("verify a JWT token signature", "src/auth/token.py"),
    ("compute the tax of an invoice", "src/billing/invoice.py"),
    ("shopping cart total", "web/src/components/ShoppingCart.tsx"),
    ("setAuthHeader", "web/src/api/client.ts"),
    ("debounce calls", "web/src/utils/debounce.js"),
    (
        "evict the least recently used entry",
        "services/cache/lru.go",
    ),
    ("token bucket rate limiter", "services/ratelimit/bucket.go"),
    (
        "send an email over SMTP",
        "java/src/main/java/com/acme/mail/EmailSender.java",
    ),
    (
        "findByCustomerId",
        "java/src/main/java/com/acme/orders/OrderRepository.java",
    ),
    ("bilinear interpolation resize", "native/imgproc/resize.c"),
    ("matrix determinant", "native/matrix/matrix.cpp"),
    ("kubernetes rollout", "scripts/deploy.sh"),
    ("run database schema migrations", "src/db/migrations.py"),
    (
        "persist state in localStorage",
        "web/src/hooks/useLocalStorage.ts",
    ),
    ("log_event", "src/logging/logger.rs"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codebase_ranks_the_expected_file_first() {
    let calls: Vec<(&str, Value)> = QUERIES
        .iter()
        .map(|(q, _)| ("codebase", json!({ "query": q })))
        .collect();
    let (_s, out) = run_calls(
        with_fixture(TestServer::builder()).config("[policy.tools]\ncodebase = \"allow\"\n"),
        &calls,
    )
    .await;
    let mut wrong = Vec::new();
    for ((q, want), got) in QUERIES.iter().zip(&out) {
        if top_file(got) != *want {
            wrong.push(format!("{q:?}: expected {want}, got:\n{got}"));
        }
        // Ignored and sensitive files are never indexed.
        assert!(
            !got.contains("build/generated.rs") && !got.contains(".env"),
            "{got}"
        );
    }
    assert!(
        wrong.is_empty(),
        "{} of {} queries ranked wrong:\n{}",
        wrong.len(),
        QUERIES.len(),
        wrong.join("\n\n")
    );
    // A result names its lines and why it matched, and shows the snippet with line numbers.
    let first = &out[2];
    assert!(
        first.starts_with("2 snippets for \"RetryPolicy\" (best first;"),
        "{first}"
    );
    assert!(
        first.contains(
            "\nsrc/http/retry.rs:5-10 — matched retrypolicy, retry, policy (in symbol \
             RetryPolicy; file name)\n 5| /// How often and how long to wait between attempts.\n"
        ),
        "{first}"
    );
    assert!(
        first.contains("src/http/retry.rs:27-31 — matched retrypolicy, retry, policy (in symbol Default for RetryPolicy; file name)"),
        "{first}"
    );
    assert!(first.contains("| pub struct RetryPolicy {"), "{first}");
    assert!(first.contains("[index: 20 files"), "{first}");
}

/// The `[index: …]` line of a result.
fn index_line(result: &str) -> String {
    result
        .lines()
        .find(|l| l.starts_with("[index:"))
        .unwrap_or_else(|| panic!("no index line in:\n{result}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notifications_each_query_walks_and_reindexes_only_what_changed() {
    let round = |id: &str, q: &str| json!({"tool_calls": [{"id": id, "name": "codebase", "arguments": {"query": q}}]});
    let s = TestServer::builder()
        .file("src/a.rs", "fn alpha_handler() { let x = 1; }\n")
        .file("src/b.py", "def beta_worker():\n    return 2\n")
        .file(
            "src/c.go",
            "package c\n\nfunc GammaJob() int { return 3 }\n",
        )
        .config("[policy.tools]\ncodebase = \"allow\"\n[codebase]\nwatch = false\n")
        .script(json!({"rounds": [
            round("q1", "beta worker"), {"text": "1"},
            round("q2", "zebra"), {"text": "2"},
            round("q3", "beta worker"), {"text": "3"},
            round("q4", "gamma job"), {"text": "4"}
        ]}))
        .start()
        .await;
    let result = |s: &TestServer, id: &str| {
        let reqs = s.requests();
        tool_result(&reqs[reqs.len() - 1], id)
    };
    assert_eq!(s.chat(ask("1")).await.status, 200);
    let r1 = result(&s, "q1");
    assert_eq!(top_file(&r1), "src/b.py");
    assert!(
        index_line(&r1).contains("3 files")
            && index_line(&r1).contains("3 re-indexed, 0 unchanged"),
        "{r1}"
    );

    // Change one file, delete one, add one.
    write(
        &s.path("src/a.rs"),
        "fn alpha_handler() { zebra_crossing(); }\n",
    );
    std::fs::remove_file(s.path("src/b.py")).unwrap();
    write(&s.path("web/d.ts"), "export function delta() {}\n");
    assert_eq!(s.chat(ask("2")).await.status, 200);
    let r2 = result(&s, "q2");
    assert_eq!(top_file(&r2), "src/a.rs", "{r2}");
    assert!(r2.contains("zebra_crossing"), "{r2}");
    let line = index_line(&r2);
    assert!(
        line.contains("3 files")
            && line.contains("2 re-indexed, 1 unchanged, 0 same content, 1 removed"),
        "{line}"
    );
    assert_eq!(s.chat(ask("3")).await.status, 200);
    let r3 = result(&s, "q3");
    assert!(r3.starts_with("No relevant code found"), "{r3}");

    // Rewritten with the same content: read and hashed, not re-indexed.
    let before = std::fs::read(s.path("src/c.go")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(s.path("src/c.go"), &before).unwrap();
    assert_eq!(s.chat(ask("4")).await.status, 200);
    let r4 = result(&s, "q4");
    assert_eq!(top_file(&r4), "src/c.go");
    assert!(
        index_line(&r4).contains("0 re-indexed, 2 unchanged, 1 same content, 0 removed"),
        "{r4}"
    );
    // Every query walked, and says why.
    assert!(
        index_line(&r4).contains("no file notifications: turned off (codebase.watch = false)"),
        "{r4}"
    );
    let h = codebase_health(&s).await;
    assert_eq!(h["notifications"], "off", "{h}");
    assert_eq!(h["walks"], 4, "{h}");
    assert_eq!(h["updates"], 0, "{h}");
}

/// The `codebase` part of `/healthz`.
async fn codebase_health(s: &TestServer) -> Value {
    let r = s.get("/healthz").await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.body["codebase"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_keep_the_index_current_without_a_walk() {
    let round = |id: &str, q: &str| json!({"tool_calls": [{"id": id, "name": "codebase", "arguments": {"query": q}}]});
    let s = TestServer::builder()
        .file("src/a.rs", "fn alpha_handler() { let x = 1; }\n")
        .file("src/b.py", "def beta_worker():\n    return 2\n")
        .file("node_modules/m/z.js", "function zebraInIgnored() {}\n")
        .config("[policy.tools]\ncodebase = \"allow\"\n")
        .script(json!({"rounds": [
            round("q1", "beta worker"), {"text": "1"},
            round("q2", "zebra"), {"text": "2"},
            round("q3", "beta worker"), {"text": "3"},
            round("q4", "delta function"), {"text": "4"},
            round("q5", "alpha handler"), {"text": "5"}
        ]}))
        .start()
        .await;
    let result = |s: &TestServer, id: &str| {
        let reqs = s.requests();
        tool_result(&reqs[reqs.len() - 1], id)
    };
    // The first query builds the index (one walk) and starts watching.
    assert_eq!(s.chat(ask("1")).await.status, 200);
    assert_eq!(top_file(&result(&s, "q1")), "src/b.py");
    let h = codebase_health(&s).await;
    assert_eq!(h["notifications"], "active", "{h}");
    assert_eq!(h["walks"], 1, "{h}");
    // The root, src and node_modules' absence: excluded folders cost no watch.
    assert_eq!(h["folders_watched"], 2, "{h}");

    // A changed file is found by the next query: it applies the changes reported before it
    // (a barrier event makes sure the ones just made are among them), with no walk.
    write(
        &s.path("src/a.rs"),
        "fn alpha_handler() { zebra_crossing(); }\n",
    );
    assert_eq!(s.chat(ask("2")).await.status, 200);
    let r2 = result(&s, "q2");
    assert_eq!(top_file(&r2), "src/a.rs", "{r2}");
    assert!(r2.contains("zebra_crossing"), "{r2}");
    assert!(
        index_line(&r2).contains("kept current from file notifications"),
        "{r2}"
    );

    // A deleted file disappears.
    std::fs::remove_file(s.path("src/b.py")).unwrap();
    assert_eq!(s.chat(ask("3")).await.status, 200);
    let r3 = result(&s, "q3");
    assert!(r3.starts_with("No relevant code found"), "{r3}");
    let h = codebase_health(&s).await;
    assert_eq!(h["updated_files"], 1, "{h}");
    assert_eq!(h["removed_files"], 1, "{h}");

    // A file in a new folder: the folder is watched and walked when it appears.
    write(
        &s.path("web/ui/d.ts"),
        "export function deltaFunction() {}\n",
    );
    assert_eq!(s.chat(ask("4")).await.status, 200);
    assert_eq!(top_file(&result(&s, "q4")), "web/ui/d.ts");
    let h = codebase_health(&s).await;
    assert_eq!(h["updated_files"], 2, "{h}");

    // Nothing changed: the query waits for nothing. And there was never a second walk.
    let before = h["instant_queries"].as_u64().unwrap();
    assert_eq!(s.chat(ask("5")).await.status, 200);
    assert_eq!(top_file(&result(&s, "q5")), "src/a.rs");
    let h = codebase_health(&s).await;
    assert!(h["instant_queries"].as_u64().unwrap() > before, "{h}");
    assert_eq!(h["walks"], 1, "{h}");
    assert_eq!(h["folders_watched"], 4, "{h}");
    assert!(h["updates"].as_u64().unwrap() >= 3, "{h}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_folders_than_watches_falls_back_to_walking() {
    let round = |id: &str, q: &str| json!({"tool_calls": [{"id": id, "name": "codebase", "arguments": {"query": q}}]});
    let s = TestServer::builder()
        .file("a/one.rs", "fn first_item() {}\n")
        .file("b/two.rs", "fn second_item() {}\n")
        .file("c/three.rs", "fn third_item() {}\n")
        .config("[policy.tools]\ncodebase = \"allow\"\n[codebase]\nmax_watches = 2\n")
        .script(json!({"rounds": [
            round("q1", "second item"), {"text": "1"},
            round("q2", "zebra"), {"text": "2"}
        ]}))
        .start()
        .await;
    let result = |s: &TestServer, id: &str| {
        let reqs = s.requests();
        tool_result(&reqs[reqs.len() - 1], id)
    };
    assert_eq!(s.chat(ask("1")).await.status, 200);
    let r1 = result(&s, "q1");
    assert_eq!(top_file(&r1), "b/two.rs", "{r1}");
    let h = codebase_health(&s).await;
    assert_eq!(h["notifications"], "off", "{h}");
    assert!(
        h["reason"]
            .as_str()
            .unwrap()
            .contains("more than 2 folders to watch"),
        "{h}"
    );
    assert_eq!(h["folders_watched"], 0, "{h}");
    // The next query walks and finds the change.
    write(&s.path("c/three.rs"), "fn zebra_item() {}\n");
    assert_eq!(s.chat(ask("2")).await.status, 200);
    let r2 = result(&s, "q2");
    assert_eq!(top_file(&r2), "c/three.rs", "{r2}");
    assert!(index_line(&r2).contains("more than 2 folders"), "{r2}");
    assert_eq!(codebase_health(&s).await["walks"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_rerank_the_bm25_candidates() {
    let files = [
        (
            "apple.rs",
            "// fruit basket fruit basket fruit basket apple\nfn apple() {}\n",
        ),
        ("banana.rs", "// fruit basket banana\nfn banana() {}\n"),
    ];
    let order = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.contains(" — matched"))
            .map(|l| l.split(':').next().unwrap().to_string())
            .collect()
    };
    let mut plain = TestServer::builder().config("[policy.tools]\ncodebase = \"allow\"\n");
    for (p, c) in files {
        plain = plain.file(p, c);
    }
    let (_s, out) = run_calls(plain, &[("codebase", json!({"query": "fruit basket"}))]).await;
    assert_eq!(order(&out[0]), ["apple.rs", "banana.rs"], "{}", out[0]);

    let mut b = TestServer::builder().config(
        "[policy.tools]\ncodebase = \"allow\"\n[codebase]\nembeddings_model = \"embed-test\"\n",
    );
    for (p, c) in files {
        b = b.file(p, c);
    }
    let s = b
        .script(json!({
            "rounds": [
                {"tool_calls": [{"id": "c1", "name": "codebase", "arguments": {"query": "fruit basket"}}]},
                {"text": "done"}],
            "embeddings": [
                {"contains": "apple", "vector": [1.0, 0.0]},
                {"contains": "banana", "vector": [0.0, 1.0]},
                {"contains": "fruit basket", "vector": [0.0, 1.0]}]
        }))
        .start()
        .await;
    let out = send_and_collect(&s, ask("go"), 1).await;
    assert_eq!(order(&out[0]), ["banana.rs", "apple.rs"], "{}", out[0]);
    assert!(
        out[0].contains("Re-ranked with embeddings (embed-test)"),
        "{}",
        out[0]
    );
    let emb = s.mock().embedding_requests();
    assert_eq!(emb.len(), 1, "{emb:?}");
    assert_eq!(emb[0]["model"], "embed-test");
    assert_eq!(emb[0]["input"][0], "fruit basket");
    assert_eq!(emb[0]["input"].as_array().unwrap().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_repo_map_shows_the_symbols_of_every_supported_language() {
    let (_s, out) = run_calls(
        with_fixture(TestServer::builder()).config("[policy.tools]\nview_repo_map = \"allow\"\n"),
        &[("view_repo_map", json!({}))],
    )
    .await;
    let map = &out[0];
    let expect: &[(&str, &[&str])] = &[
        // Rust
        (
            "src/config/loader.rs:",
            &[
                "  pub struct Config",
                "  pub enum ConfigError",
                "  pub fn load_config(path: &Path) -> Result<Config, ConfigError>",
                "  fn parse_duration(s: &str) -> Duration",
            ],
        ),
        (
            "src/http/retry.rs:",
            &[
                "  impl RetryPolicy",
                "    pub fn next_delay(&self, attempt: u32, random: f64) -> Duration",
                "  impl Default for RetryPolicy",
            ],
        ),
        // Python
        (
            "src/auth/token.py:",
            &[
                "  def verify_token(token: str, secret: str) -> dict",
                "  class TokenStore",
                "    def revoke(self, token: str, exp: int)",
            ],
        ),
        // TSX, TypeScript, JavaScript
        (
            "web/src/components/ShoppingCart.tsx:",
            &[
                "  export interface CartItem",
                "  export function useCartTotal(items: CartItem[]): number",
            ],
        ),
        (
            "web/src/api/client.ts:",
            &[
                "  export class ApiClient",
                "    setAuthHeader(token: string): void",
            ],
        ),
        (
            "web/src/utils/debounce.js:",
            &[
                "  export function debounce(fn, wait)",
                "  export const throttle = (fn, interval) =>",
            ],
        ),
        // Go
        (
            "services/cache/lru.go:",
            &[
                "  type LRUCache struct",
                "  func (c *LRUCache) Get(key string) (interface{}, bool)",
            ],
        ),
        // Java
        (
            "java/src/main/java/com/acme/mail/EmailSender.java:",
            &[
                "  public class EmailSender",
                "    public void sendEmail(String from, String to, String subject, String body)",
            ],
        ),
        // C
        (
            "native/imgproc/resize.c:",
            &[
                "  static unsigned char sample(const image_t *img, int x, int y)",
                "  image_t *resize_bilinear(const image_t *src, int new_width, int new_height)",
            ],
        ),
        (
            "native/imgproc/resize.h:",
            &[
                "  typedef struct … image_t",
                "  image_t *resize_bilinear(const image_t *src, int new_width, int new_height);",
            ],
        ),
        // C++
        (
            "native/matrix/matrix.cpp:",
            &[
                "  class Matrix",
                "    Matrix multiply(const Matrix& other) const",
                "    double determinant() const;",
                "  double Matrix::determinant() const",
            ],
        ),
    ];
    for (file, lines) in expect {
        let at = map
            .find(&format!("\n{file}\n"))
            .unwrap_or_else(|| panic!("{file} missing in:\n{map}"));
        let block: String = map[at + 1..]
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .map(|l| format!("{l}\n"))
            .collect();
        for l in *lines {
            assert!(
                block.lines().any(|x| x == *l),
                "{file}: missing {l:?} in:\n{block}"
            );
        }
    }
    // Files without a parser are listed by path; ignored and hidden files are not.
    assert!(map.contains("\nscripts/deploy.sh\n"), "{map}");
    assert!(
        !map.contains("generated.rs") && !map.contains(".env"),
        "{map}"
    );

    // A small budget: signatures while they fit, then paths, then a note on how to narrow.
    let (_s, out) = run_calls(
        with_fixture(TestServer::builder())
            .config("[policy.tools]\nview_repo_map = \"allow\"\n[tools]\noutput_budget = 1500\n"),
        &[("view_repo_map", json!({}))],
    )
    .await;
    assert!(out[0].len() <= 1500, "{}", out[0].len());
    assert!(
        out[0].contains("[map cut to fit the output budget"),
        "{}",
        out[0]
    );
    assert!(out[0].contains("view_subdirectory"), "{}", out[0]);
}
