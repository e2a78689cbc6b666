//! Folds the upstream's streamed chunks into one assistant message, tolerating the quirks of
//! real servers (DESIGN.md section 5).
//!
//! Tool-call deltas are matched to calls by `id` when they carry a non-empty one, else by
//! `index`, else to the most recent call, so that a missing `index`, an `index` that is always
//! 0 or starts at 1, and an `id` sent in every delta or only the first all come out right.
//! Names repeated in every delta are not doubled; arguments may arrive split anywhere, whole,
//! as a JSON object instead of a string, or not at all (`"{}"`). Empty ids are replaced by
//! invented unique ones. The presence of tool calls decides the round, whatever
//! `finish_reason` says. Usage-only chunks, chunks with empty `choices`, reasoning fields and
//! an `error` object in the middle of the stream are all handled; a stream that ends with
//! neither `[DONE]` nor a `finish_reason` is reported as truncated.

use serde_json::Value;

use super::UpstreamError;
use super::textcalls::TextCalls;
use crate::openai::{ToolCall, Usage};

/// Text to pass on to the client as it arrives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
}

/// One finished upstream round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Round {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    pub model: Option<String>,
}

#[derive(Debug, Default)]
struct CallAcc {
    id: Option<String>,
    index: Option<i64>,
    name: String,
    arguments: String,
    /// A `type` other than `function`.
    kind: Option<String>,
}

#[derive(Debug, Default)]
pub struct Accumulator {
    round: Round,
    calls: Vec<CallAcc>,
    saw_done: bool,
    /// Chunks that carried something (for the truncation message).
    chunks: usize,
    /// Recognises tool calls written as text (for the offered tool names).
    text_calls: TextCalls,
    flushed: bool,
}

impl Accumulator {
    pub fn new() -> Accumulator {
        Accumulator::default()
    }

    /// An accumulator that also turns tool calls written as text into real calls, for these
    /// offered tool names.
    pub fn with_tool_names(
        names: std::sync::Arc<std::collections::HashSet<String>>,
    ) -> Accumulator {
        Accumulator {
            text_calls: TextCalls::new(names),
            ..Accumulator::default()
        }
    }

    /// The stream has ended: releases text held back as a possible tool call.
    pub fn flush(&mut self, out: &mut Vec<Piece>) {
        if self.flushed {
            return;
        }
        self.flushed = true;
        let rest = self.text_calls.finish();
        if !rest.is_empty() {
            self.round.content.push_str(&rest);
            out.push(Piece::Content(rest));
        }
    }

    /// Whether `[DONE]` was seen (nothing after it matters).
    pub fn is_done(&self) -> bool {
        self.saw_done
    }

    /// Feeds one SSE event's data (or a whole non-streamed JSON body).
    pub fn push_data(
        &mut self,
        event: Option<&str>,
        data: &str,
        out: &mut Vec<Piece>,
    ) -> Result<(), UpstreamError> {
        let trimmed = data.trim();
        if trimmed.is_empty() || self.saw_done {
            return Ok(());
        }
        if trimmed == "[DONE]" {
            self.saw_done = true;
            return Ok(());
        }
        if event.is_none() && self.push_fast(trimmed, out) {
            return Ok(());
        }
        match serde_json::from_str::<Value>(trimmed) {
            Ok(v) => self.push_value(event, &v, out),
            Err(_) if trimmed.contains('\n') => {
                // Several `data:` lines without blank lines between them: one chunk each.
                for line in trimmed.lines() {
                    self.push_data(event, line, out)?;
                }
                Ok(())
            }
            Err(e) => {
                if event == Some("error") {
                    return Err(UpstreamError::InStream(trimmed.to_string()));
                }
                // A chunk that cannot be read may have carried text or a tool call: going on
                // without it would hand the client a damaged answer as if it were whole.
                Err(UpstreamError::Garbled(format!(
                    "{e}; it sent: {}",
                    preview(trimmed)
                )))
            }
        }
    }

