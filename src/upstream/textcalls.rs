//! Tool calls written as text: local servers that fail to parse a model's tool call pass it on
//! as content. Three shapes are recognised, for offered tool names only:
//!
//! - Hermes/Qwen tags: `<tool_call>{"name": "ls", "arguments": {…}}</tool_call>` (the closing
//!   tag may be missing at the end of the answer);
//! - fenced JSON: a ```` ```json ```` (or bare ```` ``` ````) block holding such an object;
//! - Continue's text-tool format: a ```` ```tool ```` block with `TOOL_NAME:` and
//!   `BEGIN_ARG:` / `END_ARG` sections;
//! - a whole answer that is nothing but such a JSON object.
//!
//! While streaming, text that might be the start of one of these is held back only until it
//! can be decided: `<` is released as soon as it cannot begin `<tool_call>`, a fence as soon as
//! its info string or first character rules it out, and any other code block streams freely.

use std::collections::HashSet;

use serde_json::{Map, Value};

use crate::openai::ToolCall;

const TAG_OPEN: &str = "<tool_call>";
const TAG_CLOSE: &str = "</tool_call>";
const FENCE: &str = "```";

/// Fence info strings that may hold a tool call.
const CALL_FENCES: &[&str] = &["", "json", "jsonc", "tool", "tool_call", "tool_code"];

#[derive(Debug, Default)]
pub struct TextCalls {
    names: std::sync::Arc<HashSet<String>>,
    /// Text received but not yet released.
    held: String,
    /// Whether the released text so far ends at a line start.
    at_line_start: bool,
    /// Inside a code block that is not a tool call: stream it, watch for its end.
    in_other_fence: bool,
    /// Nothing has been released yet and the answer began with `{`: hold it to the end.
    whole_json: bool,
    released_any: bool,
    /// A call was just removed: drop the newline that followed it, even if it arrives later.
    skip_newline: bool,
    pub calls: Vec<ToolCall>,
}

impl TextCalls {
    /// A filter for the given offered tool names (empty: the filter passes everything).
    pub fn new(names: std::sync::Arc<HashSet<String>>) -> TextCalls {
        TextCalls {
            names,
            at_line_start: true,
            ..TextCalls::default()
        }
    }

    pub fn is_active(&self) -> bool {
        !self.names.is_empty()
    }

    /// Feeds content; returns the text that can be shown now.
    pub fn push(&mut self, text: &str) -> String {
        if !self.is_active() {
            return text.to_string();
        }
        self.held.push_str(text);
        let mut out = String::new();
        self.scan(&mut out, false);
        self.note_released(&out);
        out
    }

    /// The end of the answer: decides everything still held.
    pub fn finish(&mut self) -> String {
        if !self.is_active() {
            return String::new();
        }
        let mut out = String::new();
        if self.whole_json {
            self.whole_json = false;
            let held = std::mem::take(&mut self.held);
            match self.parse_json_calls(held.trim()) {
                Some(calls) => self.calls.extend(calls),
                None => self.held = held,
            }
        }
        self.scan(&mut out, true);
        out.push_str(&std::mem::take(&mut self.held));
        self.note_released(&out);
        out
    }

    fn note_released(&mut self, out: &str) {
        if let Some(last) = out.chars().last() {
            self.at_line_start = last == '\n';
            self.released_any = true;
        }
    }

    fn release(&mut self, out: &mut String, upto: usize) {
        let rest = self.held.split_off(upto);
        let chunk = std::mem::replace(&mut self.held, rest);
        if let Some(last) = chunk.chars().last() {
            self.at_line_start = last == '\n';
        }
        out.push_str(&chunk);
        if !chunk.is_empty() {
            self.released_any = true;
        }
    }

