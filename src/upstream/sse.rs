//! Server-sent events: bytes in, events out.
//!
//! Follows the WHATWG event-stream rules: lines end in LF, CRLF or CR; `data:` lines of one
//! event are joined with `\n`; one space after the colon is dropped; `:` lines are comments;
//! a blank line dispatches. "Not enough bytes yet" is `None`, never an error: a chunk may end
//! anywhere, even between the CR and LF of one line ending. At end of stream, [`SseDecoder::finish`]
//! dispatches an event whose final blank line never came (several servers omit it).

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server set one (e.g. `error`).
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseDecoder {
    buf: Vec<u8>,
    /// Start of the unread part of `buf`.
    pos: usize,
    data: String,
    has_data: bool,
    event: Option<String>,
}

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Appends bytes received from the network.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > 64 * 1024 && self.pos * 2 > self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete event, or `None` until more bytes arrive.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            let rest = &self.buf[self.pos..];
            let end = rest.iter().position(|&b| b == b'\n' || b == b'\r')?;
            let terminator_len = if rest[end] == b'\r' {
                match rest.get(end + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // A CR at the very end may be the first half of CRLF: wait.
                    None => return None,
                }
            } else {
                1
            };
            let line_start = self.pos;
            self.pos += end + terminator_len;
            if let Some(ev) = self.line(line_start, line_start + end) {
                return Some(ev);
            }
        }
    }

    /// Call once the stream has ended: the last line and event, even without terminators.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if let Some(ev) = self.next_event() {
            return Some(ev);
        }
        let rest_start = self.pos;
        let mut rest_end = self.buf.len();
        if self.buf[rest_start..rest_end].ends_with(b"\r") {
            rest_end -= 1;
        }
        self.pos = self.buf.len();
        if rest_end > rest_start
            && let Some(ev) = self.line(rest_start, rest_end)
        {
            return Some(ev);
        }
        self.dispatch()
    }

    /// Handles one line (without its terminator); returns an event on a blank line.
    fn line(&mut self, start: usize, end: usize) -> Option<SseEvent> {
        if start == end {
            return self.dispatch();
        }
        let line = &self.buf[start..end];
        if line[0] == b':' {
            return None;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&String::from_utf8_lossy(value));
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // id, retry and unknown fields carry nothing we use.
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new();
        let mut out = Vec::new();
        for c in chunks {
            d.push(c);
            while let Some(ev) = d.next_event() {
                out.push(ev);
            }
        }
        while let Some(ev) = d.finish() {
            out.push(ev);
        }
        out
    }

    fn data(s: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: s.into(),
        }
    }

    /// The same events come out wherever the stream is split, at one or two points.
    #[track_caller]
    fn check(stream: &str, expected: &[SseEvent]) {
        let bytes = stream.as_bytes();
        assert_eq!(decode_all(&[bytes]), expected, "unsplit");
        for i in 0..=bytes.len() {
            assert_eq!(
                decode_all(&[&bytes[..i], &bytes[i..]]),
                expected,
                "split at {i}"
            );
        }
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let got = decode_all(&[&bytes[..i], &bytes[i..j], &bytes[j..]]);
                assert_eq!(got, expected, "split at {i} and {j}");
            }
        }
        // One byte at a time.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(decode_all(&singles), expected, "byte by byte");
    }

    #[test]
    fn plain_events() {
        check("data: a\n\ndata: b\n\n", &[data("a"), data("b")]);
    }

    #[test]
    fn line_endings_crlf_and_cr() {
        check(
            "data: a\r\n\r\ndata: b\r\rdata: c\n\n",
            &[data("a"), data("b"), data("c")],
        );
    }

    #[test]
    fn comments_and_unknown_fields_are_skipped() {
        check(
            ": keep-alive\n\nid: 1\nretry: 10\ndata: x\n\n: ping\n",
            &[data("x")],
        );
    }

    #[test]
    fn multiline_data_and_no_space() {
        check("data:{\"a\":\ndata: 1}\n\n", &[data("{\"a\":\n1}")]);
    }

    #[test]
    fn event_field_is_kept() {
        check(
            "event: error\ndata: {\"error\":{}}\n\n",
            &[SseEvent {
                event: Some("error".into()),
                data: "{\"error\":{}}".into(),
            }],
        );
    }

    #[test]
    fn missing_final_blank_line_still_dispatches() {
        check("data: a\n\ndata: [DONE]", &[data("a"), data("[DONE]")]);
        check("data: a\n\ndata: [DONE]\n", &[data("a"), data("[DONE]")]);
        check("data: a\r", &[data("a")]);
    }

    #[test]
    fn utf8_split_inside_a_character() {
        check("data: héllo wörld\n\n", &[data("héllo wörld")]);
    }

    #[test]
    fn empty_data_line_is_an_event() {
        check("data:\n\n", &[data("")]);
        check("event: x\n\n", &[]);
    }
}