    /// The common chunk (text, reasoning, finish, usage), parsed into borrowed typed fields
    /// without building a `Value`. Returns false, having changed nothing, for anything else
    /// (tool calls, errors, whole messages, odd shapes): the general path handles those.
    fn push_fast(&mut self, data: &str, out: &mut Vec<Piece>) -> bool {
        let Ok(c) = serde_json::from_str::<fast::Chunk<'_>>(data) else {
            return false;
        };
        if c.error.is_some() {
            return false;
        }
        let choice = match &c.choices {
            None => None,
            Some(list) if list.len() > 1 => return false,
            Some(list) => list.first(),
        };
        if let Some(ch) = choice {
            if ch.index.is_some_and(|i| i != 0) || (ch.delta.is_some() && ch.message.is_some()) {
                return false;
            }
            if let Some(d) = ch.part()
                && (d.tool_calls.is_some() || d.function_call.is_some())
            {
                return false;
            }
        }
        self.chunks += 1;
        if let Some(m) = &c.model
            && self.round.model.is_none()
            && !m.is_empty()
        {
            self.round.model = Some(m.to_string());
        }
        if let Some(u) = c.usage {
            let mut usage = Usage {
                prompt_tokens: u.prompt_tokens.unwrap_or(0),
                completion_tokens: u.completion_tokens.unwrap_or(0),
                total_tokens: u.total_tokens.unwrap_or(0),
            };
            if usage.total_tokens == 0 {
                usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
            }
            self.round.usage = Some(usage);
        }
        let Some(ch) = choice else { return true };
        if let Some(fr) = &ch.finish_reason
            && !fr.is_empty()
        {
            self.round.finish_reason = Some(fr.to_string());
        }
        let Some(d) = ch.part() else { return true };
        for r in [&d.reasoning_content, &d.reasoning].into_iter().flatten() {
            if !r.is_empty() {
                self.round.reasoning.push_str(r);
                out.push(Piece::Reasoning(r.to_string()));
            }
        }
        if let Some(text) = &d.content
            && !text.is_empty()
        {
            let shown = self.text_calls.push(text);
            if !shown.is_empty() {
                self.round.content.push_str(&shown);
                out.push(Piece::Content(shown));
            }
        }
        true
    }

    fn push_value(
        &mut self,
        event: Option<&str>,
        v: &Value,
        out: &mut Vec<Piece>,
    ) -> Result<(), UpstreamError> {
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(UpstreamError::InStream(error_message(err)));
        }
        if event == Some("error") {
            return Err(UpstreamError::InStream(error_message(v)));
        }
        self.chunks += 1;
        if let Some(m) = v.get("model").and_then(Value::as_str)
            && self.round.model.is_none()
            && !m.is_empty()
        {
            self.round.model = Some(m.to_string());
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let mut usage = Usage {
                prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
                completion_tokens: u
                    .get("completion_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                total_tokens: u.get("total_tokens").and_then(Value::as_u64).unwrap_or(0),
            };
            if usage.total_tokens == 0 {
                usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
            }
            self.round.usage = Some(usage);
        }
        let Some(choices) = v.get("choices").and_then(Value::as_array) else {
            return Ok(());
        };
        // One conversation: the choice with index 0, or the first one.
        let choice = choices
            .iter()
            .find(|c| c.get("index").and_then(Value::as_u64) == Some(0))
            .or_else(|| choices.first());
        let Some(choice) = choice else {
            return Ok(());
        };
        if let Some(fr) = choice.get("finish_reason").and_then(Value::as_str)
            && !fr.is_empty()
        {
            self.round.finish_reason = Some(fr.to_string());
        }
        // `message` is a non-streamed response (or a server that sends whole messages).
        let (delta, whole) = match (choice.get("delta"), choice.get("message")) {
            (Some(d), _) if d.is_object() => (d, false),
            (_, Some(m)) if m.is_object() => (m, true),
            _ => return Ok(()),
        };
        for key in ["reasoning_content", "reasoning"] {
            if let Some(r) = delta.get(key).and_then(Value::as_str)
                && !r.is_empty()
            {
                self.round.reasoning.push_str(r);
                out.push(Piece::Reasoning(r.to_string()));
            }
        }
        let text = crate::text::content_text(delta.get("content"), "");
        if !text.is_empty() {
            let shown = self.text_calls.push(&text);
            if !shown.is_empty() {
                self.round.content.push_str(&shown);
                out.push(Piece::Content(shown));
            }
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for c in calls {
                self.tool_call_delta(c, whole);
            }
        }
        // The legacy `function_call` field (one call, no id).
        if let Some(f) = delta.get("function_call").filter(|f| f.is_object()) {
            let c = serde_json::json!({"function": f});
            self.tool_call_delta(&c, whole);
        }
        Ok(())
    }

    fn tool_call_delta(&mut self, c: &Value, whole: bool) {
        // A call of another type (`custom`, …) is kept, so the model is told it did not run
        // rather than never hearing of it; its name and input are where that type puts them.
        let kind = c
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| *t != "function" && !t.is_empty());
        let id = c
            .get("id")
            .and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .filter(|s| !s.is_empty());
        let index = c.get("index").and_then(|v| match v {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.parse().ok(),
            _ => None,
        });
        let slot = if whole {
            None
        } else if let Some(id) = &id {
            self.calls.iter().rposition(|k| k.id.as_ref() == Some(id))
        } else if let Some(i) = index {
            self.calls.iter().rposition(|k| k.index == Some(i))
        } else if self.calls.is_empty() {
            None
        } else {
            Some(self.calls.len() - 1)
        };
        let slot = match slot {
            Some(s) => s,
            None => {
                self.calls.push(CallAcc {
                    id: id.clone(),
                    index,
                    ..CallAcc::default()
                });
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[slot];
        if call.id.is_none() {
            call.id = id;
        }
        if call.index.is_none() {
            call.index = index;
        }
        if let Some(k) = kind {
            call.kind.get_or_insert_with(|| k.to_string());
        }
        let Some(f) = c
            .get("function")
            .or_else(|| kind.and_then(|k| c.get(k)))
            .filter(|f| f.is_object())
        else {
            return;
        };
        if let Some(name) = f.get("name").and_then(Value::as_str) {
            merge_name(&mut call.name, name);
        }
        match f.get("arguments").or_else(|| f.get("input")) {
            Some(Value::String(s)) => {
                // A server that repeats the whole arguments string must not double it.
                let repeat = !call.arguments.is_empty()
                    && *s == call.arguments
                    && serde_json::from_str::<Value>(s).is_ok();
                if !repeat {
                    call.arguments.push_str(s);
                }
            }
            Some(v @ Value::Object(_)) => call.arguments = v.to_string(),
            _ => {}
        }
    }

    /// Ends the round. Errors if the stream was cut off.
    pub fn finish(mut self) -> Result<Round, UpstreamError> {
        self.flush(&mut Vec::new());
        let Accumulator {
            mut round,
            calls,
            saw_done,
            chunks,
            text_calls,
            ..
        } = self;
        if !saw_done && round.finish_reason.is_none() {
            return Err(UpstreamError::Truncated(if chunks == 0 {
                "the upstream closed the stream before sending anything".into()
            } else {
                format!(
                    "the upstream stream ended after {chunks} chunks without a finish_reason \
                     or [DONE]"
                )
            }));
        }
        round.tool_calls = calls
            .into_iter()
            .filter(|c| !c.name.is_empty() || c.kind.is_some())
            .map(|c| ToolCall {
                id: c.id.unwrap_or_else(invent_id),
                name: match (c.name.is_empty(), &c.kind) {
                    (true, Some(k)) => k.clone(),
                    _ => c.name,
                },
                arguments: if c.arguments.trim().is_empty() {
                    "{}".to_string()
                } else {
                    c.arguments
                },
                kind: c.kind,
            })
            .chain(text_calls.calls)
            .collect();
        // Ids must be unique within a round for tool messages to match their calls.
        let mut seen = std::collections::HashSet::new();
        for call in &mut round.tool_calls {
            if !seen.insert(call.id.clone()) {
                call.id = invent_id();
                seen.insert(call.id.clone());
            }
        }
        Ok(round)
    }
}