    fn scan(&mut self, out: &mut String, at_end: bool) {
        if !self.released_any && out.is_empty() && !self.whole_json {
            let t = self.held.trim_start();
            if t.is_empty() && !at_end {
                return;
            }
            if t.starts_with('{') {
                self.whole_json = true;
            }
        }
        if self.whole_json && !at_end {
            // Keep holding only while the object can still be a call.
            match looks_like_call_object(self.held.trim_start()) {
                Some(true) | None => return,
                Some(false) => self.whole_json = false,
            }
        }
        loop {
            self.apply_skip();
            if self.held.is_empty() {
                return;
            }
            if self.in_other_fence {
                match find_fence_line(&self.held, self.at_line_start) {
                    // Backticks at the very end, their line not finished: more may follow on
                    // it (```` ```n ````), which would make it no closing fence. Undecided.
                    Some((start, end)) if !at_end && !self.held[..end].ends_with('\n') => {
                        self.release(out, start);
                        return;
                    }
                    Some((_, end)) => {
                        self.release(out, end);
                        self.in_other_fence = false;
                        continue;
                    }
                    None => {
                        // Release all but a possible partial fence at the end (at the start
                        // of what is held too, when the text released so far ends a line:
                        // the closing fence may arrive one backtick at a time).
                        let keep = partial_fence_tail_at_line(&self.held, self.at_line_start);
                        let upto = self.held.len() - keep;
                        self.release(out, upto);
                        if at_end {
                            let n = self.held.len();
                            self.release(out, n);
                        }
                        return;
                    }
                }
            }
            let tag = self.held.find(TAG_OPEN);
            let fence = find_fence_start(&self.held, self.at_line_start);
            let next = match (tag, fence) {
                (Some(t), Some(f)) => Some(t.min(f)),
                (a, b) => a.or(b),
            };
            let Some(pos) = next else {
                // No marker: keep only a tail that could still become one.
                let keep = partial_marker_tail(&self.held, self.at_line_start);
                let upto = if at_end {
                    self.held.len()
                } else {
                    self.held.len() - keep
                };
                self.release(out, upto);
                return;
            };
            self.release(out, pos);
            if self.held.starts_with(TAG_OPEN) {
                match self.held.find(TAG_CLOSE) {
                    Some(close) => {
                        let inner = self.held[TAG_OPEN.len()..close].to_string();
                        let end = close + TAG_CLOSE.len();
                        match self.parse_json_calls(inner.trim()) {
                            Some(calls) => {
                                self.calls.extend(calls);
                                self.held.drain(..end);
                                self.skip_newline();
                            }
                            None => self.release(out, end),
                        }
                    }
                    None if at_end => {
                        let inner = self.held[TAG_OPEN.len()..].to_string();
                        match self.parse_json_calls(inner.trim()) {
                            Some(calls) => {
                                self.calls.extend(calls);
                                self.held.clear();
                            }
                            None => {
                                let n = self.held.len();
                                self.release(out, n);
                            }
                        }
                        return;
                    }
                    None => return,
                }
                continue;
            }
            // A fence at a line start.
            let Some(nl) = self.held.find('\n') else {
                if at_end {
                    let n = self.held.len();
                    self.release(out, n);
                }
                return;
            };
            let info = self.held[FENCE.len()..nl].trim().to_ascii_lowercase();
            if !CALL_FENCES.contains(&info.as_str()) {
                self.release(out, nl + 1);
                self.in_other_fence = true;
                continue;
            }
            let body = &self.held[nl + 1..];
            let first = body.trim_start().chars().next();
            let plausible = match first {
                None => None, // undecided
                Some(c) if info == "tool" => Some(c == 'T' || c == 't'),
                Some('{') => Some(true),
                Some(_) => Some(false),
            };
            match plausible {
                Some(false) => {
                    self.release(out, nl + 1);
                    self.in_other_fence = true;
                    continue;
                }
                None if !at_end => return,
                _ => {}
            }
            match find_fence_line(body, true) {
                Some((_, close_end)) if !at_end && !body[..close_end].ends_with('\n') => return,
                Some((close_start, close_end)) => {
                    let inner = body[..close_start].to_string();
                    let closed_with_newline = body[..close_end].ends_with('\n');
                    let end = nl + 1 + close_end;
                    let calls = if info == "tool" {
                        self.parse_tool_block(&inner)
                    } else {
                        self.parse_json_calls(inner.trim())
                    };
                    match calls {
                        Some(calls) => {
                            self.calls.extend(calls);
                            self.held.drain(..end);
                            if !closed_with_newline {
                                self.skip_newline = true;
                            }
                        }
                        None => self.release(out, end),
                    }
                }
                None if at_end => {
                    let n = self.held.len();
                    self.release(out, n);
                    return;
                }
                None => return,
            }
        }
    }

