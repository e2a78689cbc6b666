//! Ollama's own chat API (`POST /api/chat`), used for Ollama upstreams because it is the only
//! way to set the context size per request: Ollama's OpenAI-compatible endpoint ignores
//! `num_ctx` and silently truncates prompts to the model's default context.
//!
//! [`native_request`] turns the chat-completions body toolpilot builds into Ollama's shape
//! (options, tool calls with object arguments, tool results with the tool's name, images), and
//! [`NdjsonChunks`] turns Ollama's newline-delimited JSON answer back into chat-completion
//! chunks, so the accumulator downstream sees one protocol.

use std::collections::{HashMap, VecDeque};

use serde_json::{Map, Value, json};

use super::accumulate::invent_id;

/// The `/api/chat` body for a chat-completions body, with the context size `num_ctx`.
pub fn native_request(body: &Value, num_ctx: Option<u64>) -> Value {
    let mut out = Map::new();
    out.insert(
        "model".into(),
        body.get("model").cloned().unwrap_or(Value::Null),
    );
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .map(|m| native_messages(m))
        .unwrap_or_default();
    out.insert("messages".into(), Value::Array(messages));
    if let Some(tools) = body.get("tools").filter(|t| t.is_array()) {
        out.insert("tools".into(), tools.clone());
    }
    out.insert("stream".into(), Value::Bool(true));
    let mut options = Map::new();
    if let Some(n) = num_ctx {
        options.insert("num_ctx".into(), json!(n));
    }
    for (from, to) in [
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("top_k", "top_k"),
        ("seed", "seed"),
        ("stop", "stop"),
        ("frequency_penalty", "frequency_penalty"),
        ("presence_penalty", "presence_penalty"),
        ("max_tokens", "num_predict"),
        ("max_completion_tokens", "num_predict"),
    ] {
        if let Some(v) = body.get(from).filter(|v| !v.is_null()) {
            let v = match (to, v) {
                ("stop", Value::String(s)) => json!([s]),
                _ => v.clone(),
            };
            options.insert(to.into(), v);
        }
    }
    // Options the client passed the Ollama way win.
    if let Some(Value::Object(given)) = body.get("options") {
        for (k, v) in given {
            options.insert(k.clone(), v.clone());
        }
    }
    if !options.is_empty() {
        out.insert("options".into(), Value::Object(options));
    }
    match body.get("response_format") {
        Some(f) if f.get("type").and_then(Value::as_str) == Some("json_object") => {
            out.insert("format".into(), json!("json"));
        }
        Some(f) if f.get("type").and_then(Value::as_str) == Some("json_schema") => {
            if let Some(schema) = f.pointer("/json_schema/schema") {
                out.insert("format".into(), schema.clone());
            }
        }
        _ => {}
    }
    for key in ["keep_alive", "think"] {
        if let Some(v) = body.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    Value::Object(out)
}

fn native_messages(messages: &[Value]) -> Vec<Value> {
    // Tool results name their call; Ollama wants the tool's name.
    let mut names: HashMap<&str, &str> = HashMap::new();
    for m in messages {
        for c in m
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(id), Some(name)) = (
                c.get("id").and_then(Value::as_str),
                c.pointer("/function/name").and_then(Value::as_str),
            ) {
                names.insert(id, name);
            }
        }
    }
    messages
        .iter()
        .map(|m| {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
            let role = if role == "developer" { "system" } else { role };
            let mut out = Map::new();
            out.insert("role".into(), json!(role));
            let (text, images) = content_parts(m.get("content"));
            out.insert("content".into(), Value::String(text));
            if !images.is_empty() {
                out.insert("images".into(), json!(images));
            }
            if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|c| {
                        let args = match c.pointer("/function/arguments") {
                            Some(Value::String(s)) => {
                                serde_json::from_str::<Value>(s).unwrap_or_else(|_| json!({}))
                            }
                            Some(v @ Value::Object(_)) => v.clone(),
                            _ => json!({}),
                        };
                        json!({"function": {
                            "name": c.pointer("/function/name").cloned().unwrap_or(Value::Null),
                            "arguments": args,
                        }})
                    })
                    .collect();
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            if role == "tool"
                && let Some(name) = m
                    .get("tool_call_id")
                    .and_then(Value::as_str)
                    .and_then(|id| names.get(id))
            {
                out.insert("tool_name".into(), json!(name));
            }
            Value::Object(out)
        })
        .collect()
}

/// The text of a message's content, and the base64 data of its inline images.
fn content_parts(content: Option<&Value>) -> (String, Vec<String>) {
    match content {
        Some(Value::String(s)) => (s.clone(), Vec::new()),
        Some(Value::Array(parts)) => {
            let mut text = Vec::new();
            let mut images = Vec::new();
            for p in parts {
                if let Some(t) = p.get("text").and_then(Value::as_str) {
                    text.push(t.to_string());
                } else if let Some(url) = p
                    .pointer("/image_url/url")
                    .or_else(|| p.get("image_url"))
                    .and_then(Value::as_str)
                {
                    match url.split_once(";base64,") {
                        Some((head, data)) if head.starts_with("data:") => {
                            images.push(data.to_string())
                        }
                        _ => text.push(format!("[image: {url}]")),
                    }
                }
            }
            (text.join("\n"), images)
        }
        _ => (String::new(), Vec::new()),
    }
}

/// Ollama's streamed answer (one JSON object per line) as chat-completion chunk payloads,
/// ending with `[DONE]`.
#[derive(Default)]
pub struct NdjsonChunks {
    buf: Vec<u8>,
    ready: VecDeque<String>,
    calls: usize,
    finished: bool,
}