/// Borrowed, typed views of the common chunk shape (the fast path).
mod fast {
    use std::borrow::Cow;

    use serde::Deserialize;
    use serde::de::IgnoredAny;

    #[derive(Deserialize)]
    pub struct Chunk<'a> {
        #[serde(borrow, default)]
        pub choices: Option<Vec<Choice<'a>>>,
        #[serde(default)]
        pub usage: Option<Usage>,
        #[serde(borrow, default)]
        pub model: Option<Cow<'a, str>>,
        #[serde(default)]
        pub error: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    pub struct Choice<'a> {
        #[serde(default)]
        pub index: Option<u64>,
        #[serde(borrow, default)]
        pub delta: Option<Delta<'a>>,
        /// A non-streamed answer's whole message: the same fields as a delta.
        #[serde(borrow, default)]
        pub message: Option<Delta<'a>>,
        #[serde(borrow, default)]
        pub finish_reason: Option<Cow<'a, str>>,
    }

    impl<'a> Choice<'a> {
        /// What the choice carries: its delta, or a non-streamed answer's whole message, which
        /// reads the same way when it has no calls.
        pub fn part(&self) -> Option<&Delta<'a>> {
            self.delta.as_ref().or(self.message.as_ref())
        }
    }

    #[derive(Deserialize)]
    pub struct Delta<'a> {
        #[serde(borrow, default)]
        pub content: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub reasoning_content: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        pub reasoning: Option<Cow<'a, str>>,
        #[serde(default)]
        pub tool_calls: Option<IgnoredAny>,
        #[serde(default)]
        pub function_call: Option<IgnoredAny>,
    }

    #[derive(Deserialize)]
    pub struct Usage {
        #[serde(default)]
        pub prompt_tokens: Option<u64>,
        #[serde(default)]
        pub completion_tokens: Option<u64>,
        #[serde(default)]
        pub total_tokens: Option<u64>,
    }
}

