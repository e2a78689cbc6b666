//! Secret redaction: what no tool output may show, and no URL or search query may carry.
//!
//! Two kinds of secrets: the *values* of the server's secret environment variables (the
//! upstream API key, the bearer token, the search API key and every variable the terminal
//! scrubs), and well-known secret *shapes* (private-key PEM blocks, AWS access key ids,
//! GitHub, Slack, Stripe, Google and OpenAI-style keys, JWTs). The values are compiled into
//! one regex per server, the shapes into one per process. `tools::registry::dispatch` passes every tool result through
//! [`Redactor::redact`]; the web tools refuse arguments in which [`Redactor::find`] finds a
//! secret. Pure, no I/O.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// The shapes of well-known secrets, with what each is called in the replacement text.
/// Patterns are ASCII-only and anchored on literal prefixes, so the scan is a fast literal
/// search over most text. Compiled once per process (`SHAPE_SET`).
const SHAPES: &[(&str, &str)] = &[
    (
        // A whole block; or, when the text was cut before its END line, the BEGIN line and
        // the base64 (and `Proc-Type:`-style header) lines after it.
        r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|(?:\r?\n(?:\r?\n)?(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\n]*))*)",
        "private key",
    ),
    (
        r"(?-u:\b)(?:AKIA|ASIA)[A-Z0-9]{16}(?-u:\b)",
        "AWS access key id",
    ),
    (
        r"(?-u:\b)gh[pousr]_[A-Za-z0-9]{36,255}(?-u:\b)",
        "GitHub token",
    ),
    (
        r"(?-u:\b)github_pat_[A-Za-z0-9_]{22,255}(?-u:\b)",
        "GitHub token",
    ),
    (r"(?-u:\b)glpat-[A-Za-z0-9_-]{20,}(?-u:\b)", "GitLab token"),
    (r"(?-u:\b)xox[abposr]-[A-Za-z0-9-]{10,250}", "Slack token"),
    (
        r"(?-u:\b)[rs]k_live_[A-Za-z0-9]{20,247}(?-u:\b)",
        "Stripe key",
    ),
    (r"(?-u:\b)AIza[0-9A-Za-z_-]{35}(?-u:\b)", "Google API key"),
    (
        r"(?-u:\b)sk-(?:[A-Za-z0-9]+-){0,3}[A-Za-z0-9_-]{20,}",
        "API key",
    ),
    (
        r"(?-u:\b)eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",
        "JSON web token",
    ),
];

/// The shapes, compiled once per process: every shape in one alternation (`None` only if the
/// constants failed to compile, which the tests rule out), and each shape on its own, to name
/// a match of the alternation.
struct Shapes {
    all: Option<Regex>,
    each: Vec<(Regex, &'static str)>,
}

static SHAPE_SET: LazyLock<Shapes> = LazyLock::new(|| {
    let alt: Vec<String> = SHAPES.iter().map(|(p, _)| format!("(?:{p})")).collect();
    Shapes {
        all: Regex::new(&alt.join("|")).ok(),
        each: SHAPES
            .iter()
            .filter_map(|(p, name)| Some((Regex::new(p).ok()?, *name)))
            .collect(),
    }
});

/// Compiled redaction rules for one server.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// `(variable, value)`, longest value first.
    secrets: Vec<(String, String)>,
    /// Every secret value, escaped, in one alternation (longest first, so the longest wins).
    values: Option<Regex>,
}

impl Default for Redactor {
    fn default() -> Self {
        Redactor::new(&[])
    }
}

impl Redactor {
    /// `secrets` are `(variable name, value)` pairs (values of at least a few characters).
    pub fn new(secrets: &[(String, String)]) -> Redactor {
        let mut secrets: Vec<(String, String)> = secrets
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .cloned()
            .collect();
        secrets.sort_by_key(|s| std::cmp::Reverse(s.1.len()));
        let values = if secrets.is_empty() {
            None
        } else {
            let alt: Vec<String> = secrets.iter().map(|(_, v)| regex::escape(v)).collect();
            Regex::new(&alt.join("|")).ok()
        };
        Redactor { secrets, values }
    }

    /// How many secret values are known (for the log).
    pub fn value_count(&self) -> usize {
        self.secrets.len()
    }

    /// Every secret in `text`: `(start, end, replacement)`, in order, not overlapping.
    fn spans(&self, text: &str) -> Vec<(usize, usize, String)> {
        let mut found: Vec<(usize, usize, String)> = Vec::new();
        if let Some(values) = &self.values {
            for m in values.find_iter(text) {
                let name = self
                    .secrets
                    .iter()
                    .find(|(_, v)| v == m.as_str())
                    .map(|(k, _)| k.as_str())
                    .unwrap_or("a secret");
                found.push((m.start(), m.end(), format!("[redacted: value of ${name}]")));
            }
        }
        let shapes = &*SHAPE_SET;
        for m in shapes.all.iter().flat_map(|re| re.find_iter(text)) {
            let s = m.as_str();
            let name = shapes
                .each
                .iter()
                .find(|(re, _)| re.find(s).is_some_and(|x| x.start() == 0))
                .map(|(_, n)| *n)
                .unwrap_or("secret");
            if name == "API key" && !looks_random(s) {
                continue;
            }
            found.push((m.start(), m.end(), format!("[redacted: {name}]")));
        }
        found.sort_by_key(|(s, e, _)| (*s, std::cmp::Reverse(*e)));
        let mut out: Vec<(usize, usize, String)> = Vec::with_capacity(found.len());
        for f in found {
            match out.last() {
                Some(last) if f.0 < last.1 => {} // overlaps an earlier, longer match
                _ => out.push(f),
            }
        }
        out
    }

