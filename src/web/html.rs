//! HTML to Markdown: the main content of a page, with its links, without the page's chrome.
//!
//! `dom_smoothie` (a port of Mozilla's Readability, the extractor Continue uses) finds the
//! article and renders it as Markdown (through `dom_query`'s serializer: headings, lists,
//! tables, code blocks with their language, links and images with absolute URLs). When it
//! finds no article (an index page, a form, a tiny page), the whole body is converted
//! instead, minus scripts, styles, navigation, headers, footers and forms. Pure functions, no
//! I/O.

use dom_query::Document;
use url::Url;

/// A page as Markdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Markdown {
    pub title: Option<String>,
    pub text: String,
    /// Whether Readability found the main content (otherwise the whole body was converted).
    pub extracted: bool,
}

/// An article shorter than this (in characters of Markdown) is not trusted to be the page's
/// main content; the whole body is converted instead when that says more.
const MIN_ARTICLE_CHARS: usize = 140;

/// Elements that are never content.
const DROP: &str = "script, style, noscript, template, iframe, object, embed, svg, canvas, \
                    nav, header, footer, aside, form, button, select, input, textarea, dialog, \
                    [role=navigation], [role=banner], [role=contentinfo], [aria-hidden=true], \
                    [hidden]";

/// Converts an HTML page fetched from `url` to Markdown.
pub fn to_markdown(html: &str, url: &Url) -> Markdown {
    let article = extract(html, url);
    let fallback = || whole_body(html, url);
    match article {
        Some((title, text)) if text.chars().count() >= MIN_ARTICLE_CHARS => Markdown {
            title,
            text,
            extracted: true,
        },
        Some((title, text)) => {
            // Readability found something small; the body may say more (a short page).
            let body = fallback();
            if body.text.chars().count() > text.chars().count() {
                Markdown {
                    title: title.or(body.title),
                    ..body
                }
            } else {
                Markdown {
                    title,
                    text,
                    extracted: true,
                }
            }
        }
        None => fallback(),
    }
}

/// Readability's article as Markdown, if it finds one.
fn extract(html: &str, url: &Url) -> Option<(Option<String>, String)> {
    let cfg = dom_smoothie::Config {
        text_mode: dom_smoothie::TextMode::Markdown,
        // `language-rust` and friends tell the Markdown serializer a code block's language.
        keep_classes: true,
        ..dom_smoothie::Config::default()
    };
    let mut r = dom_smoothie::Readability::new(html, Some(url.as_str()), Some(cfg)).ok()?;
    let article = r.parse().ok()?;
    let text = tidy(&article.text_content);
    if text.is_empty() {
        return None;
    }
    let title = Some(article.title.trim().to_string()).filter(|t| !t.is_empty());
    Some((title, text))
}

/// The whole body without its chrome, links made absolute.
fn whole_body(html: &str, url: &Url) -> Markdown {
    let doc = Document::from(html);
    let title = doc
        .select("title")
        .iter()
        .next()
        .map(|t| t.text().trim().to_string())
        .filter(|t| !t.is_empty());
    doc.select(DROP).remove();
    let base = doc
        .select("base[href]")
        .iter()
        .next()
        .and_then(|b| b.attr("href"))
        .and_then(|h| url.join(&h).ok())
        .unwrap_or_else(|| url.clone());
    for (selector, attr) in [("a[href]", "href"), ("img[src]", "src")] {
        for node in doc.select(selector).iter() {
            if let Some(v) = node.attr(attr)
                && let Ok(abs) = base.join(v.trim())
            {
                node.set_attr(attr, abs.as_str());
            }
        }
    }
    let body = doc.select("body");
    let text = match body.nodes().first() {
        Some(node) => node.md(None).to_string(),
        None => doc.root().md(None).to_string(),
    };
    Markdown {
        title,
        text: tidy(&text),
        extracted: false,
    }
}

/// Trims trailing spaces and collapses runs of blank lines (outside code blocks it is all
/// noise).
fn tidy(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut blank = 0;
    let mut in_fence = false;
    for line in md.lines() {
        let t = line.trim_end();
        if t.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        if t.is_empty() && !in_fence {
            blank += 1;
            continue;
        }
        if !out.is_empty() && blank > 0 {
            out.push('\n');
        }
        blank = 0;
        // Keep Markdown hard line breaks (two trailing spaces) as they were.
        if line.ends_with("  ") && !in_fence && !t.is_empty() {
            out.push_str(t);
            out.push_str("  ");
        } else if in_fence {
            out.push_str(line);
        } else {
            out.push_str(t);
        }
        out.push('\n');
    }
    out.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url() -> Url {
        Url::parse("https://example.com/docs/guide/").unwrap()
    }

    #[test]
    fn scripts_styles_and_nav_are_dropped_and_links_made_absolute() {
        let html = r#"<html><head><title>T</title><style>.x{color:red}</style></head><body>
            <nav><a href="/">Home</a> <a href="/about">About</a></nav>
            <script>var secret = 1;</script>
            <p>See <a href="../api/">the API</a> and <a href="https://other.example/x">x</a>.</p>
            <footer>Copyright</footer></body></html>"#;
        let md = whole_body(html, &url());
        assert_eq!(md.title.as_deref(), Some("T"));
        assert!(
            md.text.contains("[the API](https://example.com/docs/api/)"),
            "{}",
            md.text
        );
        assert!(md.text.contains("(https://other.example/x)"), "{}", md.text);
        for gone in ["secret", "color:red", "Home", "About", "Copyright"] {
            assert!(!md.text.contains(gone), "{gone} in {}", md.text);
        }
    }

    #[test]
    fn a_tiny_page_falls_back_to_the_whole_body() {
        let md = to_markdown("<p>Just <b>one</b> line.</p>", &url());
        assert_eq!(md.text, "Just **one** line.");
    }

    #[test]
    fn tidy_collapses_blank_runs_but_not_inside_code() {
        assert_eq!(tidy("a  \n\n\n\nb   \n"), "a  \n\nb");
        assert_eq!(tidy("```\nx\n\n\ny\n```"), "```\nx\n\n\ny\n```");
    }
}
