//! Fetching one page: redirects followed by hand (each hop re-checked), bodies streamed under
//! a size limit, timeouts, and the content turned into text.
//!
//! Every failure is a [`FetchError`] whose text is written for the model: what happened, to
//! which URL, and what to try instead.

use std::fmt;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use url::Url;

use super::Web;
use super::guard::{DnsFailed, Refused};

/// At most this many redirects are followed.
pub const MAX_REDIRECTS: usize = 5;

/// A fetched page, as text.
#[derive(Debug, Clone)]
pub struct Document {
    /// Where the content came from (after redirects).
    pub final_url: Url,
    pub title: Option<String>,
    /// Markdown (HTML pages) or the text as served.
    pub text: String,
    /// `text/html`, `application/json`, …
    pub content_type: String,
    /// The page was HTML and Readability found its main content.
    pub extracted: bool,
}

/// Why a fetch failed; the text is for the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchError(pub String);

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks a redirect hop against the permission policy: `(from, to)`.
pub type HopCheck<'a> = &'a (dyn Fn(&Url, &Url) -> Result<(), String> + Sync);

/// What the fetch was doing, for the timeout message.
#[derive(Default)]
struct Progress {
    phase: AtomicU8,
    bytes: AtomicUsize,
}

/// `Progress::phase` after the response head arrived (before: 0, waiting).
const DOWNLOADING: u8 = 1;

impl Web {
    /// Fetches `url`, following at most [`MAX_REDIRECTS`] redirects, and converts the body to
    /// text. Every URL on the way is checked by the guard, every address by the resolver, and
    /// the address connected to once more when the response arrives.
    pub async fn fetch(&self, url: &Url, hop_check: HopCheck<'_>) -> Result<Document, FetchError> {
        let progress = Progress::default();
        let total = self.config.timeout;
        let raw = match tokio::time::timeout(total, self.fetch_raw(url, hop_check, &progress)).await
        {
            Ok(r) => r?,
            Err(_) => {
                let phase = if progress.phase.load(Ordering::Relaxed) == DOWNLOADING {
                    format!(
                        "while downloading the page (after {} received)",
                        human_bytes(progress.bytes.load(Ordering::Relaxed))
                    )
                } else {
                    "before the server answered".to_string()
                };
                return Err(FetchError(format!(
                    "timed out after {} (web.timeout_secs) {phase} for {url}. The site is too \
                     slow or not answering; try again later or use another source",
                    human_duration(total)
                )));
            }
        };
        let (final_url, content_type, charset, body) = raw;
        let kind = kind_of(&content_type, &body, &final_url)?;
        let text = decode(&body, charset.as_deref(), kind == Kind::Html);
        let content_type = if content_type.is_empty() {
            match kind {
                Kind::Html => "text/html (guessed)".to_string(),
                Kind::Text => "text/plain (guessed)".to_string(),
            }
        } else {
            content_type
        };
        Ok(match kind {
            Kind::Html => {
                let md = tokio::task::spawn_blocking({
                    let final_url = final_url.clone();
                    move || super::html::to_markdown(&text, &final_url)
                })
                .await
                .map_err(|e| FetchError(format!("converting the page failed: {e}")))?;
                Document {
                    final_url,
                    title: md.title,
                    text: md.text,
                    content_type,
                    extracted: md.extracted,
                }
            }
            Kind::Text => Document {
                final_url,
                title: None,
                text,
                content_type,
                extracted: false,
            },
        })
    }