impl NdjsonChunks {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        while let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=nl).collect();
            self.line(&line);
        }
    }

    /// The next chunk payload ready.
    pub fn next_payload(&mut self) -> Option<String> {
        self.ready.pop_front()
    }

    /// The end of the response: a last line without a newline.
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.buf);
        self.line(&rest);
    }

    fn line(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() || self.finished {
            return;
        }
        let v: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(_) => {
                self.ready.push_back(
                    json!({"error": {"message": format!(
                        "Ollama sent a line that is not JSON: {}",
                        &text[..crate::text::floor_char_boundary(text, 200)]
                    )}})
                    .to_string(),
                );
                return;
            }
        };
        if let Some(e) = v.get("error") {
            self.ready.push_back(json!({"error": e}).to_string());
            return;
        }
        let msg = v.get("message");
        let mut delta = Map::new();
        if let Some(t) = msg
            .and_then(|m| m.get("thinking"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            delta.insert("reasoning_content".into(), json!(t));
        }
        if let Some(t) = msg
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            delta.insert("content".into(), json!(t));
        }
        if let Some(calls) = msg
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
        {
            let mut out = Vec::new();
            for c in calls {
                let args = match c.pointer("/function/arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => "{}".into(),
                };
                out.push(json!({
                    "index": self.calls,
                    "id": invent_id(),
                    "type": "function",
                    "function": {
                        "name": c.pointer("/function/name").cloned().unwrap_or(Value::Null),
                        "arguments": args,
                    }
                }));
                self.calls += 1;
            }
            if !out.is_empty() {
                delta.insert("tool_calls".into(), Value::Array(out));
            }
        }
        if !delta.is_empty() {
            self.ready.push_back(
                json!({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
                .to_string(),
            );
        }
        if v.get("done").and_then(Value::as_bool) == Some(true) {
            self.finished = true;
            let reason = match v.get("done_reason").and_then(Value::as_str) {
                Some("length") => "length",
                _ if self.calls > 0 => "tool_calls",
                _ => "stop",
            };
            self.ready.push_back(
                json!({"object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
                .to_string(),
            );
            let prompt = v.get("prompt_eval_count").and_then(Value::as_u64);
            let completion = v.get("eval_count").and_then(Value::as_u64);
            if prompt.is_some() || completion.is_some() {
                let (p, c) = (prompt.unwrap_or(0), completion.unwrap_or(0));
                self.ready.push_back(
                    json!({"object": "chat.completion.chunk", "choices": [],
                           "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}})
                    .to_string(),
                );
            }
            self.ready.push_back("[DONE]".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_num_ctx_options_and_native_tool_calls() {
        let body = json!({
            "model": "qwen", "max_tokens": 100, "temperature": 0.2, "stop": "END",
            "response_format": {"type": "json_object"},
            "tools": [{"type": "function", "function": {"name": "ls", "parameters": {}}}],
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{\"dirPath\":\".\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}
            ]
        });
        let n = native_request(&body, Some(8192));
        assert_eq!(n["options"]["num_ctx"], 8192);
        assert_eq!(n["options"]["num_predict"], 100);
        assert_eq!(n["options"]["temperature"], 0.2);
        assert_eq!(n["options"]["stop"], json!(["END"]));
        assert_eq!(n["format"], "json");
        assert_eq!(n["stream"], true);
        assert_eq!(n["tools"][0]["function"]["name"], "ls");
        let m = &n["messages"];
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[1]["content"], "look");
        assert_eq!(m[1]["images"], json!(["AAAA"]));
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            json!({"dirPath": "."})
        );
        assert_eq!(m[2]["content"], "");
        assert_eq!(m[3]["tool_name"], "ls");
    }

    #[test]
    fn ndjson_becomes_chunks_at_any_split() {
        let stream = concat!(
            "{\"message\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"done\":false}\n",
            "{\"message\":{\"role\":\"assistant\",\"thinking\":\"hmm\",\"content\":\"lo\"},\"done\":false}\n",
            "{\"message\":{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":{\"name\":\"ls\",\"arguments\":{\"dirPath\":\".\"}}}]},\"done\":false}\n",
            "{\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\",\"prompt_eval_count\":12,\"eval_count\":5}"
        );
        for split in 0..stream.len() {
            let mut d = NdjsonChunks::default();
            d.push(&stream.as_bytes()[..split]);
            d.push(&stream.as_bytes()[split..]);
            d.finish();
            let mut acc = crate::upstream::accumulate::Accumulator::new();
            let mut pieces = Vec::new();
            while let Some(data) = d.next_payload() {
                acc.push_data(None, &data, &mut pieces).unwrap();
            }
            let round = acc.finish().unwrap();
            assert_eq!(round.content, "Hello", "split {split}");
            assert_eq!(round.reasoning, "hmm");
            assert_eq!(round.tool_calls.len(), 1);
            assert_eq!(round.tool_calls[0].name, "ls");
            assert_eq!(round.tool_calls[0].arguments, "{\"dirPath\":\".\"}");
            assert_eq!(round.finish_reason.as_deref(), Some("tool_calls"));
            assert_eq!(round.usage.as_ref().map(|u| u.total_tokens), Some(17));
        }
    }

    #[test]
    fn an_error_line_becomes_an_in_stream_error() {
        let mut d = NdjsonChunks::default();
        d.push(b"{\"error\":\"model requires more system memory\"}\n");
        let mut acc = crate::upstream::accumulate::Accumulator::new();
        let mut pieces = Vec::new();
        let data = d.next_payload().unwrap();
        let e = acc.push_data(None, &data, &mut pieces).unwrap_err();
        assert!(e.to_string().contains("more system memory"), "{e}");
    }
}
