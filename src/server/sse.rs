//! Our outbound formats: chat-completion chunks for SSE, and the non-streamed completion.
//!
//! The chunk envelope (`id`, `object`, `created`, `model`) is the same for every chunk of a
//! run, so it is serialised once and each delta is spliced in. Deltas follow what Continue
//! and the OpenAI SDKs expect: the role first, text and tool calls never in one delta, each
//! tool call whole in one delta with its `id`, calls one after another, then a chunk with
//! `finish_reason`, then (if asked) a usage chunk with empty `choices`, then `[DONE]`.

use bytes::{BufMut, Bytes, BytesMut};
use serde::Serialize;
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
        let tool_calls: Vec<Value> = tool_calls.iter().map(ToolCall::to_json).collect();
        let body = Completion {
            choices: [CompletionChoice {
                finish_reason,
                index: 0,
                logprobs: (),
                message: CompletionMessage {
                    content: (!content.is_empty() || tool_calls.is_empty()).then_some(content),
                    reasoning_content: (!reasoning.is_empty()).then_some(reasoning),
                    role: "assistant",
                    tool_calls,
                },
            }],
            created: self.created,
            id: &self.id,
            model: &self.model,
            object: "chat.completion",
            usage: UsageBody {
                completion_tokens: usage.completion_tokens,
                prompt_tokens: usage.prompt_tokens,
                total_tokens: usage.total_tokens,
            },
        };
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }
}

/// The non-streamed `chat.completion` body, written straight from borrowed fields (no map is
/// built). Keys are in alphabetical order at every level, as the body always had them.
#[derive(Serialize)]
struct Completion<'a> {
    choices: [CompletionChoice<'a>; 1],
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    usage: UsageBody,
}

/// `usage` with its keys in the same order as everywhere else in the body.
#[derive(Serialize)]
struct UsageBody {
    completion_tokens: u64,
    prompt_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    finish_reason: &'a str,
    index: u32,
    /// Always `null`.
    logprobs: (),
    message: CompletionMessage<'a>,
}

#[derive(Serialize)]
struct CompletionMessage<'a> {
    /// `null` when the answer is only tool calls.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    role: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
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

    /// The non-streamed body, byte for byte: keys in the order it always had, `content` null
    /// only when the answer is calls alone, `reasoning_content` and `tool_calls` only when
    /// there are some, strings escaped.
    #[test]
    fn the_completion_body_is_exact() {
        let mut enc = ChunkEncoder::new("r1", "m\"x");
        enc.created = 7;
        let usage = Usage {
            prompt_tokens: 1,
            completion_tokens: 2,
            total_tokens: 3,
        };
        let text = enc.completion("a \"b\"\n", "", &[], "stop", &usage);
        assert_eq!(
            std::str::from_utf8(&text).unwrap(),
            r#"{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"message":{"content":"a \"b\"\n","role":"assistant"}}],"created":7,"id":"chatcmpl-r1","model":"m\"x","object":"chat.completion","usage":{"completion_tokens":2,"prompt_tokens":1,"total_tokens":3}}"#
        );
        let call = ToolCall {
            id: "c".into(),
            name: "ls".into(),
            arguments: "{}".into(),
            kind: None,
        };
        let calls = enc.completion("", "why", std::slice::from_ref(&call), "tool_calls", &usage);
        assert_eq!(
            std::str::from_utf8(&calls).unwrap(),
            r#"{"choices":[{"finish_reason":"tool_calls","index":0,"logprobs":null,"message":{"content":null,"reasoning_content":"why","role":"assistant","tool_calls":[{"function":{"arguments":"{}","name":"ls"},"id":"c","type":"function"}]}}],"created":7,"id":"chatcmpl-r1","model":"m\"x","object":"chat.completion","usage":{"completion_tokens":2,"prompt_tokens":1,"total_tokens":3}}"#
        );
        // Text beside calls is kept.
        let both = enc.completion("t", "", std::slice::from_ref(&call), "tool_calls", &usage);
        let v: Value = serde_json::from_slice(&both).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "t");
    }
}