    /// The body of the page `url` leads to: (final URL, content type, charset, bytes).
    async fn fetch_raw(
        &self,
        start: &Url,
        hop_check: HopCheck<'_>,
        progress: &Progress,
    ) -> Result<(Url, String, Option<String>, Vec<u8>), FetchError> {
        let mut url = start.clone();
        let mut chain: Vec<Url> = vec![url.clone()];
        let mut hop = 0usize;
        // The caller checked the first URL already; checking it again here keeps this
        // function safe on its own (a literal address is never seen by the resolver).
        self.guard
            .check_url(&url)
            .map_err(|r| FetchError(r.message))?;
        let response = loop {
            let host = url.host_str().unwrap_or_default().to_string();
            let response = self
                .client
                .get(url.clone())
                .header(
                    reqwest::header::ACCEPT,
                    "text/html,application/xhtml+xml,text/plain;q=0.9,text/markdown;q=0.9,\
                     application/json;q=0.9,*/*;q=0.5",
                )
                .send()
                .await
                .map_err(|e| self.request_error(&url, &e))?;
            // The address actually connected to, checked once more (the resolver vetted it;
            // this also covers a pooled connection and literal addresses).
            if let Some(peer) = response.remote_addr() {
                self.guard
                    .check_addr(&host, peer.ip())
                    .map_err(|r| FetchError(r.message))?;
            }
            let status = response.status();
            if !status.is_redirection() || status == reqwest::StatusCode::NOT_MODIFIED {
                break response;
            }
            let Some(location) = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
            else {
                break response;
            };
            let next = url.join(location.trim()).map_err(|e| {
                FetchError(format!(
                    "{url} redirects to {location:?}, which is not a valid URL ({e})"
                ))
            })?;
            hop += 1;
            if hop > MAX_REDIRECTS {
                chain.push(next);
                return Err(FetchError(format!(
                    "stopped after {MAX_REDIRECTS} redirects ({}): the site redirects in a loop \
                     or too often. Try the last URL directly if it looks right",
                    chain
                        .iter()
                        .map(Url::as_str)
                        .collect::<Vec<_>>()
                        .join(" → ")
                )));
            }
            let refused = |why: String| {
                FetchError(format!(
                    "{url} redirected to {next}, which is not followed: {why}"
                ))
            };
            self.guard
                .check_url(&next)
                .map_err(|r| refused(r.message))?;
            hop_check(&url, &next).map_err(refused)?;
            chain.push(next.clone());
            url = next;
        };
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError(status_message(status, &url)));
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let (essence, charset) = parse_content_type(&content_type);
        // Refuse what cannot be read before downloading it.
        if !essence.is_empty() && unsupported(&essence).is_some() {
            kind_of(&essence, &[], &url)?;
        }
        let max = self.config.max_download_bytes;
        if let Some(len) = response.content_length()
            && len as usize > max
        {
            return Err(too_large(&url, max, Some(len)));
        }
        progress.phase.store(DOWNLOADING, Ordering::Relaxed);
        let mut body: Vec<u8> = Vec::new();
        let mut response = response;
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                FetchError(format!(
                    "reading the response from {url} failed after {}: {}",
                    human_bytes(body.len()),
                    crate::text::error_chain(&e)
                ))
            })?;
            let Some(chunk) = chunk else { break };
            // Counted as decompressed bytes arrive: a small gzip bomb stops here, not in memory.
            if body.len() + chunk.len() > max {
                return Err(too_large(&url, max, None));
            }
            body.extend_from_slice(&chunk);
            progress.bytes.store(body.len(), Ordering::Relaxed);
        }
        Ok((url, essence, charset, body))
    }

    /// A failed request, explained.
    fn request_error(&self, url: &Url, e: &reqwest::Error) -> FetchError {
        // The guard's own refusals and DNS failures travel inside reqwest's error.
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(s) = source {
            if let Some(r) = s.downcast_ref::<Refused>() {
                return FetchError(r.message.clone());
            }
            if let Some(d) = s.downcast_ref::<DnsFailed>() {
                return FetchError(d.to_string());
            }
            source = s.source();
        }
        let target = format!(
            "{}:{}",
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or(0)
        );
        if e.is_timeout() {
            return FetchError(format!(
                "could not connect to {target} within {} (web.connect_timeout_secs): the site is \
                 down or unreachable",
                human_duration(self.config.connect_timeout)
            ));
        }
        if e.is_connect() {
            return FetchError(format!(
                "could not connect to {target} ({}): the site is down or unreachable",
                crate::text::error_chain(e)
            ));
        }
        FetchError(format!(
            "the request to {url} failed: {}",
            crate::text::error_chain(e)
        ))
    }
}

fn too_large(url: &Url, max: usize, announced: Option<u64>) -> FetchError {
    let size = match announced {
        Some(n) => format!(" (it announces {})", human_bytes(n as usize)),
        None => String::new(),
    };
    FetchError(format!(
        "the response from {url} is larger than {} (web.max_download_bytes){size}; it was not \
         read. Compressed responses count after decompression. Look for a smaller page (a \
         specific section, a raw text version)",
        human_bytes(max)
    ))
}