    fn skip_newline(&mut self) {
        self.skip_newline = true;
        self.apply_skip();
    }

    fn apply_skip(&mut self) {
        if self.skip_newline && !self.held.is_empty() {
            if self.held.starts_with('\n') {
                self.held.remove(0);
            }
            self.skip_newline = false;
        }
    }

    /// One call object, or an array of them, naming offered tools.
    fn parse_json_calls(&self, text: &str) -> Option<Vec<ToolCall>> {
        let v: Value = serde_json::from_str(text).ok()?;
        let items = match v {
            Value::Array(a) => a,
            other => vec![other],
        };
        let mut calls = Vec::new();
        for item in &items {
            calls.push(self.call_from_json(item)?);
        }
        (!calls.is_empty()).then_some(calls)
    }

    fn call_from_json(&self, v: &Value) -> Option<ToolCall> {
        let obj = v.as_object()?;
        let (name, args) = if let Some(f) = obj.get("function").and_then(Value::as_object) {
            (f.get("name")?.as_str()?, f.get("arguments"))
        } else {
            let name = obj.get("name").or_else(|| obj.get("tool"))?.as_str()?;
            let args = obj
                .get("arguments")
                .or_else(|| obj.get("parameters"))
                .or_else(|| obj.get("args"));
            (name, args)
        };
        if !self.names.contains(name) {
            return None;
        }
        let arguments = match args {
            None | Some(Value::Null) => "{}".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        Some(ToolCall {
            id: super::accumulate::invent_id(),
            name: name.to_string(),
            arguments,
            kind: None,
        })
    }

    /// Continue's format: `TOOL_NAME: x`, then `BEGIN_ARG: name` … `END_ARG` sections.
    fn parse_tool_block(&self, body: &str) -> Option<Vec<ToolCall>> {
        let mut name: Option<String> = None;
        let mut args = Map::new();
        let mut current: Option<(String, Vec<&str>)> = None;
        for line in body.lines() {
            let trimmed = line.trim();
            if let Some((arg, lines)) = current.as_mut() {
                if trimmed == "END_ARG" {
                    let text = lines.join("\n");
                    let value = serde_json::from_str::<Value>(text.trim())
                        .ok()
                        .filter(|v| !v.is_string() || text.trim().starts_with('"'))
                        .unwrap_or_else(|| Value::String(text.trim().to_string()));
                    args.insert(arg.clone(), value);
                    current = None;
                } else {
                    lines.push(line);
                }
                continue;
            }
            if let Some(n) = trimmed.strip_prefix("TOOL_NAME:") {
                name = Some(n.trim().to_string());
            } else if let Some(a) = trimmed.strip_prefix("BEGIN_ARG:") {
                current = Some((a.trim().to_string(), Vec::new()));
            }
        }
        let name = name?;
        if !self.names.contains(&name) {
            return None;
        }
        Some(vec![ToolCall {
            id: super::accumulate::invent_id(),
            name,
            arguments: Value::Object(args).to_string(),
            kind: None,
        }])
    }
}

/// Whether text starting with `{` is the beginning of a call object (`{"name"`,
/// `{"function"`, `{"tool"`); `None` while too short to tell.
fn looks_like_call_object(s: &str) -> Option<bool> {
    let rest = s.strip_prefix('{')?.trim_start();
    for key in ["\"name\"", "\"function\"", "\"tool\""] {
        if rest.starts_with(key) {
            return Some(true);
        }
        if key.starts_with(rest) {
            return None;
        }
    }
    Some(false)
}

/// The start of a ```` ``` ```` at a line start, if any.
fn find_fence_start(s: &str, at_line_start: bool) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find(FENCE) {
        let pos = from + i;
        let line_start = if pos == 0 {
            at_line_start
        } else {
            s[..pos].ends_with('\n')
        };
        if line_start {
            return Some(pos);
        }
        from = pos + FENCE.len();
    }
    None
}

