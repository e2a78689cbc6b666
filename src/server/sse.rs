//! Our outbound formats: chat-completion chunks for SSE, and the non-streamed completion.
//!
//! The chunk envelope (`id`, `object`, `created`, `model`) is the same for every chunk of a
//! run, so it is serialised once and each delta is spliced in. Deltas follow what Continue
//! and the OpenAI SDKs expect: the role first, text and tool calls never in one delta, each
//! tool call whole in one delta with its `id`, calls one after another, then a chunk with
//! `finish_reason`, then (if asked) a usage chunk with empty `choices`, then `[DONE]`.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};

use crate::openai::{ToolCall, Usage};

pub const DONE: &[u8] = b"data: [DONE]\n\n";
pub const KEEPALIVE: &[u8] = b": keep-alive\n\n";

pub struct ChunkEncoder {
    /// `{"id":…,"object":"chat.completion.chunk","created":…,"model":…,"choices":[{"index":0,"delta":`
    prefix: String,
    id: String,
    created: u64,
    model: String,
}

impl ChunkEncoder {
    pub fn new(run_id: &str, model: &str) -> ChunkEncoder {
        let id = format!("chatcmpl-{run_id}");
        let created = now_secs();
        let prefix = format!(
            "{{\"id\":{},\"object\":\"chat.completion.chunk\",\"created\":{created},\"model\":{},\"choices\":[{{\"index\":0,\"delta\":",
            Value::from(id.as_str()),
            Value::from(model),
        );
        ChunkEncoder {
            prefix,
            id,
            created,
            model: model.to_string(),
        }
    }

    fn delta(&self, out: &mut BytesMut, delta: &str, finish: Option<&str>) {
        out.reserve(self.prefix.len() + delta.len() + 48);
        out.put_slice(b"data: ");
        out.put_slice(self.prefix.as_bytes());
        out.put_slice(delta.as_bytes());
        match finish {
            None => out.put_slice(b",\"finish_reason\":null}]}\n\n"),
            Some(f) => {
                out.put_slice(b",\"finish_reason\":\"");
                out.put_slice(f.as_bytes());
                out.put_slice(b"\"}]}\n\n");
            }
        }
    }

    pub fn role(&self, out: &mut BytesMut) {
        self.delta(out, r#"{"role":"assistant","content":""}"#, None);
    }

    pub fn content(&self, out: &mut BytesMut, text: &str) {
        let mut d = String::with_capacity(text.len() + 16);
        d.push_str("{\"content\":");
        push_json_str(&mut d, text);
        d.push('}');
        self.delta(out, &d, None);
    }

    pub fn reasoning(&self, out: &mut BytesMut, text: &str) {
        let mut d = String::with_capacity(text.len() + 28);
        d.push_str("{\"reasoning_content\":");
        push_json_str(&mut d, text);
        d.push('}');
        self.delta(out, &d, None);
    }

    pub fn tool_call(&self, out: &mut BytesMut, index: usize, call: &ToolCall) {
        let d = json!({"tool_calls": [{
            "index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}]});
        self.delta(out, &d.to_string(), None);
    }

    pub fn finish(&self, out: &mut BytesMut, reason: &str) {
        self.delta(out, "{}", Some(reason));
    }

    pub fn usage(&self, out: &mut BytesMut, usage: &Usage) {
        let v = json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "choices": [], "usage": usage});
        out.put_slice(b"data: ");
        out.put_slice(v.to_string().as_bytes());
        out.put_slice(b"\n\n");
    }

    /// An SSE comment line (ignored by clients; shows progress to humans and proxies).
    pub fn comment(out: &mut BytesMut, text: &str) {
        out.put_slice(b": ");
        out.put_slice(text.replace(['\n', '\r'], " ").as_bytes());
        out.put_slice(b"\n\n");
    }

    pub fn error(out: &mut BytesMut, body: &Value) {
        out.put_slice(b"data: ");
        out.put_slice(body.to_string().as_bytes());
        out.put_slice(b"\n\n");
    }

    pub fn done(out: &mut BytesMut) {
        out.put_slice(DONE);
    }

    /// The non-streamed `chat.completion` body.
    pub fn completion(
        &self,
        content: &str,
        reasoning: &str,
        tool_calls: &[ToolCall],
        finish_reason: &str,
        usage: &Usage,
    ) -> Bytes {
        let mut message = serde_json::Map::new();
        message.insert("role".into(), Value::from("assistant"));
        message.insert(
            "content".into(),
            if content.is_empty() && !tool_calls.is_empty() {
                Value::Null
            } else {
                Value::from(content)
            },
        );
        if !reasoning.is_empty() {
            message.insert("reasoning_content".into(), Value::from(reasoning));
        }
        if !tool_calls.is_empty() {
            message.insert(
                "tool_calls".into(),
                Value::Array(tool_calls.iter().map(ToolCall::to_json).collect()),
            );
        }
        let v = json!({
            "id": self.id, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason,
                         "logprobs": null}],
            "usage": usage,
        });
        Bytes::from(v.to_string())
    }
}

/// Appends `s` as a JSON string literal.
fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(chunk: &BytesMut) -> Value {
        let s = std::str::from_utf8(chunk).unwrap();
        let data = s
            .strip_prefix("data: ")
            .unwrap()
            .strip_suffix("\n\n")
            .unwrap();
        serde_json::from_str(data).unwrap()
    }

    #[test]
    fn chunks_are_valid_json_with_the_envelope() {
        let enc = ChunkEncoder::new("r1", "m\"x");
        let mut b = BytesMut::new();
        enc.content(&mut b, "a \"quoted\"\n\u{1}line\ttab é");
        let v = parse(&b);
        assert_eq!(v["id"], "chatcmpl-r1");
        assert_eq!(v["model"], "m\"x");
        assert_eq!(v["object"], "chat.completion.chunk");
        assert_eq!(
            v["choices"][0]["delta"]["content"],
            "a \"quoted\"\n\u{1}line\ttab é"
        );
        assert_eq!(v["choices"][0]["finish_reason"], Value::Null);
        let mut b = BytesMut::new();
        enc.finish(&mut b, "stop");
        assert_eq!(parse(&b)["choices"][0]["finish_reason"], "stop");
        let mut b = BytesMut::new();
        enc.tool_call(
            &mut b,
            0,
            &ToolCall {
                id: "c".into(),
                name: "x".into(),
                arguments: "{}".into(),
                kind: None,
            },
        );
        let v = parse(&b);
        assert_eq!(v["choices"][0]["delta"]["tool_calls"][0]["id"], "c");
        assert!(v["choices"][0]["delta"].get("content").is_none());
    }
}