/// `HTTP 404 Not Found`, plus what to do about it.
fn status_message(status: reqwest::StatusCode, url: &Url) -> String {
    let code = status.as_u16();
    let reason = status.canonical_reason().unwrap_or("");
    let hint = match code {
        401 | 403 => {
            "The site refuses access: the page needs a login, or the site blocks \
                      automated clients. Try another source"
        }
        404 | 410 => {
            "The page does not exist (any more): check the URL, or find the right one \
                      with search_web"
        }
        408 | 429 => "The site is rate-limiting or slow; try again later or use another source",
        300..=399 => "The redirect has no usable Location header",
        400..=499 => "The site rejected the request; check the URL",
        _ => "The server failed; try again later or use another source",
    };
    format!("HTTP {code} {reason} from {url}. {hint}")
        .replace("  ", " ")
        .trim()
        .to_string()
}

/// What a body is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Html,
    Text,
}

/// `text/html; charset=utf-8` → (`text/html`, `Some("utf-8")`).
fn parse_content_type(ct: &str) -> (String, Option<String>) {
    let mut parts = ct.split(';');
    let essence = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    let charset = parts.find_map(|p| {
        let (k, v) = p.split_once('=')?;
        (k.trim().eq_ignore_ascii_case("charset"))
            .then(|| v.trim().trim_matches('"').to_ascii_lowercase())
    });
    (essence, charset)
}

/// What an unreadable content type is, in words.
fn unsupported(essence: &str) -> Option<String> {
    let (top, sub) = essence.split_once('/').unwrap_or((essence, ""));
    if top == "text" {
        return None;
    }
    let text_like = matches!(
        essence,
        "application/xhtml+xml"
            | "application/json"
            | "application/xml"
            | "application/javascript"
            | "application/x-javascript"
            | "application/ecmascript"
            | "application/yaml"
            | "application/x-yaml"
            | "application/toml"
            | "application/x-sh"
            | "application/sql"
            | "application/graphql"
    ) || sub.ends_with("+json")
        || sub.ends_with("+xml");
    if text_like {
        return None;
    }
    Some(match (top, essence) {
        (_, "application/pdf") => "a PDF document".to_string(),
        ("image", _) => format!("an image ({essence})"),
        ("audio", _) => format!("audio ({essence})"),
        ("video", _) => format!("a video ({essence})"),
        ("font", _) => format!("a font ({essence})"),
        (
            _,
            "application/zip"
            | "application/gzip"
            | "application/x-gzip"
            | "application/x-tar"
            | "application/x-7z-compressed"
            | "application/x-rar-compressed"
            | "application/x-bzip2"
            | "application/x-xz"
            | "application/zstd",
        ) => format!("an archive ({essence})"),
        (_, "application/octet-stream") => "binary data (application/octet-stream)".to_string(),
        (_, e) if e.starts_with("application/vnd.") || e == "application/msword" => {
            format!("an office or application document ({essence})")
        }
        _ => format!("content of type {essence}"),
    })
}

/// Decides how to read a body from its content type, or by looking at it when the server
/// sent none. Binary content is refused with what it is.
fn kind_of(essence: &str, body: &[u8], url: &Url) -> Result<Kind, FetchError> {
    let refuse = |what: String| {
        FetchError(format!(
            "{url} is {what}, which fetch_url_content cannot read: only HTML, plain text, \
             Markdown, JSON and XML pages are supported. Look for an HTML or text version of \
             the content"
        ))
    };
    if let Some(what) = unsupported(essence).filter(|_| !essence.is_empty()) {
        return Err(refuse(what));
    }
    let head = &body[..body.len().min(1024)];
    if head.starts_with(b"%PDF-") {
        return Err(refuse("a PDF document".into()));
    }
    if head.contains(&0) {
        return Err(refuse(if essence.is_empty() {
            "binary data".into()
        } else {
            format!("binary data (although it says {essence})")
        }));
    }
    if essence == "text/html" || essence == "application/xhtml+xml" {
        return Ok(Kind::Html);
    }
    if essence.is_empty() {
        let start = String::from_utf8_lossy(head)
            .trim_start()
            .to_ascii_lowercase();
        let start = start.trim_start_matches('\u{feff}');
        if start.starts_with("<!doctype html") || start.starts_with("<html") {
            return Ok(Kind::Html);
        }
    }
    Ok(Kind::Text)
}