/// A closing fence line (```` ``` ```` alone on a line): (start, end after its newline).
fn find_fence_line(s: &str, at_line_start: bool) -> Option<(usize, usize)> {
    let mut from = 0;
    while let Some(rel) = find_fence_start(&s[from..], if from == 0 { at_line_start } else { true })
    {
        let pos = from + rel;
        let line_end = s[pos..].find('\n').map(|n| pos + n);
        let line = &s[pos..line_end.unwrap_or(s.len())];
        if line.trim_end() == FENCE {
            match line_end {
                Some(e) => return Some((pos, e + 1)),
                None => return Some((pos, s.len())),
            }
        }
        from = pos + FENCE.len();
    }
    None
}

/// How many bytes at the end of `s` could be the start of a marker.
fn partial_marker_tail(s: &str, at_line_start: bool) -> usize {
    let mut keep = 0;
    for n in (1..TAG_OPEN.len()).rev() {
        if s.len() >= n
            && s.is_char_boundary(s.len() - n)
            && TAG_OPEN.starts_with(&s[s.len() - n..])
        {
            keep = n;
            break;
        }
    }
    keep.max(partial_fence_tail_at_line(s, at_line_start))
}

fn partial_fence_tail_at_line(s: &str, at_line_start: bool) -> usize {
    for n in (1..=FENCE.len()).rev() {
        if s.len() >= n
            && s.is_char_boundary(s.len() - n)
            && s[s.len() - n..].bytes().all(|b| b == b'`')
        {
            let start = s.len() - n;
            let line_start = if start == 0 {
                at_line_start
            } else {
                s[..start].ends_with('\n')
            };
            if line_start {
                // A complete fence with no newline yet is also undecided.
                return n;
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> std::sync::Arc<HashSet<String>> {
        std::sync::Arc::new(
            ["read_file".to_string(), "ls".to_string()]
                .into_iter()
                .collect(),
        )
    }

    /// Feeds `text` split at every point (and whole); all splits must agree.
    #[track_caller]
    fn run(text: &str) -> (String, Vec<(String, String)>) {
        let mut results = Vec::new();
        let cuts: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        for &cut in &cuts {
            let mut f = TextCalls::new(names());
            let mut shown = f.push(&text[..cut]);
            shown.push_str(&f.push(&text[cut..]));
            shown.push_str(&f.finish());
            let calls: Vec<(String, String)> = f
                .calls
                .iter()
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect();
            results.push((shown, calls));
        }
        for r in &results {
            assert_eq!(r, &results[0], "splits disagree for {text:?}");
        }
        results.remove(0)
    }

    fn call(name: &str, args: &str) -> (String, String) {
        (name.into(), args.into())
    }

    #[test]
    fn hermes_tags_become_calls() {
        let (shown, calls) = run(
            "Let me look.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"filepath\": \"a.rs\"}}\n</tool_call>\n",
        );
        assert_eq!(shown, "Let me look.\n");
        assert_eq!(calls, vec![call("read_file", r#"{"filepath":"a.rs"}"#)]);
    }

    #[test]
    fn hermes_tag_without_closing_at_the_end() {
        let (shown, calls) = run("<tool_call>{\"name\": \"ls\", \"arguments\": {}}");
        assert_eq!(shown, "");
        assert_eq!(calls, vec![call("ls", "{}")]);
    }

    #[test]
    fn several_tags() {
        let (shown, calls) = run(
            "<tool_call>{\"name\":\"ls\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"read_file\",\"arguments\":\"{\\\"filepath\\\":\\\"x\\\"}\"}</tool_call>",
        );
        assert_eq!(shown, "");
        assert_eq!(
            calls,
            vec![call("ls", "{}"), call("read_file", r#"{"filepath":"x"}"#)]
        );
    }

    #[test]
    fn fenced_json_call() {
        let (shown, calls) = run(
            "I will list files.\n```json\n{\"name\": \"ls\", \"parameters\": {\"dirPath\": \"src\"}}\n```\n",
        );
        assert_eq!(shown, "I will list files.\n");
        assert_eq!(calls, vec![call("ls", r#"{"dirPath":"src"}"#)]);
    }

    #[test]
    fn continue_tool_block() {
        let (shown, calls) =
            run("```tool\nTOOL_NAME: read_file\nBEGIN_ARG: filepath\nsrc/main.rs\nEND_ARG\n```");
        assert_eq!(shown, "");
        assert_eq!(
            calls,
            vec![call("read_file", r#"{"filepath":"src/main.rs"}"#)]
        );
    }

    #[test]
    fn a_bare_json_answer_that_is_a_call() {
        let (shown, calls) = run("{\"name\": \"ls\", \"arguments\": {\"recursive\": true}}");
        assert_eq!(shown, "");
        assert_eq!(calls, vec![call("ls", r#"{"recursive":true}"#)]);
    }

    #[test]
    fn ordinary_text_and_code_pass_through_unchanged() {
        for text in [
            "Use `a < b` and <div> tags; x <tool and more.",
            "Here:\n```rust\nfn main() {}\n```\nand ```inline``` too.\n",
            "```json\n{\"not\": \"a call\"}\n```\n",
            "```json\n[1, 2]\n```",
            "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
            "{\"name\": \"unknown_tool\"}",
            "```\nplain block\n```",
            "ends with a backtick `",
            "ends with <tool_ca",
        ] {
            let (shown, calls) = run(text);
            assert_eq!(shown, text, "{text:?}");
            assert!(calls.is_empty(), "{text:?}");
        }
    }

    #[test]
    fn json_answers_that_are_not_calls_stream() {
        let mut f = TextCalls::new(names());
        assert_eq!(f.push("{\"ans"), "{\"ans");
        let mut f = TextCalls::new(names());
        assert_eq!(f.push("{ \"na"), "");
        assert_eq!(f.push("mes\": [1]"), "{ \"names\": [1]");
        assert_eq!(f.push("}"), "}");
        let mut f = TextCalls::new(names());
        assert_eq!(f.push("{\"name\": \"ls\""), "");
    }

    #[test]
    fn other_code_blocks_stream_without_waiting_for_their_end() {
        let mut f = TextCalls::new(names());
        let shown = f.push("Look:\n```python\nprint(1)\n");
        assert_eq!(shown, "Look:\n```python\nprint(1)\n");
        let mut f = TextCalls::new(names());
        assert_eq!(f.push("a <b"), "a <b");
        assert_eq!(f.push("x <tool_"), "x ");
    }

    /// Found by `fuzz::the_text_tool_call_parser_never_panics_and_any_split_gives_the_same_answer`:
    /// the closing fence of an ordinary block, cut after its first backtick, was released as
    /// text and never seen to close the block, so the tool block after it stayed text.
    #[test]
    fn a_closing_fence_cut_after_its_first_backtick_still_closes_the_block() {
        let (shown, calls) = run("```\n```\n```tool\nTOOL_NAME: read_file\n```");
        assert_eq!(shown, "```\n```\n");
        assert_eq!(calls, [("read_file".to_string(), "{}".to_string())]);
        // And backticks at the end of a chunk are no closing fence until their line ends:
        // ```` ```n ```` does not close the block, so the tool block is inside it.
        let text = "```\n```n\n```tool\nTOOL_NAME: read_file\n```";
        let (shown, calls) = run(text);
        assert_eq!(shown, text);
        assert!(calls.is_empty());
    }
}