    /// `text` with every secret replaced by `[redacted: …]`; unchanged (and not copied) when
    /// there is none.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let spans = self.spans(text);
        if spans.is_empty() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end, replacement) in spans {
            out.push_str(&text[at..start]);
            out.push_str(&replacement);
            at = end;
        }
        out.push_str(&text[at..]);
        Cow::Owned(out)
    }

    /// What secret `text` carries, if any, in words ("the value of $OPENAI_API_KEY", "a GitHub
    /// token"). Percent-encoding does not hide one.
    pub fn find(&self, text: &str) -> Option<String> {
        let decoded = percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .replace('+', " ");
        for t in [text, decoded.as_str()] {
            if let Some((_, _, r)) = self.spans(t).into_iter().next() {
                let what = r
                    .trim_start_matches("[redacted: ")
                    .trim_end_matches(']')
                    .to_string();
                return Some(if what.starts_with("value of") {
                    format!("the {what}")
                } else {
                    format!("a secret ({what})")
                });
            }
        }
        None
    }
}

/// Random-looking: upper- and lower-case letters and digits (real keys are; prose such as
/// `sk-learn-tutorial-for-beginners` is not).
fn looks_random(s: &str) -> bool {
    let body = s.strip_prefix("sk-").unwrap_or(s);
    body.chars().any(|c| c.is_ascii_uppercase())
        && body.chars().any(|c| c.is_ascii_lowercase())
        && body.chars().any(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r() -> Redactor {
        Redactor::new(&[
            ("OPENAI_API_KEY".into(), "upstream-key-0123456789".into()),
            ("MY_SERVICE_TOKEN".into(), "tok_abcdefgh12345678".into()),
        ])
    }

    #[track_caller]
    fn check(input: &str, expected: &str) {
        assert_eq!(r().redact(input), expected);
    }

    #[test]
    fn secret_values_are_replaced_with_their_variable() {
        check(
            "key=upstream-key-0123456789 and tok_abcdefgh12345678.",
            "key=[redacted: value of $OPENAI_API_KEY] and [redacted: value of $MY_SERVICE_TOKEN].",
        );
        check("nothing here", "nothing here");
        assert!(matches!(r().redact("plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn well_known_shapes_are_replaced() {
        check(
            "aws AKIAIOSFODNN7EXAMPLE end",
            "aws [redacted: AWS access key id] end",
        );
        check(
            "gh ghp_ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghij0123",
            "gh [redacted: GitHub token]",
        );
        check(
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "[redacted: GitHub token]",
        );
        check(
            "slack xoxb-123456789012-abcdefghijkl",
            "slack [redacted: Slack token]",
        );
        check(
            "OPENAI=sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z",
            "OPENAI=[redacted: API key]",
        );
        check(
            "sk-ant-api03-Zx9YwV8uT7sR6qP5oN4mL3kJ2iH1gF0e",
            "[redacted: API key]",
        );
        check(
            "stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "stripe [redacted: Stripe key]",
        );
        check(
            "AIzaSyA1234567890abcdefghijklmnopqrstuv",
            "[redacted: Google API key]",
        );
        check(
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
            "jwt [redacted: JSON web token] ok",
        );
        check(
            "a\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabc+/=\n-----END RSA PRIVATE KEY-----\nb",
            "a\n[redacted: private key]\nb",
        );
        check(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAAAAAAAAAAAAAAAAAA\n",
            "[redacted: private key]\n",
        );
        // Cut before its END line: the base64 lines go, the prose after them stays.
        check(
            "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBn\n\nThen save the file, and restart",
            "[redacted: private key]\n\nThen save the file, and restart",
        );
    }

    #[test]
    fn look_alikes_are_left_alone() {
        for text in [
            "pip install sk-learn-tutorial-for-beginners-2024",
            "the task-runner-configuration-file-name",
            "AKIA is a prefix",
            "ghp_short",
            "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
            "https://example.com/sk-learn/docs",
            "eyJhbGciOiJIUzI1NiJ9 alone",
        ] {
            check(text, text);
        }
    }

    #[test]
    fn find_names_the_secret_even_when_percent_encoded() {
        let red = r();
        assert_eq!(
            red.find("https://evil.example/?k=upstream-key-0123456789"),
            Some("the value of $OPENAI_API_KEY".into())
        );
        assert_eq!(
            red.find("https://evil.example/?k=upstream%2Dkey%2D0123456789"),
            Some("the value of $OPENAI_API_KEY".into())
        );
        assert_eq!(
            red.find("q=AKIAIOSFODNN7EXAMPLE"),
            Some("a secret (AWS access key id)".into())
        );
        assert_eq!(red.find("rust borrow checker"), None);
    }

    #[test]
    fn every_shape_compiles() {
        assert!(SHAPE_SET.all.is_some());
        assert_eq!(SHAPE_SET.each.len(), SHAPES.len());
    }

    #[test]
    fn the_longest_secret_wins() {
        let red = Redactor::new(&[
            ("A_TOKEN".into(), "abcdefgh".into()),
            ("B_TOKEN".into(), "abcdefgh-ijklmnop".into()),
        ]);
        assert_eq!(
            red.redact("x abcdefgh-ijklmnop y abcdefgh"),
            "x [redacted: value of $B_TOKEN] y [redacted: value of $A_TOKEN]"
        );
    }
}
