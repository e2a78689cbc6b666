//! `fetch_url_content` and `search_web`: the web tools, on top of [`crate::web`].
//!
//! Like Continue: `fetch_url_content` turns HTML into Markdown with Readability and cuts at
//! 20,000 characters, `search_web` returns a few results. Better: the address guard (no
//! loopback, private, link-local or metadata addresses, in any spelling, on any redirect
//! hop), a size limit enforced while downloading, timeouts, refusals of binary content that
//! say what it is, a cut note that says exactly how to read on (`offset`), a pluggable search
//! provider, and no URL or query that carries a secret ever leaves the machine.

use serde_json::json;
use url::Url;

use super::args::Args;
use super::{Invocation, Tool, ToolEnv, ToolError};
use crate::policy::Target;
use crate::web::fetch::human_bytes;

pub struct FetchUrlContent;
pub struct SearchWeb;

/// Snippets longer than this are cut.
const SNIPPET_CHARS: usize = 400;

/// Room kept in the output budget for the header and the cut note.
const NOTE_ROOM: usize = 600;

impl Tool for FetchUrlContent {
    fn name(&self) -> &'static str {
        "fetch_url_content"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/fetch_url_content.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","required":["url"],"properties":{
            "url":{"type":"string","description":"The http:// or https:// URL of the page to read"},
            "offset":{"type":"integer","description":"Where to start reading, in characters of the page's text (default 0); the cut note of a long page gives the next offset"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let raw = args.string("url")?.trim().to_string();
        let offset = match args.get("offset") {
            None => 0,
            Some(_) => {
                let n = args.integer("offset")?;
                usize::try_from(n).map_err(|_| {
                    ToolError::InvalidArguments(format!(
                        "`offset` must be 0 or greater (got {n}); it counts characters from the \
                         start of the page"
                    ))
                })?
            }
        };
        if let Some(what) = env.redactor.find(&raw) {
            return Err(ToolError::InvalidArguments(format!(
                "the URL contains {what}; it was not sent anywhere. Never put keys, tokens or \
                 other secrets into URLs or search queries"
            )));
        }
        let url = parse_url(&raw)?;
        crate::web::guard::check_scheme(&url)
            .and_then(|()| crate::web::guard::check_credentials(&url))
            .map_err(|r| ToolError::InvalidArguments(r.message))?;
        // Pure address checks before anyone is asked to approve the call.
        env.web
            .guard()
            .check_url(&url)
            .map_err(|r| ToolError::Failed(r.message))?;
        let host = host_of(&url);
        let target = Target::Url {
            url: url.as_str().to_string(),
            host,
        };
        let env = env.clone();
        Ok(Invocation {
            targets: vec![target],
            job: Box::pin(async move { read_page(&env, url, offset).await }),
        })
    }
}

