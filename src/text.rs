//! Small text helpers used across the crate: cutting at char boundaries, previews, number
//! grouping, binary detection, the text of a chat message's content, error chains, and the
//! `*` wildcard of variable-name lists.
//!
//! A leaf: it depends on no other module of the crate, so every module may use it.

use serde_json::Value;

/// Bytes sniffed for binary content (git uses the same amount).
pub const SNIFF_BYTES: usize = 8000;

/// The largest index `<= i` that is a char boundary of `s`.
pub fn floor_char_boundary(s: &str, i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    let mut i = i;
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// At most `max` bytes of `s`, with an ellipsis when cut.
pub fn preview(s: &str, max: usize) -> String {
    if s.len() <= max {
        s.to_string()
    } else {
        format!("{}…", &s[..floor_char_boundary(s, max)])
    }
}

/// 1234567 → "1,234,567".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `n` with digit grouping and the noun in singular or plural: `1 file`, `2,048 files`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{} {noun}s", group(n))
    }
}

/// If `head` looks binary, a short description of what it is.
pub fn binary_kind(head: &[u8]) -> Option<&'static str> {
    const MAGIC: &[(&[u8], &str)] = &[
        (b"\x89PNG", "PNG image"),
        (b"\xff\xd8\xff", "JPEG image"),
        (b"GIF8", "GIF image"),
        (b"%PDF", "PDF document"),
        (b"PK\x03\x04", "ZIP archive"),
        (b"\x1f\x8b", "gzip data"),
        (b"\x7fELF", "ELF executable"),
        (b"\0asm", "WebAssembly module"),
        (b"SQLite format 3\0", "SQLite database"),
        (b"\x28\xb5\x2f\xfd", "zstd data"),
    ];
    for (magic, kind) in MAGIC {
        if head.starts_with(magic) {
            return Some(kind);
        }
    }
    if head[..head.len().min(SNIFF_BYTES)].contains(&0) {
        return Some("contains NUL bytes");
    }
    None
}

/// A chat message's `content` as text: the string, or the text parts of an array joined
/// with `sep` (image and other parts are left out).
pub fn content_text(content: Option<&Value>, sep: &str) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(sep),
        _ => String::new(),
    }
}

/// An error and its sources, as one line: `a: b: c`, leaving out a source whose text an
/// earlier one already contains.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let t = s.to_string();
        if !parts.iter().any(|p| p.contains(&t)) {
            parts.push(t);
        }
        source = s.source();
    }
    parts.join(": ")
}

/// `*` matches any run of characters; everything else literally (for variable names).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(p) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            match rest.find(p) {
                Some(k) => rest = &rest[k + p.len()..],
                None => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn groups_digits() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(count(1, "file"), "1 file");
        assert_eq!(count(0, "file"), "0 files");
        assert_eq!(count(2048, "line"), "2,048 lines");
        assert_eq!(group(1234567), "1,234,567");
    }

    #[test]
    fn recognises_binary_heads() {
        assert_eq!(binary_kind(b"\x89PNG\r\n"), Some("PNG image"));
        assert_eq!(binary_kind(b"abc\0def"), Some("contains NUL bytes"));
        assert_eq!(binary_kind("héllo".as_bytes()), None);
    }

    #[test]
    fn cuts_at_char_boundaries() {
        assert_eq!(floor_char_boundary("aé", 2), 1);
        assert_eq!(floor_char_boundary("aé", 9), 3);
        assert_eq!(preview("héllo", 2), "h…");
        assert_eq!(preview("hello", 5), "hello");
    }

    #[test]
    fn content_is_its_string_or_its_text_parts() {
        let parts = json!([{"type": "text", "text": "a"}, {"type": "image_url"}, {"text": "b"}]);
        assert_eq!(content_text(Some(&parts), "\n"), "a\nb");
        assert_eq!(content_text(Some(&json!("x")), " "), "x");
        assert_eq!(content_text(None, " "), "");
        assert_eq!(content_text(Some(&json!(null)), " "), "");
    }

    #[test]
    fn error_chains_leave_out_repeated_sources() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "outer: inner",
            Some(Box::new(E("inner", Some(Box::new(E("root", None)))))),
        );
        assert_eq!(error_chain(&e), "outer: inner: root");
    }

    #[test]
    fn variable_globs() {
        assert!(glob_match("*_API_KEY", "OPENAI_API_KEY"));
        assert!(glob_match("*PASSWORD*", "DB_PASSWORD_X"));
        assert!(glob_match("AWS_SESSION_TOKEN", "AWS_SESSION_TOKEN"));
        assert!(!glob_match("*_TOKEN", "TOKENS"));
        assert!(!glob_match("*_API_KEY", "PATH"));
    }
}
