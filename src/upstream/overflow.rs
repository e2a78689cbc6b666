//! Whether an upstream error says the request did not fit the model's context window, and
//! the window size such a message names.
//!
//! Servers word it differently; these are the phrasings seen. Recognising an overflow is the
//! upstream's business ([`super::UpstreamError::is_context_overflow`]); what to do about one
//! (prune and retry once) is the agent's.

/// Whether an upstream error says the request did not fit the context window.
pub fn is_overflow(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "context window",
        "context size",
        "maximum context",
        "too many tokens",
        "prompt is too long",
        "input is too long",
        "exceeds the available context",
        "exceed_context_size",
        "reduce the length",
        "n_ctx",
        "token limit",
    ]
    .iter()
    .any(|p| m.contains(p))
}

/// The window an overflow message names ("maximum context length is 4096 tokens",
/// "available context size (4096 tokens)").
pub fn window_in_message(message: &str) -> Option<u64> {
    let m = message.to_ascii_lowercase();
    for marker in [
        "maximum context length is",
        "context size (",
        "context length of",
        "context window of",
        "n_ctx",
    ] {
        if let Some(at) = m.find(marker) {
            let rest = &m[at + marker.len()..];
            let digits: String = rest
                .trim_start_matches(|c: char| !c.is_ascii_digit())
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == ',')
                .filter(char::is_ascii_digit)
                .collect();
            if let Ok(n) = digits.parse::<u64>()
                && n >= 256
            {
                return Some(n);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overflow_messages_are_recognised_and_their_window_read() {
        for (msg, window) in [
            (
                "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
                Some(4096),
            ),
            (
                "the request exceeds the available context size (8,192 tokens), try increasing it",
                Some(8192),
            ),
            ("prompt is too long: 210000 tokens > 200000 maximum", None),
        ] {
            assert!(is_overflow(msg), "{msg}");
            assert_eq!(window_in_message(msg), window, "{msg}");
        }
        assert!(!is_overflow("invalid api key"));
    }
}
