//! Words of code and of questions about code, for the index: identifiers are kept whole
//! (`parseconfig`) and split into their parts (`parse`, `config`) at `_`, `-`, case changes
//! and digit boundaries, so `parseConfig`, `parse_config` and "parse the config" meet.
//! Wrapped as a tantivy tokenizer that also drops stop words and stems English words (with a
//! per-thread cache: code repeats its words, and stemming was the largest cost of indexing).

use std::cell::RefCell;
use std::collections::HashMap;

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Longest word indexed (longer ones are usually data, not names).
const MAX_WORD: usize = 64;

/// The parts of one identifier, lower case, in order (without the whole).
pub fn split_identifier(word: &str) -> Vec<String> {
    if word.is_ascii() {
        return split_ascii(word.as_bytes());
    }
    let chars: Vec<char> = word.chars().collect();
    let mut parts = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                parts.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|j| chars.get(j)) {
            let next = chars.get(i + 1).copied();
            let boundary = (prev.is_lowercase() && c.is_uppercase())
                // `HTTPServer`: the `S` starts a word when a lower-case letter follows.
                || (prev.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase))
                || (prev.is_alphabetic() && c.is_ascii_digit())
                || (prev.is_ascii_digit() && c.is_alphabetic());
            if boundary && !cur.is_empty() {
                parts.push(std::mem::take(&mut cur));
            }
        }
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        parts.push(cur);
    }
    parts
}

/// [`split_identifier`] for ASCII words, on bytes.
fn split_ascii(w: &[u8]) -> Vec<String> {
    let mut parts = Vec::new();
    let mut start: Option<usize> = None;
    let close = |parts: &mut Vec<String>, a: usize, b: usize| {
        if b > a {
            parts.push(String::from_utf8_lossy(&w[a..b]).to_ascii_lowercase());
        }
    };
    for i in 0..w.len() {
        let c = w[i];
        if !c.is_ascii_alphanumeric() {
            if let Some(a) = start.take() {
                close(&mut parts, a, i);
            }
            continue;
        }
        match start {
            None => start = Some(i),
            Some(a) => {
                let prev = w[i - 1];
                let next = w.get(i + 1).copied();
                let boundary = (prev.is_ascii_lowercase() && c.is_ascii_uppercase())
                    || (prev.is_ascii_uppercase()
                        && c.is_ascii_uppercase()
                        && next.is_some_and(|n| n.is_ascii_lowercase()))
                    || (prev.is_ascii_alphabetic() && c.is_ascii_digit())
                    || (prev.is_ascii_digit() && c.is_ascii_alphabetic());
                if boundary {
                    close(&mut parts, a, i);
                    start = Some(i);
                }
            }
        }
    }
    if let Some(a) = start {
        close(&mut parts, a, w.len());
    }
    parts
}

/// Every indexed word of `text` with its byte offsets: each identifier whole (lower case,
/// without `_`/`-`), then its parts when there is more than one.
pub fn words(text: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = text[i..].chars().next().unwrap_or(' ');
        if !(c.is_alphanumeric() || c == '_') {
            i += c.len_utf8();
            continue;
        }
        let start = i;
        while i < bytes.len() {
            let c = text[i..].chars().next().unwrap_or(' ');
            if c.is_alphanumeric() || c == '_' {
                i += c.len_utf8();
            } else {
                break;
            }
        }
        let word = &text[start..i];
        if word.len() > MAX_WORD {
            continue;
        }
        let parts = split_identifier(word);
        let whole: String = parts.concat();
        if whole.is_empty() {
            continue;
        }
        out.push((whole.clone(), start, i));
        if parts.len() > 1 {
            for p in parts {
                if p != whole {
                    out.push((p, start, i));
                }
            }
        }
    }
    out
}

thread_local! {
    static STEMMER: rust_stemmers::Stemmer =
        rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English);
    static STEMS: RefCell<HashMap<String, String>> = RefCell::new(HashMap::new());
}

/// Most words whose stems a thread remembers.
const MAX_CACHED_STEMS: usize = 200_000;

/// The English stem of a lower-case word, or `None` for a stop word.
pub fn stem(word: &str) -> Option<String> {
    if QUESTION_WORDS.contains(&word) {
        return None;
    }
    if let Some(s) = STEMS.with(|c| c.borrow().get(word).cloned()) {
        return Some(s);
    }
    let s = STEMMER.with(|st| st.stem(word).into_owned());
    STEMS.with(|c| {
        let mut c = c.borrow_mut();
        if c.len() >= MAX_CACHED_STEMS {
            c.clear();
        }
        c.insert(word.to_string(), s.clone());
    });
    Some(s)
}

/// The tantivy tokenizer over [`words`], with stop words dropped and words stemmed.
#[derive(Clone, Default)]
pub struct CodeTokenizer;

pub struct CodeTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream {
        let tokens = words(text)
            .into_iter()
            .filter_map(|(w, a, b)| stem(&w).map(|s| (s, a, b)))
            .enumerate()
            .map(|(position, (text, offset_from, offset_to))| Token {
                offset_from,
                offset_to,
                position,
                text,
                position_length: 1,
            })
            .collect();
        CodeTokenStream { tokens, next: 0 }
    }
}

impl TokenStream for CodeTokenStream {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }

    fn token(&self) -> &Token {
        &self.tokens[self
            .next
            .saturating_sub(1)
            .min(self.tokens.len().saturating_sub(1))]
    }

    fn token_mut(&mut self) -> &mut Token {
        let i = self
            .next
            .saturating_sub(1)
            .min(self.tokens.len().saturating_sub(1));
        &mut self.tokens[i]
    }
}

/// Words of questions that say nothing about the code (added to Lucene's English stop words).
pub const QUESTION_WORDS: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with", "where", "what", "which", "who", "how", "why",
    "when", "does", "do", "did", "done", "i", "we", "you", "me", "my", "our", "your", "can",
    "could", "should", "would", "find", "show", "code", "get", "gets", "s",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn split(word: &str, expected: &[&str]) {
        assert_eq!(split_identifier(word), expected, "{word}");
    }

    #[test]
    fn splits_identifiers() {
        split("parseConfig", &["parse", "config"]);
        split("parse_config", &["parse", "config"]);
        split("HTTPServer", &["http", "server"]);
        split("getHTTPResponseCode", &["get", "http", "response", "code"]);
        split("utf8Decode", &["utf", "8", "decode"]);
        split("kebab-case-name", &["kebab", "case", "name"]);
        split("__init__", &["init"]);
        split("x", &["x"]);
        split("ÜberName", &["über", "name"]);
    }

    #[test]
    fn words_keep_the_whole_and_the_parts() {
        let w: Vec<String> = words("fn parse_config(x: &Path) -> HTTPServer")
            .into_iter()
            .map(|(t, _, _)| t)
            .collect();
        assert_eq!(
            w,
            [
                "fn",
                "parseconfig",
                "parse",
                "config",
                "x",
                "path",
                "httpserver",
                "http",
                "server"
            ]
        );
        let mut t = CodeTokenizer;
        let mut s = t.token_stream("fooBar baz");
        let mut got = Vec::new();
        while s.advance() {
            got.push(s.token().text.clone());
        }
        assert_eq!(got, ["foobar", "foo", "bar", "baz"]);
        // Stop words are dropped, words stemmed.
        let mut s = t.token_stream("Where is the parsing of configs");
        let mut got = Vec::new();
        while s.advance() {
            got.push(s.token().text.clone());
        }
        assert_eq!(got, ["pars", "config"]);
    }
}