/// Bytes to text: the declared charset, else a `<meta charset>` (HTML), else UTF-8 (a BOM
/// wins over all of them). Undecodable bytes become U+FFFD.
fn decode(body: &[u8], charset: Option<&str>, html: bool) -> String {
    let label = charset
        .map(str::to_string)
        .or_else(|| html.then(|| meta_charset(body)).flatten());
    let encoding = label
        .and_then(|l| encoding_rs::Encoding::for_label(l.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = encoding.decode(body);
    text.into_owned()
}

/// The charset of `<meta charset="…">` or `<meta http-equiv … content="…; charset=…">` in the
/// first KiB of a page.
fn meta_charset(body: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
    let at = head.find("charset=")?;
    let rest = head[at + "charset=".len()..].trim_start_matches(['"', '\'']);
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
        .unwrap_or(rest.len());
    Some(rest[..end].to_string()).filter(|s| !s.is_empty())
}

pub fn human_bytes(n: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * 1024;
    if n >= MIB {
        let v = n as f64 / MIB as f64;
        if v.fract() == 0.0 {
            format!("{v:.0} MiB")
        } else {
            format!("{v:.1} MiB")
        }
    } else if n >= 10 * KIB {
        format!("{} KiB", n / KIB)
    } else if n >= KIB {
        format!("{:.1} KiB", n as f64 / KIB as f64)
    } else {
        format!("{n} bytes")
    }
}

pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{} ms", d.as_millis())
    } else if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u() -> Url {
        Url::parse("https://example.com/x").unwrap()
    }

    #[test]
    fn content_types_are_sorted_into_readable_and_not() {
        assert_eq!(kind_of("text/html", b"<p>x", &u()), Ok(Kind::Html));
        assert_eq!(kind_of("text/plain", b"x", &u()), Ok(Kind::Text));
        assert_eq!(kind_of("application/json", b"{}", &u()), Ok(Kind::Text));
        assert_eq!(
            kind_of("application/vnd.api+json", b"{}", &u()),
            Ok(Kind::Text)
        );
        assert_eq!(kind_of("", b"<!DOCTYPE html><p>", &u()), Ok(Kind::Html));
        assert_eq!(kind_of("", b"plain words", &u()), Ok(Kind::Text));
        let e = kind_of("application/pdf", b"", &u()).unwrap_err().0;
        assert!(
            e.starts_with(
                "https://example.com/x is a PDF document, which fetch_url_content cannot read"
            ),
            "{e}"
        );
        assert!(
            kind_of("", b"%PDF-1.7 ...", &u())
                .unwrap_err()
                .0
                .contains("PDF document")
        );
        assert!(
            kind_of("image/png", b"", &u())
                .unwrap_err()
                .0
                .contains("an image (image/png)")
        );
        assert!(
            kind_of("text/plain", b"a\0b", &u())
                .unwrap_err()
                .0
                .contains("binary data (although it says text/plain)")
        );
    }

    #[test]
    fn charsets_are_honoured() {
        assert_eq!(
            parse_content_type("Text/HTML; Charset=\"ISO-8859-1\""),
            ("text/html".to_string(), Some("iso-8859-1".to_string()))
        );
        assert_eq!(decode(b"caf\xe9", Some("iso-8859-1"), false), "café");
        assert_eq!(
            decode(
                b"<meta charset=\"windows-1252\"><p>\x93hi\x94</p>",
                None,
                true
            ),
            "<meta charset=\"windows-1252\"><p>\u{201c}hi\u{201d}</p>"
        );
        assert_eq!(decode("é".as_bytes(), None, false), "é");
    }

    #[test]
    fn statuses_read_like_the_reference_plus_a_hint() {
        let m = status_message(reqwest::StatusCode::NOT_FOUND, &u());
        assert!(
            m.starts_with("HTTP 404 Not Found from https://example.com/x. The page does not exist"),
            "{m}"
        );
        assert!(status_message(reqwest::StatusCode::BAD_GATEWAY, &u()).contains("server failed"));
    }

    #[test]
    fn sizes_and_durations_read_well() {
        assert_eq!(human_bytes(5 * 1024 * 1024), "5 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100_000), "97 KiB");
        assert_eq!(human_duration(Duration::from_millis(300)), "300 ms");
        assert_eq!(human_duration(Duration::from_secs(30)), "30 s");
    }
}