fn merge_name(acc: &mut String, frag: &str) {
    if acc.is_empty() || frag.starts_with(acc.as_str()) {
        *acc = frag.to_string();
    } else if !acc.starts_with(frag) {
        acc.push_str(frag);
    }
}

/// The message of an OpenAI-style error object, or the object itself.
pub fn error_message(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| o.get("error").map(error_message))
            .unwrap_or_else(|| err.to_string()),
        other => other.to_string(),
    }
}

pub fn invent_id() -> String {
    let mut s = String::from("call_");
    for _ in 0..24 {
        s.push(fastrand::alphanumeric());
    }
    s
}

fn preview(s: &str) -> &str {
    &s[..crate::text::floor_char_boundary(s, 200)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::sse::SseDecoder;

    /// Runs a raw SSE fixture through the decoder and accumulator, split at every byte
    /// offset, and checks that every split gives the same round and the same forwarded text.
    #[track_caller]
    fn run(stream: &str) -> Result<(Round, String), String> {
        run_with(stream, &[])
    }

    #[track_caller]
    fn run_with(stream: &str, names: &[&str]) -> Result<(Round, String), String> {
        let bytes = stream.as_bytes();
        let mut results = Vec::new();
        for split in 0..=bytes.len() {
            let mut dec = SseDecoder::new();
            let mut acc = Accumulator::with_tool_names(std::sync::Arc::new(
                names.iter().map(|n| n.to_string()).collect(),
            ));
            let mut pieces = Vec::new();
            let mut res = Ok(());
            for part in [&bytes[..split], &bytes[split..]] {
                dec.push(part);
                while let Some(ev) = dec.next_event() {
                    if res.is_ok() {
                        res = acc.push_data(ev.event.as_deref(), &ev.data, &mut pieces);
                    }
                }
            }
            while let Some(ev) = dec.finish() {
                if res.is_ok() {
                    res = acc.push_data(ev.event.as_deref(), &ev.data, &mut pieces);
                }
            }
            acc.flush(&mut pieces);
            let text: String = pieces
                .iter()
                .map(|p| match p {
                    Piece::Content(s) => s.clone(),
                    Piece::Reasoning(s) => format!("<r>{s}</r>"),
                })
                .collect();
            let out = res
                .and_then(|()| acc.finish())
                .map(|mut r| {
                    // Invented ids are random: normalise them for comparison.
                    for c in &mut r.tool_calls {
                        if c.id.starts_with("call_") && c.id.len() == 29 {
                            c.id = "call_INVENTED".into();
                        }
                    }
                    (r, text)
                })
                .map_err(|e| e.to_string());
            results.push(out);
        }
        let first = results[0].clone();
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r, &first, "split at {i} differs");
        }
        first
    }

    fn call(id: &str, name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args.into(),
            kind: None,
        }
    }

    fn chunk(delta: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n")
    }

    fn finish(reason: &str) -> String {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{reason}\"}}]}}\n\n"
        )
    }

    const DONE: &str = "data: [DONE]\n\n";

    #[test]
    fn text_round_forwards_content() {
        let s = [
            chunk(r#"{"role":"assistant","content":""}"#),
            chunk(r#"{"content":"Hel"}"#),
            chunk(r#"{"content":"lo"}"#),
            finish("stop"),
            DONE.into(),
        ]
        .concat();
        let (r, text) = run(&s).unwrap();
        assert_eq!(r.content, "Hello");
        assert_eq!(text, "Hello");
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert!(r.tool_calls.is_empty());
    }

    #[test]
    fn standard_tool_call_split_arguments() {
        let s = [
            chunk(r#"{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"ls","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"dir"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"Path\":\".\"}"}}]}"#),
            finish("tool_calls"),
            DONE.into(),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(r.tool_calls, vec![call("c1", "ls", r#"{"dirPath":"."}"#)]);
    }

    #[test]
    fn index_missing_everywhere() {
        let s = [
            chunk(r#"{"tool_calls":[{"id":"a","function":{"name":"ls","arguments":"{"}}]}"#),
            chunk(r#"{"tool_calls":[{"function":{"arguments":"}"}}]}"#),
            chunk(r#"{"tool_calls":[{"id":"b","function":{"name":"read_file","arguments":"{\"filepath\":"}}]}"#),
            chunk(r#"{"tool_calls":[{"function":{"arguments":"\"x\"}"}}]}"#),
            finish("tool_calls"),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(
            r.tool_calls,
            vec![
                call("a", "ls", "{}"),
                call("b", "read_file", r#"{"filepath":"x"}"#)
            ]
        );
    }

    #[test]
    fn index_always_zero_with_distinct_ids() {
        let s = [
            chunk(r#"{"tool_calls":[{"index":0,"id":"a","function":{"name":"ls","arguments":"{}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"id":"b","function":{"name":"view_diff","arguments":""}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}"#),
            finish("tool_calls"),
            DONE.into(),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(
            r.tool_calls,
            vec![call("a", "ls", "{}"), call("b", "view_diff", "{}")]
        );
    }

    #[test]
    fn index_starting_at_one_and_interleaved() {
        let s = [
            chunk(
                r#"{"tool_calls":[{"index":1,"id":"a","function":{"name":"ls","arguments":""}}]}"#,
            ),
            chunk(
                r#"{"tool_calls":[{"index":2,"id":"b","function":{"name":"ls","arguments":""}}]}"#,
            ),
            chunk(r#"{"tool_calls":[{"index":1,"function":{"arguments":"{\"dirPath\":\"a\"}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":2,"function":{"arguments":"{\"dirPath\":\"b\"}"}}]}"#),
            finish("tool_calls"),
            DONE.into(),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(
            r.tool_calls,
            vec![
                call("a", "ls", r#"{"dirPath":"a"}"#),
                call("b", "ls", r#"{"dirPath":"b"}"#)
            ]
        );
    }

    #[test]
    fn id_and_name_repeated_in_every_delta() {
        let s = [
            chunk(r#"{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"grep_search","arguments":"{\"query\":"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"grep_search","arguments":"\"fn main\"}"}}]}"#),
            finish("tool_calls"),
            DONE.into(),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(
            r.tool_calls,
            vec![call("a", "grep_search", r#"{"query":"fn main"}"#)]
        );
    }

    #[test]
    fn empty_ids_are_invented_and_unique() {
        let s = [
            chunk(
                r#"{"tool_calls":[{"index":0,"id":"","function":{"name":"ls","arguments":"{}"}}]}"#,
            ),
            chunk(
                r#"{"tool_calls":[{"index":1,"id":"","function":{"name":"ls","arguments":"{}"}}]}"#,
            ),
            finish("tool_calls"),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(r.tool_calls.len(), 2);
        assert!(r.tool_calls.iter().all(|c| c.id == "call_INVENTED"));
        // Unnormalised, the two ids differ.
        let mut acc = Accumulator::new();
        let mut out = vec![];
        for ev in s.split("\n\n").filter(|e| !e.is_empty()) {
            acc.push_data(None, ev.trim_start_matches("data: "), &mut out)
                .unwrap();
        }
        let r = acc.finish().unwrap();
        assert_ne!(r.tool_calls[0].id, r.tool_calls[1].id);
    }

    #[test]
    fn whole_arguments_in_one_delta_and_as_object() {
        let s = [
            chunk(r#"{"tool_calls":[{"index":0,"id":"a","function":{"name":"ls","arguments":"{\"dirPath\":\"src\"}"}}]}"#),
            chunk(r#"{"tool_calls":[{"index":1,"id":"b","function":{"name":"read_file","arguments":{"filepath":"a.rs"}}}]}"#),
            chunk(r#"{"tool_calls":[{"index":2,"id":"c","function":{"name":"view_diff"}}]}"#),
            finish("tool_calls"),
            DONE.into(),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(
            r.tool_calls,
            vec![
                call("a", "ls", r#"{"dirPath":"src"}"#),
                call("b", "read_file", r#"{"filepath":"a.rs"}"#),
                call("c", "view_diff", "{}"),
            ]
        );
    }

    #[test]
    fn finish_reason_stop_with_tool_calls_still_has_calls() {
        let s = [
            chunk(r#"{"tool_calls":[{"index":0,"id":"a","function":{"name":"ls","arguments":"{}"}}]}"#),
            finish("stop"),
            DONE.into(),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
    }

    #[test]
    fn usage_only_final_chunk_and_empty_first_chunk() {
        let s = [
            "data: {\"id\":\"x\",\"choices\":[],\"model\":\"m1\"}\n\n".to_string(),
            chunk(r#"{"content":"hi"}"#),
            finish("stop"),
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\n"
                .into(),
            DONE.into(),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(
            r.usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 2,
                total_tokens: 12
            })
        );
        assert_eq!(r.model.as_deref(), Some("m1"));
        assert_eq!(r.content, "hi");
    }

    #[test]
    fn sse_comments_and_no_done() {
        let s = [
            ": OPENROUTER PROCESSING\n\n".to_string(),
            chunk(r#"{"content":"a"}"#),
            ": ping\n\n".into(),
            finish("stop"),
        ]
        .concat();
        let (r, _) = run(&s).unwrap();
        assert_eq!(r.content, "a");
    }

    #[test]
    fn error_object_mid_stream() {
        let s = [
            chunk(r#"{"content":"a"}"#),
            "data: {\"error\":{\"message\":\"model overloaded\",\"type\":\"server_error\"}}\n\n"
                .into(),
        ]
        .concat();
        assert_eq!(
            run(&s).unwrap_err(),
            "the upstream reported an error mid-stream: model overloaded"
        );
        let s = [
            chunk(r#"{"content":"a"}"#),
            "event: error\ndata: {\"message\":\"boom\"}\n\n".into(),
        ]
        .concat();
        assert_eq!(
            run(&s).unwrap_err(),
            "the upstream reported an error mid-stream: boom"
        );
    }

    #[test]
    fn reasoning_fields_are_forwarded_not_mixed_into_content() {
        let s = [
            chunk(r#"{"reasoning_content":"think"}"#),
            chunk(r#"{"reasoning":" more"}"#),
            chunk(r#"{"content":"answer"}"#),
            finish("stop"),
            DONE.into(),
        ]
        .concat();
        let (r, text) = run(&s).unwrap();
        assert_eq!(r.content, "answer");
        assert_eq!(r.reasoning, "think more");
        assert_eq!(text, "<r>think</r><r> more</r>answer");
    }

    #[test]
    fn truncated_streams_are_errors() {
        let s = chunk(r#"{"content":"a"}"#);
        assert!(
            run(&s)
                .unwrap_err()
                .contains("ended after 1 chunks without a finish_reason")
        );
        assert!(run("").unwrap_err().contains("before sending anything"));
    }

    #[test]
    fn data_lines_without_blank_lines_between_them() {
        let s = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n";
        let (r, _) = run(s).unwrap();
        assert_eq!(r.content, "ab");
    }

    #[test]
    fn non_streamed_message_body() {
        let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":null,
            "tool_calls":[{"id":"a","type":"function","function":{"name":"ls","arguments":"{}"}},
                          {"id":"b","type":"function","function":{"name":"ls","arguments":"{}"}}]},
            "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
        let mut acc = Accumulator::new();
        let mut out = vec![];
        acc.push_data(None, body, &mut out).unwrap();
        let r = acc.finish().unwrap();
        assert_eq!(
            r.tool_calls,
            vec![call("a", "ls", "{}"), call("b", "ls", "{}")]
        );
        assert_eq!(r.usage.unwrap().total_tokens, 7);
    }

    /// A non-streamed answer is read without building a `Value` when it is plain text; each
    /// of these bodies must come out exactly as the general path reads it (those with calls,
    /// content parts or two choices take the general path).
    #[test]
    fn a_whole_message_reads_the_same_on_both_paths() {
        let bodies = [
            r#"{"id":"x","model":"m1","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#,
            r#"{"choices":[{"message":{"content":"a","reasoning_content":"think","tool_calls":null},"finish_reason":"length"}]}"#,
            r#"{"choices":[{"message":{"content":null,"reasoning":"r"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"delta":null,"message":{"content":"m"}}]}"#,
            r#"{"choices":[{"message":null,"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"message":{"content":[{"type":"text","text":"parts"}]}}]}"#,
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"ls","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"message":{"function_call":{"name":"ls","arguments":"{}"}}}]}"#,
            r#"{"choices":[{"delta":{"content":"d"},"message":{"content":"m"}}]}"#,
            r#"{"choices":[{"index":1,"message":{"content":"other"}},{"index":0,"message":{"content":"mine"}}]}"#,
            r#"{"choices":[{"message":{"content":"see <tool_call>{\"name\": \"ls\", \"arguments\": {}}</tool_call>"}}]}"#,
        ];
        let names = std::sync::Arc::new(std::collections::HashSet::from(["ls".to_string()]));
        for body in bodies {
            let mut fast = Accumulator::with_tool_names(names.clone());
            let mut fast_out = vec![];
            fast.push_data(None, body, &mut fast_out).unwrap();
            let mut general = Accumulator::with_tool_names(names.clone());
            let mut general_out = vec![];
            let v: Value = serde_json::from_str(body).unwrap();
            general.push_value(None, &v, &mut general_out).unwrap();
            assert_eq!(fast_out, general_out, "{body}");
            assert_eq!(
                fast.finish().map_err(|e| e.to_string()),
                general.finish().map_err(|e| e.to_string()),
                "{body}"
            );
        }
    }

    #[test]
    fn tool_calls_written_as_text_become_calls_and_are_not_forwarded() {
        let s = [
            chunk(r#"{"content":"Checking.\n<tool"}"#),
            chunk(r#"{"content":"_call>{\"name\": \"read_file\", "}"#),
            chunk(r#"{"content":"\"arguments\": {\"filepath\": \"a.rs\"}}</tool_call>"}"#),
            finish("stop"),
            DONE.into(),
        ]
        .concat();
        let (r, text) = run_with(&s, &["read_file"]).unwrap();
        assert_eq!(text, "Checking.\n");
        assert_eq!(r.content, "Checking.\n");
        assert_eq!(
            r.tool_calls,
            vec![call("call_INVENTED", "read_file", r#"{"filepath":"a.rs"}"#)]
        );
        // The same text with no such tool offered is just text.
        let (r, text) = run_with(&s, &["ls"]).unwrap();
        assert!(text.contains("<tool_call>") && r.tool_calls.is_empty());
        // A fenced block in Continue's format.
        let s = [
            chunk(r#"{"content":"```tool\nTOOL_NAME: ls\nBEGIN_ARG: dirPath\nsrc\nEND_ARG\n```"}"#),
            finish("stop"),
        ]
        .concat();
        let (r, text) = run_with(&s, &["ls"]).unwrap();
        assert_eq!(text, "");
        assert_eq!(
            r.tool_calls,
            vec![call("call_INVENTED", "ls", r#"{"dirPath":"src"}"#)]
        );
    }

    #[test]
    fn a_chunk_that_is_not_json_breaks_the_round() {
        let s = [
            chunk(r#"{"content":"ok"}"#),
            "data: not json\n\n".to_string(),
            finish("stop"),
        ]
        .concat();
        let e = run(&s).unwrap_err().to_string();
        assert!(
            e.contains("not JSON") && e.contains("it sent: not json"),
            "{e}"
        );
    }
}
