//! fetch_url_content and search_web through the real server: the scripted model calls the
//! tool, toolpilot fetches from a local HTTP server (or refuses to), and the test reads the
//! tool message the model got back. Every address in here is on the loopback interface; the
//! SSRF tests prove that nothing was sent by checking the local server's request log.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::support::*;

/// One request a local site received.
#[derive(Debug, Clone)]
struct Hit {
    method: String,
    /// Path and query.
    uri: String,
    headers: HeaderMap,
    body: String,
}

/// A local HTTP server with a request log.
struct Site {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Site {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
    fn port(&self) -> u16 {
        self.addr.port()
    }
    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

/// Serves `router` on `ip`, logging every request (method, URI, headers, body).
async fn site(ip: &str, router: Router) -> Site {
    let listener = TcpListener::bind(format!("{ip}:0")).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits: Arc<Mutex<Vec<Hit>>> = Arc::default();
    let log = Arc::clone(&hits);
    let app = router.layer(axum::middleware::from_fn(
        move |req: Request, next: axum::middleware::Next| {
            let log = Arc::clone(&log);
            async move {
                let (parts, body) = req.into_parts();
                let bytes = axum::body::to_bytes(body, 1 << 20)
                    .await
                    .unwrap_or_default();
                log.lock().unwrap().push(Hit {
                    method: parts.method.to_string(),
                    uri: parts.uri.to_string(),
                    headers: parts.headers.clone(),
                    body: String::from_utf8_lossy(&bytes).into_owned(),
                });
                next.run(Request::from_parts(parts, Body::from(bytes)))
                    .await
            }
        },
    ));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Site { addr, hits }
}

fn typed(content_type: &'static str, body: impl Into<Body>) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body.into()).into_response()
}

fn html(body: &'static str) -> Response {
    typed("text/html; charset=utf-8", body)
}

fn redirect(status: StatusCode, to: String) -> Response {
    (status, [(header::LOCATION, to)]).into_response()
}

/// Config for fetch tests: fetch_url_content allowed by the policy, loopback opened.
fn open_loopback(extra: &str) -> String {
    format!("[policy]\nallow = [\"fetch_url_content\"]\n[web]\nallow = [\"127.0.0.1\"]\n{extra}")
}

/// Runs the given fetch calls (ids c1..cn) on a server with `config`; returns the tool
/// messages.
async fn fetch_all(config: &str, urls: &[Value]) -> Vec<String> {
    let calls: Vec<(&str, Value)> = urls
        .iter()
        .map(|u| {
            let args = if u.is_string() {
                json!({"url": u})
            } else {
                u.clone()
            };
            ("fetch_url_content", args)
        })
        .collect();
    let (_s, out) = run_calls(TestServer::builder().config(config), &calls).await;
    out
}

async fn fetch_one(config: &str, url: &str) -> String {
    fetch_all(config, &[json!(url)]).await.remove(0)
}

fn docs_site() -> Router {
    Router::new()
        .route(
            "/docs/scheduler/",
            get(|| async { html(include_str!("../fixtures/web/docs_page.html")) }),
        )
        .route(
            "/blog/builds",
            get(|| async { html(include_str!("../fixtures/web/blog_article.html")) }),
        )
        .route(
            "/reference/options.html",
            get(|| async { html(include_str!("../fixtures/web/reference_tables.html")) }),
        )
}

// ---------------------------------------------------------------------------------------
// HTML to Markdown on real-world-shaped pages

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_docs_page_becomes_its_article_in_markdown() {
    let s = site("127.0.0.1", docs_site()).await;
    let out = fetch_one(&open_loopback(""), &s.url("/docs/scheduler/")).await;
    assert!(out.starts_with("# Configuring the scheduler"), "{out}");
    assert!(out.contains("## Intervals and jitter"), "{out}");
    assert!(out.contains("`tidewater.toml`"), "{out}");
    assert!(
        out.contains("```toml\n[scheduler]\ninterval = \"5m\""),
        "{out}"
    );
    assert!(out.contains("**jitter**"), "{out}");
    assert!(out.contains("1. The first retry waits"), "{out}");
    // Links kept, made absolute against the page URL.
    assert!(
        out.contains(&format!(
            "[how queues pick workers]({})",
            s.url("/docs/workers/#queues")
        )),
        "{out}"
    );
    // No chrome, no scripts, no styles.
    for gone in [
        "TRACKING-DO-NOT-SHOW",
        "WIDGET-DO-NOT-SHOW",
        "font-family",
        "Search the docs",
        "Community",
        "Licensed under Apache-2.0",
        "Frequently asked questions",
    ] {
        assert!(!out.contains(gone), "{gone:?} in {out}");
    }
    assert_eq!(s.hits().len(), 1);
    let ua = s.hits()[0].headers[header::USER_AGENT]
        .to_str()
        .unwrap()
        .to_string();
    assert!(ua.contains("toolpilot"), "{ua}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blog_article_keeps_its_text_and_links_and_drops_the_rest() {
    let s = site("127.0.0.1", docs_site()).await;
    let out = fetch_one(&open_loopback(""), &s.url("/blog/builds")).await;
    assert!(out.starts_with("# Why our builds got 40% faster"), "{out}");
    assert!(out.contains("## Measure first"), "{out}");
    assert!(
        out.contains("> If you cannot say where the time goes, every change is a guess."),
        "{out}"
    );
    assert!(
        out.contains(&format!("]({})", s.url("/2025/11/schema-pipeline/"))),
        "{out}"
    );
    assert!(
        out.contains("(https://git.example/lantern/build-notes)"),
        "{out}"
    );
    for gone in [
        "We use cookies",
        "Accept all",
        "SHOULD-NOT-APPEAR",
        "Did you try a faster linker",
        "What a year of on-call",
        "Powered by",
        "Subscribe",
    ] {
        assert!(!out.contains(gone), "{gone:?} in {out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_and_code_blocks_survive_the_conversion() {
    let s = site("127.0.0.1", docs_site()).await;
    let out = fetch_one(&open_loopback(""), &s.url("/reference/options.html")).await;
    assert!(
        out.contains("| Option | Type | Default | Description |"),
        "{out}"
    );
    assert!(
        out.contains("| `cache_size` | bytes | 64 MiB | Memory used for cached blocks. |"),
        "{out}"
    );
    assert!(
        out.contains("```rust\nuse kvstore::{Options, Store};"),
        "{out}"
    );
    assert!(
        out.contains("fn main() -> Result<(), kvstore::Error> {"),
        "entities decoded inside code: {out}"
    );
    assert!(out.contains(".cache_size(256 << 20)"), "{out}");
    assert!(out.contains("```sh\n$ kvstore-cli stats data/"), "{out}");
    assert!(
        out.contains(&format!("]({})", s.url("/tuning.html"))),
        "{out}"
    );
    assert!(!out.contains("On this page"), "{out}");
    assert!(!out.contains("static site generator"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_and_json_come_back_as_they_are() {
    let json_body = "{\n  \"name\": \"serde\",\n  \"versions\": [\"1.0.0\", \"1.0.1\"]\n}\n";
    let text_body = "Plain *text* <b>not html</b>\n  indented line\n";
    let s = site(
        "127.0.0.1",
        Router::new()
            .route(
                "/a.json",
                get(move || async move { typed("application/json", json_body) }),
            )
            .route(
                "/a.txt",
                get(move || async move { typed("text/plain; charset=utf-8", text_body) }),
            )
            .route(
                "/latin1.txt",
                get(|| async { typed("text/plain; charset=iso-8859-1", &b"caf\xe9"[..]) }),
            ),
    )
    .await;
    let out = fetch_all(
        &open_loopback(""),
        &[
            json!(s.url("/a.json")),
            json!(s.url("/a.txt")),
            json!(s.url("/latin1.txt")),
        ],
    )
    .await;
    assert_eq!(out[0], json_body.trim_end());
    assert_eq!(out[1], text_body.trim_end());
    assert_eq!(out[2], "café");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pdfs_images_and_binary_data_are_refused_with_what_they_are() {
    let s = site(
        "127.0.0.1",
        Router::new()
            .route(
                "/paper.pdf",
                get(|| async { typed("application/pdf", &b"%PDF-1.7\n..."[..]) }),
            )
            .route(
                "/logo.png",
                get(|| async { typed("image/png", &b"\x89PNG\r\n"[..]) }),
            )
            .route(
                "/download",
                get(|| async {
                    ([(header::CONTENT_TYPE, "")], &b"%PDF-1.4 untyped"[..]).into_response()
                }),
            )
            .route(
                "/blob",
                get(|| async { typed("text/plain", &b"abc\0\x01\x02def"[..]) }),
            ),
    )
    .await;
    let out = fetch_all(
        &open_loopback(""),
        &[
            json!(s.url("/paper.pdf")),
            json!(s.url("/logo.png")),
            json!(s.url("/download")),
            json!(s.url("/blob")),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        format!(
            "fetch_url_content failed: {} is a PDF document, which fetch_url_content cannot read: \
             only HTML, plain text, Markdown, JSON and XML pages are supported. Look for an HTML \
             or text version of the content",
            s.url("/paper.pdf")
        )
    );
    assert!(
        out[1].contains("is an image (image/png), which fetch_url_content cannot read"),
        "{}",
        out[1]
    );
    assert!(out[2].contains("is a PDF document"), "sniffed: {}", out[2]);
    assert!(
        out[3].contains("binary data (although it says text/plain)"),
        "{}",
        out[3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_errors_say_the_status_and_what_to_do() {
    let s = site(
        "127.0.0.1",
        Router::new()
            .route("/gone", get(|| async { StatusCode::NOT_FOUND }))
            .route("/private", get(|| async { StatusCode::FORBIDDEN }))
            .route("/broken", get(|| async { StatusCode::BAD_GATEWAY })),
    )
    .await;
    let out = fetch_all(
        &open_loopback(""),
        &[
            json!(s.url("/gone")),
            json!(s.url("/private")),
            json!(s.url("/broken")),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        format!(
            "fetch_url_content failed: HTTP 404 Not Found from {}. The page does not exist (any \
             more): check the URL, or find the right one with search_web",
            s.url("/gone")
        )
    );
    assert!(
        out[1].contains("HTTP 403 Forbidden") && out[1].contains("refuses access"),
        "{}",
        out[1]
    );
    assert!(
        out[2].contains("HTTP 502 Bad Gateway") && out[2].contains("server failed"),
        "{}",
        out[2]
    );
}

// ---------------------------------------------------------------------------------------
// Output budget: long pages in parts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_page_is_read_in_parts_and_fetched_once() {
    // 30 paragraphs of exactly 100 characters (98 + blank line).
    let body: String = (1..=30)
        .map(|i| format!("Paragraph {i:03} {}\n\n", "x".repeat(84)))
        .collect();
    let body: &'static str = Box::leak(body.into_boxed_str());
    let s = site(
        "127.0.0.1",
        Router::new().route(
            "/long.txt",
            get(move || async move { typed("text/plain", body) }),
        ),
    )
    .await;
    let url = s.url("/long.txt");
    let server = TestServer::builder()
        .config(&open_loopback("page_chars = 1000"))
        .script(json!({"rounds": [
            {"tool_calls": [{"id": "c1", "name": "fetch_url_content", "arguments": {"url": url}}]},
            {"tool_calls": [{"id": "c2", "name": "fetch_url_content", "arguments": {"url": url, "offset": 1000}}]},
            {"tool_calls": [{"id": "c3", "name": "fetch_url_content", "arguments": {"url": url, "offset": 2900}}]},
            {"tool_calls": [{"id": "c4", "name": "fetch_url_content", "arguments": {"url": url, "offset": 99999}}]},
            {"text": "done"}
        ]}))
        .start()
        .await;
    let r = server.chat(ask("read it")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let reqs = server.requests();
    check_conversation_invariants(&reqs);
    let first = tool_result(&reqs[1], "c1");
    assert!(first.starts_with("Paragraph 001 "), "{first}");
    assert!(first.contains("Paragraph 010 "), "{first}");
    assert!(!first.contains("Paragraph 011"), "{first}");
    assert!(
        first.ends_with(&format!(
            "[fetch_url_content: this is characters 0–1000 of 3000 of the page (text/plain of \
             2.9 KiB). To read on, call fetch_url_content with {{\"url\": \"{url}\", \"offset\": \
             1000}}.]"
        )),
        "{first}"
    );
    let second = tool_result(&reqs[2], "c2");
    assert!(second.starts_with("Paragraph 011 "), "{second}");
    assert!(second.contains("\"offset\": 2000}"), "{second}");
    let last = tool_result(&reqs[3], "c3");
    assert!(last.starts_with("Paragraph 030 "), "{last}");
    assert!(last.ends_with("This is the end of the page.]"), "{last}");
    let past = tool_result(&reqs[4], "c4");
    assert!(
        past.contains("`offset` 99999 is past the end of the page, which has 3000 characters"),
        "{past}"
    );
    // One download served all four calls.
    assert_eq!(s.hits().len(), 1, "{:?}", s.hits());
}

// ---------------------------------------------------------------------------------------
// Size and time limits

fn zeros_gzip(n: usize) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let block = vec![b'a'; 1 << 16];
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len());
        enc.write_all(&block[..k]).unwrap();
        left -= k;
    }
    enc.finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downloads_are_capped_while_they_stream_even_when_compressed() {
    let big = "y".repeat(300_000);
    let big: &'static str = Box::leak(big.into_boxed_str());
    // 64 MiB of text that arrives as ~64 KiB of gzip.
    let bomb = zeros_gzip(64 << 20);
    let bomb_len = bomb.len();
    let bomb: &'static [u8] = Box::leak(bomb.into_boxed_slice());
    let s = site(
        "127.0.0.1",
        Router::new()
            .route(
                "/announced",
                get(move || async move { typed("text/plain", big) }),
            )
            .route(
                "/chunked",
                get(move || async move {
                    let chunks = futures_util::stream::iter(
                        big.as_bytes()
                            .chunks(10_000)
                            .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::from_static(c)))
                            .collect::<Vec<_>>(),
                    );
                    typed("text/plain", Body::from_stream(chunks))
                }),
            )
            .route(
                "/bomb",
                get(move || async move {
                    (
                        [
                            (header::CONTENT_TYPE, "text/plain"),
                            (header::CONTENT_ENCODING, "gzip"),
                        ],
                        bomb,
                    )
                        .into_response()
                }),
            )
            .route(
                "/small.gz",
                get(|| async {
                    let small: &'static [u8] = Box::leak(zeros_gzip(2000).into_boxed_slice());
                    (
                        [
                            (header::CONTENT_TYPE, "text/plain"),
                            (header::CONTENT_ENCODING, "gzip"),
                        ],
                        small,
                    )
                        .into_response()
                }),
            ),
    )
    .await;
    assert!(
        bomb_len < 200_000,
        "the bomb is small on the wire: {bomb_len}"
    );
    let started = Instant::now();
    let out = fetch_all(
        &open_loopback("max_download_bytes = 100000"),
        &[
            json!(s.url("/announced")),
            json!(s.url("/chunked")),
            json!(s.url("/bomb")),
            json!(s.url("/small.gz")),
        ],
    )
    .await;
    assert!(
        out[0].starts_with(&format!(
            "fetch_url_content failed: the response from {} is larger than 97 KiB \
             (web.max_download_bytes) (it announces 292 KiB); it was not read.",
            s.url("/announced")
        )),
        "{}",
        out[0]
    );
    assert!(
        out[1].contains("is larger than 97 KiB (web.max_download_bytes); it was not read"),
        "{}",
        out[1]
    );
    assert!(
        out[2].contains("is larger than 97 KiB (web.max_download_bytes)")
            && out[2].contains("Compressed responses count after decompression"),
        "{}",
        out[2]
    );
    // A small compressed page is decompressed and read.
    assert_eq!(out[3], "a".repeat(2000));
    // Stopping at the limit takes no time: 64 MiB were never inflated.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The client asked for compression.
    let ae = s.hits()[0].headers[header::ACCEPT_ENCODING]
        .to_str()
        .unwrap()
        .to_string();
    assert!(ae.contains("gzip"), "{ae}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_or_trickling_server_times_out() {
    let s = site(
        "127.0.0.1",
        Router::new()
            .route(
                "/silent",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    "late"
                }),
            )
            .route(
                "/trickle",
                get(|| async {
                    let stream = futures_util::stream::unfold(0u32, |n| async move {
                        if n > 0 {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        (n < 100).then(|| (Ok::<_, std::io::Error>(bytes::Bytes::from("x")), n + 1))
                    });
                    typed("text/plain", Body::from_stream(stream))
                }),
            ),
    )
    .await;
    let started = Instant::now();
    let out = fetch_all(
        &open_loopback("timeout_secs = 0.3"),
        &[json!(s.url("/silent")), json!(s.url("/trickle"))],
    )
    .await;
    assert_eq!(
        out[0],
        format!(
            "fetch_url_content failed: timed out after 300 ms (web.timeout_secs) before the \
             server answered for {}. The site is too slow or not answering; try again later or \
             use another source",
            s.url("/silent")
        )
    );
    assert!(
        out[1].starts_with("fetch_url_content failed: timed out after 300 ms (web.timeout_secs) while downloading the page (after "),
        "{}",
        out[1]
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

// ---------------------------------------------------------------------------------------
// SSRF: every spelling of a private address, without the allowlist

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_loopback_and_metadata_is_refused() {
    let s = site(
        "127.0.0.1",
        Router::new().fallback(any(|| async { html("<p>internal admin page</p>") })),
    )
    .await;
    let p = s.port();
    let urls = [
        format!("http://2130706433:{p}/"),
        format!("http://0x7f000001:{p}/"),
        format!("http://0x7f.1:{p}/"),
        format!("http://0177.0.0.1:{p}/"),
        format!("http://127.1:{p}/"),
        format!("http://[::ffff:127.0.0.1]:{p}/"),
        format!("http://0.0.0.0:{p}/"),
        format!("http://0:{p}/"),
        format!("http://[::1]:{p}/"),
        format!("http://127.0.0.1:{p}/"),
        format!("http://localhost:{p}/"),
        format!("http://LocalHost.:{p}/"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://[fd00:ec2::254]/latest/meta-data/".to_string(),
        "http://metadata.google.internal/computeMetadata/v1/".to_string(),
        "http://[::ffff:169.254.169.254]/".to_string(),
        "http://[64:ff9b::a9fe:a9fe]/".to_string(),
        "http://168.63.129.16/machine?comp=goalstate".to_string(),
    ];
    let args: Vec<Value> = urls.iter().map(|u| json!(u)).collect();
    // fetch_url_content is allowed by the policy; only the guard stands in the way.
    let out = fetch_all("[policy]\nallow = [\"fetch_url_content\"]\n", &args).await;
    for (url, msg) in urls.iter().zip(&out) {
        assert!(
            msg.starts_with("fetch_url_content failed: refused: "),
            "{url}: {msg}"
        );
        assert!(msg.contains("web.allow"), "{url}: {msg}");
    }
    assert!(
        out[0].contains("the address 127.0.0.1 is a loopback address (this machine)"),
        "{}",
        out[0]
    );
    assert!(out[5].contains("127.0.0.1"), "{}", out[5]);
    assert!(out[6].contains("unspecified"), "{}", out[6]);
    assert!(
        out[10].contains("\"localhost\" is this machine (localhost)"),
        "{}",
        out[10]
    );
    assert!(
        out[12].contains("the cloud metadata service"),
        "{}",
        out[12]
    );
    assert!(out[13].contains("AWS metadata"), "{}", out[13]);
    assert!(out[14].contains("cloud metadata service"), "{}", out[14]);
    assert!(
        out[16].contains("NAT64 form of 169.254.169.254"),
        "{}",
        out[16]
    );
    assert!(out[17].contains("Azure's wire server"), "{}", out[17]);
    assert!(
        s.hits().is_empty(),
        "the guard let a request through: {:?}",
        s.hits()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemes_credentials_and_blocked_ports_are_refused() {
    let s = site("127.0.0.1", Router::new().fallback(any(|| async { "ok" }))).await;
    let p = s.port();
    let out = fetch_all(
        &open_loopback(""),
        &[
            json!("file:///etc/passwd"),
            json!(format!("ftp://127.0.0.1:{p}/")),
            json!(format!("http://user:pass@127.0.0.1:{p}/")),
            json!(format!("http://token@127.0.0.1:{p}/")),
            json!("http://example.com:25/"),
            json!("gopher://example.com/"),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        "fetch_url_content was not run because its arguments are invalid: only http:// and \
         https:// URLs can be fetched; file:///etc/passwd is a file: URL. Read workspace files \
         with read_file instead"
    );
    assert!(out[1].contains("is a ftp: URL"), "{}", out[1]);
    assert!(
        out[2].contains("contains a user name or password"),
        "{}",
        out[2]
    );
    assert!(
        !out[2].contains("pass@"),
        "the password is not echoed: {}",
        out[2]
    );
    assert!(
        out[3].contains("contains a user name or password"),
        "{}",
        out[3]
    );
    assert!(
        out[4].contains("port 25, which belongs to a non-web service"),
        "{}",
        out[4]
    );
    assert!(out[5].contains("is a gopher: URL"), "{}", out[5]);
    assert!(s.hits().is_empty(), "{:?}", s.hits());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_name_that_resolves_to_loopback_is_refused_by_the_resolver() {
    // The tool refuses "localhost" by name before anything else; this drives the resolver
    // under a real reqwest client, so the DNS path is what refuses: it vets every address a
    // name resolves to before reqwest may connect, and hands over only vetted ones.
    use toolpilot::web::guard::{Guard, GuardResolver, Refused};
    let s = site(
        "127.0.0.1",
        Router::new().fallback(any(|| async { "secret" })),
    )
    .await;
    toolpilot::process::install_crypto_provider();
    let client = |allow: &[String]| {
        reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardResolver {
                guard: Arc::new(Guard::new(allow)),
            }))
            .no_proxy()
            .build()
            .unwrap()
    };
    let url = format!("http://localhost:{}/", s.port());
    let err = client(&[]).get(&url).send().await.unwrap_err();
    let mut refused = None;
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    while let Some(e) = source {
        if let Some(r) = e.downcast_ref::<Refused>() {
            refused = Some(r.message.clone());
        }
        source = e.source();
    }
    let refused = refused.unwrap_or_else(|| panic!("not refused by the guard: {err:?}"));
    assert!(
        refused.starts_with("refused: \"localhost\", which resolves to ")
            && refused.contains("loopback"),
        "{refused}"
    );
    assert!(s.hits().is_empty(), "{:?}", s.hits());
    // The same name, allowlisted, resolves and connects.
    let ok = client(&["localhost".to_string()])
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.text().await.unwrap(), "secret");
    assert_eq!(s.hits().len(), 1);

    // A name that does not resolve is a DNS failure, said as such.
    let web = toolpilot::web::Web::new(&toolpilot::config::WebConfig::default()).unwrap();
    let err = web
        .fetch(
            &url::Url::parse("http://no-such-host.invalid/").unwrap(),
            &|_, _| Ok(()),
        )
        .await
        .unwrap_err()
        .0;
    assert!(
        err.starts_with("could not resolve the host name \"no-such-host.invalid\""),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------
// Redirects

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_are_followed_and_every_hop_is_checked() {
    // An "internal" server on another loopback address that is not allowlisted.
    let internal = site(
        "127.0.0.2",
        Router::new().fallback(any(|| async { "internal secrets" })),
    )
    .await;
    let internal_url = internal.url("/admin");
    let p = Arc::new(Mutex::new(0u16));
    let port = Arc::clone(&p);
    let s = site(
        "127.0.0.1",
        Router::new()
            .route(
                "/start",
                get(|| async { redirect(StatusCode::FOUND, "/middle".into()) }),
            )
            .route(
                "/middle",
                get(|| async { redirect(StatusCode::PERMANENT_REDIRECT, "final.txt".into()) }),
            )
            .route(
                "/final.txt",
                get(|| async { typed("text/plain", "arrived") }),
            )
            .route(
                "/to-internal",
                get(move || async move { redirect(StatusCode::FOUND, internal_url) }),
            )
            .route(
                "/to-metadata",
                get(|| async {
                    redirect(
                        StatusCode::MOVED_PERMANENTLY,
                        "http://169.254.169.254/latest/meta-data/iam/".into(),
                    )
                }),
            )
            .route(
                "/to-localhost",
                get(move || async move {
                    let p = *port.lock().unwrap();
                    redirect(StatusCode::FOUND, format!("http://localhost:{p}/final.txt"))
                }),
            )
            .route(
                "/to-file",
                get(|| async { redirect(StatusCode::FOUND, "file:///etc/passwd".into()) }),
            )
            .route(
                "/loop/{n}",
                get(
                    |axum::extract::Path(n): axum::extract::Path<u32>| async move {
                        redirect(StatusCode::FOUND, format!("/loop/{}", n + 1))
                    },
                ),
            ),
    )
    .await;
    *p.lock().unwrap() = s.port();
    let out = fetch_all(
        &open_loopback(""),
        &[
            json!(s.url("/start")),
            json!(s.url("/to-internal")),
            json!(s.url("/to-metadata")),
            json!(s.url("/to-localhost")),
            json!(s.url("/to-file")),
            json!(s.url("/loop/0")),
        ],
    )
    .await;
    assert_eq!(
        out[0],
        format!("(redirected to {})\n\narrived", s.url("/final.txt"))
    );
    assert!(
        out[1].starts_with(&format!(
            "fetch_url_content failed: {} redirected to {}, which is not followed: refused: the \
             address 127.0.0.2 is a loopback address",
            s.url("/to-internal"),
            internal.url("/admin")
        )),
        "{}",
        out[1]
    );
    assert!(out[2].contains("which is not followed: refused: the address 169.254.169.254 is the cloud metadata service"), "{}", out[2]);
    assert!(
        out[3].contains("which is not followed: refused: the host \"localhost\""),
        "{}",
        out[3]
    );
    assert!(
        out[4].contains("which is not followed: only http:// and https://"),
        "{}",
        out[4]
    );
    assert!(
        out[5].starts_with("fetch_url_content failed: stopped after 5 redirects (")
            && out[5].contains("/loop/0 → ")
            && out[5].contains("/loop/6)"),
        "{}",
        out[5]
    );
    assert!(internal.hits().is_empty(), "{:?}", internal.hits());
    let loops = s
        .hits()
        .iter()
        .filter(|h| h.uri.starts_with("/loop/"))
        .count();
    assert_eq!(loops, 6, "the first request and five redirects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirect_hops_are_checked_against_the_policy() {
    let p = Arc::new(Mutex::new(0u16));
    let port = Arc::clone(&p);
    let port2 = Arc::clone(&p);
    let s = site(
        "127.0.0.1",
        Router::new()
            .route("/page", get(|| async { typed("text/plain", "the page") }))
            .route(
                "/to-denied",
                get(move || async move {
                    let p = *port.lock().unwrap();
                    redirect(StatusCode::FOUND, format!("http://localhost:{p}/page"))
                }),
            )
            .route(
                "/to-other",
                get(move || async move {
                    let p = *port2.lock().unwrap();
                    redirect(StatusCode::FOUND, format!("http://localhost:{p}/page?x=1"))
                }),
            ),
    )
    .await;
    *p.lock().unwrap() = s.port();
    // The guard lets localhost through; the policy allows 127.0.0.1 only, and denies one path.
    let cfg = "[policy]\nallow = [\"fetch_url_content(domain:127.0.0.1)\"]\n\
               deny = [\"fetch_url_content(http://localhost:*/page)\"]\n\
               [web]\nallow = [\"127.0.0.1\", \"localhost\"]\n";
    let out = fetch_all(
        cfg,
        &[
            json!(s.url("/to-denied")),
            json!(s.url("/to-other")),
            json!(format!("http://localhost:{}/page", s.port())),
        ],
    )
    .await;
    assert!(
        out[0].contains(
            "which is not followed: the permission policy refuses it (denied by policy.deny[0]"
        ),
        "{}",
        out[0]
    );
    assert!(
        out[1].contains(
            "which is not followed: it is on another host, which needs its own approval \
             (default policy of fetch_url_content (allowedWithPermission) requires approval). \
             To read it, call fetch_url_content with that URL"
        ),
        "{}",
        out[1]
    );
    assert!(
        out[2].contains("the permission policy refuses this call (denied by policy.deny[0]"),
        "{}",
        out[2]
    );
    assert!(
        !s.hits().iter().any(|h| h.uri.starts_with("/page")),
        "{:?}",
        s.hits()
    );
}

// ---------------------------------------------------------------------------------------
// The allowlist and the policy

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_allowlist_opens_hosts_and_ranges_and_nothing_else() {
    let s = site(
        "127.0.0.1",
        Router::new().fallback(any(|| async { typed("text/plain", "hello") })),
    )
    .await;
    let p = s.port();
    let out = fetch_all(
        "[policy]\nallow = [\"fetch_url_content\"]\n[web]\nallow = [\"127.0.0.0/30\", \"localhost\"]\n",
        &[
            json!(format!("http://127.0.0.1:{p}/a")),
            json!(format!("http://2130706433:{p}/b")),
            json!(format!("http://localhost:{p}/c")),
            json!(format!("http://127.0.0.9:{p}/d")),
            json!(format!("http://[::ffff:127.0.0.1]:{p}/e")),
        ],
    )
    .await;
    assert_eq!(out[0], "hello");
    assert_eq!(out[1], "hello", "the same address, spelled in decimal");
    assert_eq!(out[2], "hello");
    assert!(
        out[3].contains("refused: the address 127.0.0.9 is a loopback"),
        "{}",
        out[3]
    );
    assert_eq!(
        out[4], "hello",
        "the IPv4-mapped form of an allowed address"
    );
    let paths: Vec<String> = s.hits().iter().map(|h| h.uri.clone()).collect();
    assert_eq!(paths.len(), 4, "{paths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_needs_approval_by_default_and_is_offered() {
    let s = site("127.0.0.1", Router::new().fallback(any(|| async { "hi" }))).await;
    let server = TestServer::builder()
        .config("[web]\nallow = [\"127.0.0.1\"]\n")
        .script(one_call("fetch_url_content", json!({"url": s.url("/x")})))
        .start()
        .await;
    let out = run_tool(&server, "fetch_url_content").await;
    assert!(out.contains("needs the user's approval"), "{out}");
    assert!(s.hits().is_empty());
    let offered: Vec<String> = server.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        offered.contains(&"fetch_url_content".to_string()),
        "{offered:?}"
    );
    assert!(
        !offered.contains(&"search_web".to_string()),
        "no provider: {offered:?}"
    );
    // With --yes it runs.
    let server = TestServer::builder()
        .yes()
        .config("[web]\nallow = [\"127.0.0.1\"]\n")
        .script(one_call("fetch_url_content", json!({"url": s.url("/x")})))
        .start()
        .await;
    assert_eq!(run_tool(&server, "fetch_url_content").await, "hi");
}

// ---------------------------------------------------------------------------------------
// Secrets: redacted from every result, refused in URLs and queries

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_redacted_from_results_and_refused_in_urls() {
    let token = "tok-0123456789abcdefXYZ";
    let s = site(
        "127.0.0.1",
        Router::new().route(
            "/echo",
            get(move || async move {
                typed(
                    "text/plain",
                    format!("config: token={token}\naws: AKIAIOSFODNN7EXAMPLE\n"),
                )
            }),
        ),
    )
    .await;
    let server = TestServer::builder()
        .env("MY_SERVICE_TOKEN", token)
        .file(
            "notes.md",
            format!("# Notes\nThe token is {token}.\nkey: ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij0123\n"),
        )
        .config(&open_loopback(""))
        .script(calls_script(&[
            ("read_file", json!({"filepath": "notes.md"})),
            ("fetch_url_content", json!({"url": s.url("/echo")})),
            ("fetch_url_content", json!({"url": format!("{}?t={token}", s.url("/exfil"))})),
            ("fetch_url_content", json!({"url": s.url("/exfil?t=tok%2D0123456789abcdefXYZ")})),
        ]))
        .start()
        .await;
    let out = send_and_collect(&server, ask("go"), 4).await;
    assert_eq!(
        out[0],
        "# Notes\nThe token is [redacted: value of $MY_SERVICE_TOKEN].\nkey: [redacted: GitHub token]\n"
    );
    assert_eq!(
        out[1],
        "config: token=[redacted: value of $MY_SERVICE_TOKEN]\naws: [redacted: AWS access key id]"
    );
    assert_eq!(
        out[2],
        "fetch_url_content was not run because its arguments are invalid: the URL contains the \
         value of $MY_SERVICE_TOKEN; it was not sent anywhere. Never put keys, tokens or other \
         secrets into URLs or search queries"
    );
    assert!(
        out[3].contains("the value of $MY_SERVICE_TOKEN"),
        "percent-encoded: {}",
        out[3]
    );
    // No tool result carried a secret to the model, in any request (the model's own call
    // arguments hold what it wrote, which is not a leak).
    for m in all_tool_messages(&server) {
        assert!(!m.contains(token), "the token reached the upstream: {m}");
        assert!(!m.contains("AKIAIOSFODNN7EXAMPLE"), "{m}");
        assert!(!m.contains("ghp_ABCDEFGHIJ"), "{m}");
    }
    assert!(
        !s.hits().iter().any(|h| h.uri.starts_with("/exfil")),
        "{:?}",
        s.hits()
    );
}

// ---------------------------------------------------------------------------------------
// search_web

fn searxng_site() -> Router {
    Router::new().route(
        "/search",
        get(|| async {
            axum::Json(json!({
                "query": "ignored",
                "results": [
                    {"title": "The Rust <b>Book</b>", "url": "https://doc.rust-lang.org/book/",
                     "content": "The Rust Programming   Language, an introductory book.", "engine": "x"},
                    {"title": "Rust by Example", "url": "https://doc.rust-lang.org/rust-by-example/",
                     "content": "A collection of runnable examples."},
                    {"title": "no url, skipped", "content": "x"},
                ],
                "answers": [], "number_of_results": 3
            }))
        }),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_with_a_searxng_instance() {
    let s = site("127.0.0.1", searxng_site()).await;
    let server = TestServer::builder()
        .config(&format!(
            "[web.search]\nprovider = \"searxng\"\nurl = \"{}\"\n",
            s.url("/")
        ))
        .script(one_call("search_web", json!({"query": "rust book & more"})))
        .start()
        .await;
    let out = run_tool(&server, "search_web").await;
    assert_eq!(
        out,
        "Web results for \"rust book & more\" (SearXNG, 2 results):\n\n\
         1. The Rust Book\n   https://doc.rust-lang.org/book/\n   The Rust Programming Language, an introductory book.\n\n\
         2. Rust by Example\n   https://doc.rust-lang.org/rust-by-example/\n   A collection of runnable examples.\n\n\
         Read a result in full with fetch_url_content."
    );
    let hits = s.hits();
    assert_eq!(hits.len(), 1);
    assert_eq!(hits[0].uri, "/search?q=rust+book+%26+more&format=json");
    // search_web is offered now.
    let offered = server.requests()[0].body["tools"].to_string();
    assert!(offered.contains("\"search_web\""), "{offered}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_with_brave_sends_the_key_and_reads_web_results() {
    let s = site(
        "127.0.0.1",
        Router::new().route(
            "/res/v1/web/search",
            get(|| async {
                axum::Json(json!({"type": "search", "web": {"results": [
                    {"title": "serde - Rust", "url": "https://docs.rs/serde",
                     "description": "A generic <strong>serialization</strong> framework."}
                ]}}))
            }),
        ),
    )
    .await;
    let server = TestServer::builder()
        .env("TEST_BRAVE_KEY", "brave-key-0123456789")
        .config(&format!(
            "[web.search]\nprovider = \"brave\"\nurl = \"{}\"\napi_key_env = \"TEST_BRAVE_KEY\"\nmax_results = 3\n",
            s.url("/res/v1/web/search")
        ))
        .script(one_call("search_web", json!({"query": "serde"})))
        .start()
        .await;
    let out = run_tool(&server, "search_web").await;
    assert_eq!(
        out,
        "Web results for \"serde\" (Brave Search, 1 result):\n\n1. serde - Rust\n   \
         https://docs.rs/serde\n   A generic serialization framework.\n\nRead a result in full \
         with fetch_url_content."
    );
    let hits = s.hits();
    assert_eq!(hits[0].uri, "/res/v1/web/search?q=serde&count=3");
    assert_eq!(
        hits[0].headers["x-subscription-token"],
        "brave-key-0123456789"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_with_tavily_posts_the_query_with_a_bearer_key() {
    let s = site(
        "127.0.0.1",
        Router::new().route(
            "/search",
            axum::routing::post(|| async {
                axum::Json(json!({"query": "q", "results": [
                    {"title": "Tokio", "url": "https://tokio.rs/", "content": "An asynchronous runtime.", "score": 0.9}
                ]}))
            }),
        ),
    )
    .await;
    let server = TestServer::builder()
        .env("TAVILY_API_KEY", "tvly-dev-0123456789")
        .config(&format!(
            "[web.search]\nprovider = \"tavily\"\nurl = \"{}\"\n",
            s.url("/search")
        ))
        .script(one_call("search_web", json!({"query": "async runtime"})))
        .start()
        .await;
    let out = run_tool(&server, "search_web").await;
    assert!(out.starts_with("Web results for \"async runtime\" (Tavily, 1 result):\n\n1. Tokio\n   https://tokio.rs/\n   An asynchronous runtime."), "{out}");
    let hit = &s.hits()[0];
    assert_eq!(hit.method, "POST");
    assert_eq!(
        hit.headers[header::AUTHORIZATION],
        "Bearer tvly-dev-0123456789"
    );
    let body: Value = serde_json::from_str(&hit.body).unwrap();
    assert_eq!(body, json!({"query": "async runtime", "max_results": 5}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_provider_failures_are_explained() {
    let s = site(
        "127.0.0.1",
        Router::new()
            .route("/unauthorized", get(|| async { StatusCode::UNAUTHORIZED }))
            .route("/limited", get(|| async { StatusCode::TOO_MANY_REQUESTS }))
            .route(
                "/broken",
                get(|| async { StatusCode::INTERNAL_SERVER_ERROR }),
            )
            .route(
                "/garbage",
                get(|| async { typed("text/html", "<html>not json</html>") }),
            )
            .route(
                "/shape",
                get(|| async { axum::Json(json!({"unexpected": true})) }),
            ),
    )
    .await;
    let mut outs = Vec::new();
    for path in ["/unauthorized", "/limited", "/broken", "/garbage", "/shape"] {
        let server = TestServer::builder()
            .env("BRAVE_API_KEY", "brave-key-0123456789")
            .config(&format!(
                "[web.search]\nprovider = \"brave\"\nurl = \"{}\"\n",
                s.url(path)
            ))
            .script(one_call("search_web", json!({"query": "x"})))
            .start()
            .await;
        outs.push(run_tool(&server, "search_web").await);
    }
    assert_eq!(
        outs[0],
        "search_web failed: the search provider (Brave Search) refused the API key (HTTP 401 \
         Unauthorized): check the key in BRAVE_API_KEY. Tell the user; search is unavailable \
         until it is fixed"
    );
    assert!(
        outs[1].contains("is rate-limiting (HTTP 429 Too Many Requests)"),
        "{}",
        outs[1]
    );
    assert!(
        outs[2].contains("failed (HTTP 500 Internal Server Error)"),
        "{}",
        outs[2]
    );
    assert!(
        outs[3].contains("is not the JSON expected") && outs[3].contains("<html>not json"),
        "{}",
        outs[3]
    );
    assert!(
        outs[4].contains("has no result list (expected web.results)"),
        "{}",
        outs[4]
    );
    for o in &outs {
        assert!(!o.contains("brave-key-0123456789"), "{o}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_provider_search_is_not_offered_and_a_call_says_how_to_configure_one() {
    let server = TestServer::builder()
        .script(one_call("search_web", json!({"query": "x"})))
        .start()
        .await;
    let out = run_tool(&server, "search_web").await;
    assert!(
        out.starts_with("search_web is not available: no search provider is configured.")
            && out.contains("[web.search] provider = \"searxng\""),
        "{out}"
    );
    let offered = server.requests()[0].body["tools"].to_string();
    assert!(!offered.contains("\"search_web\""), "{offered}");

    // A hosted provider without its key: same, naming the variable.
    let server = TestServer::builder()
        .config("[web.search]\nprovider = \"tavily\"\napi_key_env = \"NOT_SET_TAVILY_KEY\"\n")
        .script(one_call("search_web", json!({"query": "x"})))
        .start()
        .await;
    let out = run_tool(&server, "search_web").await;
    assert!(
        out.contains("web.search.provider = \"tavily\" needs an API key in the environment variable NOT_SET_TAVILY_KEY"),
        "{out}"
    );

    // A client that declares search_web itself keeps it: the call goes back to the client.
    let server = TestServer::builder()
        .script(one_call("search_web", json!({"query": "x"})))
        .start()
        .await;
    let mut req = ask("go");
    req["tools"] = json!([{"type": "function", "function": {"name": "search_web",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}}]);
    let r = server.chat(req).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        r.body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "search_web"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_carrying_a_secret_is_refused_and_results_are_redacted() {
    let s = site(
        "127.0.0.1",
        Router::new().route(
            "/search",
            get(|| async {
                axum::Json(json!({"results": [
                    {"title": "leak", "url": "https://paste.example/1",
                     "content": "found AKIAIOSFODNN7EXAMPLE in a paste"}
                ]}))
            }),
        ),
    )
    .await;
    let server = TestServer::builder()
        .env("DEPLOY_TOKEN", "deploy-0123456789abcdef")
        .config(&format!(
            "[web.search]\nprovider = \"searxng\"\nurl = \"{}\"\n",
            s.url("")
        ))
        .script(calls_script(&[
            (
                "search_web",
                json!({"query": "what is deploy-0123456789abcdef"}),
            ),
            ("search_web", json!({"query": "aws keys"})),
        ]))
        .start()
        .await;
    let out = send_and_collect(&server, ask("go"), 2).await;
    assert_eq!(
        out[0],
        "search_web was not run because its arguments are invalid: the query contains the value \
         of $DEPLOY_TOKEN; it was not sent anywhere. Never put keys, tokens or other secrets \
         into search queries or URLs"
    );
    assert!(
        out[1].contains("found [redacted: AWS access key id] in a paste"),
        "{}",
        out[1]
    );
    let hits = s.hits();
    assert_eq!(hits.len(), 1, "only the clean query was sent: {hits:?}");
    assert_eq!(hits[0].uri, "/search?q=aws+keys&format=json");
}