/// Lower-case host of a URL, without a trailing dot.
fn host_of(url: &Url) -> String {
    url.host_str()
        .unwrap_or_default()
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

/// The model's URL; `docs.rs/serde` is read as `https://docs.rs/serde`.
fn parse_url(raw: &str) -> Result<Url, ToolError> {
    match Url::parse(raw) {
        Ok(u) => Ok(u),
        Err(url::ParseError::RelativeUrlWithoutBase) if !raw.contains("://") => {
            Url::parse(&format!("https://{raw}")).map_err(|e| {
                ToolError::InvalidArguments(format!(
                    "{raw:?} is not a URL ({e}); give a full address such as \
                     https://docs.rs/serde"
                ))
            })
        }
        Err(e) => Err(ToolError::InvalidArguments(format!(
            "{raw:?} is not a URL ({e}); give a full address such as https://docs.rs/serde"
        ))),
    }
}

/// Fetches (or takes from the cache) the page and shows the part starting at `offset`.
async fn read_page(env: &ToolEnv, url: Url, offset: usize) -> Result<String, ToolError> {
    let key = url.as_str().to_string();
    let doc = match env.web.cached(&key) {
        Some(doc) => doc,
        None => {
            let gate = env.hops.clone();
            let hop_check = move |from: &Url, to: &Url| {
                let target = Target::Url {
                    url: to.as_str().to_string(),
                    host: host_of(to),
                };
                gate.check("fetch_url_content", &host_of(from), &target)
            };
            let mut doc = env
                .web
                .fetch(&url, &hop_check)
                .await
                .map_err(|e| ToolError::Failed(e.0))?;
            // Redacted before paging, so that no secret is split across two parts.
            if let std::borrow::Cow::Owned(clean) = env.redactor.redact(&doc.text) {
                doc.text = clean;
            }
            let doc = std::sync::Arc::new(doc);
            env.web.remember(&key, std::sync::Arc::clone(&doc));
            doc
        }
    };
    let budget = env.config.output_budget.saturating_sub(NOTE_ROOM).max(1000);
    render_part(&url, &doc, offset, env.web.config.page_chars, budget)
}

/// The part of a document starting at character `offset`: at most `page_chars` characters
/// and `max_bytes` bytes, cut at a paragraph or line end when one is near, followed by a
/// note saying exactly how to read on.
fn render_part(
    asked: &Url,
    doc: &crate::web::Document,
    offset: usize,
    page_chars: usize,
    max_bytes: usize,
) -> Result<String, ToolError> {
    let text = doc.text.as_str();
    let total_chars = text.chars().count();
    let mut out = String::new();
    if doc.final_url != *asked {
        out.push_str(&format!("(redirected to {})\n\n", doc.final_url));
    }
    if text.trim().is_empty() {
        out.push_str(&format!(
            "The page at {} has no readable text ({}). It may be built by JavaScript in the \
             browser; look for another source.",
            doc.final_url, doc.content_type
        ));
        return Ok(out);
    }
    if offset >= total_chars {
        return Err(ToolError::InvalidArguments(format!(
            "`offset` {offset} is past the end of the page, which has {total_chars} characters; \
             call fetch_url_content without `offset` to read it from the start"
        )));
    }
    let start = byte_at(text, offset);
    // The largest end that fits both limits.
    let mut end = byte_at(text, offset + page_chars).min(start + max_bytes);
    end = crate::text::floor_char_boundary(text, end);
    if end < text.len() {
        // Prefer ending at a paragraph, else a line, in the last quarter of the part.
        let part = text.get(start..end).unwrap_or_default();
        let floor = part.len() * 3 / 4;
        if let Some(p) = part.rfind("\n\n").filter(|&p| p >= floor) {
            end = start + p + 2;
        } else if let Some(p) = part.rfind('\n').filter(|&p| p >= floor) {
            end = start + p + 1;
        }
    }
    if offset == 0
        && let Some(title) = &doc.title
        && !text.trim_start().starts_with('#')
    {
        out.push_str(&format!("# {title}\n\n"));
    }
    let part = text.get(start..end).unwrap_or_default();
    out.push_str(part.trim_end());
    let end_chars = offset + part.chars().count();
    if end < text.len() || offset > 0 {
        out.push_str(&format!(
            "\n\n[fetch_url_content: this is characters {offset}–{end_chars} of {total_chars} \
             of the page ({} of {}).",
            doc.content_type,
            human_bytes(text.len())
        ));
        if end < text.len() {
            out.push_str(&format!(
                " To read on, call fetch_url_content with {{\"url\": {}, \"offset\": {end_chars}}}.]",
                serde_json::Value::String(asked.as_str().to_string())
            ));
        } else {
            out.push_str(" This is the end of the page.]");
        }
    }
    Ok(out)
}

/// The byte index of character `n` (the end of the text past its last character).
fn byte_at(text: &str, n: usize) -> usize {
    text.char_indices().nth(n).map_or(text.len(), |(i, _)| i)
}

impl Tool for SearchWeb {
    fn name(&self) -> &'static str {
        "search_web"
    }
    fn description(&self) -> &'static str {
        include_str!("descriptions/search_web.md")
    }
    fn parameters(&self) -> serde_json::Value {
        json!({"type":"object","required":["query"],"properties":{
            "query":{"type":"string","description":"The search query: a few specific words"}}})
    }
    fn read_only(&self) -> bool {
        true
    }
    fn prepare(&self, args: &Args, env: &ToolEnv) -> Result<Invocation, ToolError> {
        let query = args.string("query")?.trim().to_string();
        if query.chars().count() > 400 {
            return Err(ToolError::InvalidArguments(format!(
                "the query is {} characters long; search with a few specific words (at most 400 \
                 characters)",
                query.chars().count()
            )));
        }
        if let Some(what) = env.redactor.find(&query) {
            return Err(ToolError::InvalidArguments(format!(
                "the query contains {what}; it was not sent anywhere. Never put keys, tokens or \
                 other secrets into search queries or URLs"
            )));
        }
        if let Err(why) = env.web.searcher() {
            return Err(ToolError::Failed(why.to_string()));
        }
        let env = env.clone();
        Ok(Invocation {
            targets: vec![Target::Pattern(query.clone())],
            job: Box::pin(async move {
                let searcher = env
                    .web
                    .searcher()
                    .map_err(|e| ToolError::Failed(e.into()))?;
                let hits = searcher.search(&query).await.map_err(ToolError::Failed)?;
                Ok(crate::web::search::render(
                    &query,
                    searcher.label(),
                    &hits,
                    SNIPPET_CHARS,
                ))
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::web::Document;

    fn doc(text: &str) -> Document {
        Document {
            final_url: Url::parse("https://example.com/a").unwrap(),
            title: Some("T".into()),
            text: text.into(),
            content_type: "text/html".into(),
            extracted: true,
        }
    }

    #[test]
    fn parts_end_at_paragraphs_and_say_how_to_read_on() {
        let asked = Url::parse("https://example.com/a").unwrap();
        let text: String = (0..50)
            .map(|i| format!("Paragraph {i:02} text.\n\n"))
            .collect();
        let d = doc(text.trim_end());
        let first = render_part(&asked, &d, 0, 100, 10_000).unwrap();
        assert!(
            first.starts_with("# T\n\nParagraph 00 text.\n\nParagraph 01"),
            "{first}"
        );
        let next: usize = first
            .split("\"offset\": ")
            .nth(1)
            .and_then(|t| t.split('}').next())
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(next % 20, 0, "cut after a paragraph: {first}");
        assert!(first.contains(&format!("this is characters 0–{next} of 998")));
        // Reading on from the offset given continues exactly there, without the title.
        let second = render_part(&asked, &d, next, 100, 10_000).unwrap();
        assert!(
            second.starts_with(&format!("Paragraph {:02}", next / 20)),
            "{second}"
        );
        // The last part says so.
        let last = render_part(&asked, &d, 990, 100, 10_000).unwrap();
        assert!(last.ends_with("This is the end of the page.]"), "{last}");
        let past = render_part(&asked, &d, 5000, 100, 10_000).unwrap_err();
        assert!(
            past.to_string()
                .contains("past the end of the page, which has 998 characters")
        );
    }

    #[test]
    fn parts_respect_the_byte_budget_with_wide_characters() {
        let asked = Url::parse("https://example.com/a").unwrap();
        let d = doc(&"é".repeat(5000));
        let part = render_part(&asked, &d, 0, 20_000, 1001).unwrap();
        let body = part.trim_start_matches("# T\n\n");
        let shown = body.split("\n\n[").next().unwrap();
        assert_eq!(shown.chars().count(), 500);
        assert!(part.contains("\"offset\": 500}"), "{part}");
    }

    #[test]
    fn bare_hosts_get_https() {
        assert_eq!(
            parse_url("docs.rs/serde").unwrap().as_str(),
            "https://docs.rs/serde"
        );
        assert!(parse_url("http://[::1").is_err());
    }
}
