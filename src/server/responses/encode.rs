//! A run's events as a Responses API response: output items, and (when streaming) the SSE
//! events that build them.
//!
//! One [`Encoder`] per response. Items are produced one after another, never interleaved:
//! text goes into a `message` item, reasoning (the model's, or toolpilot's progress in the
//! reasoning channel) into a `reasoning` item; when one kind follows the other, the open item
//! is finished and a new one begins. So consecutive rounds' text is one message item unless
//! reasoning came between them. Calls handed to the client become `function_call`,
//! `custom_tool_call` or `local_shell_call` items after the text of their round. Every event
//! carries `type` and a `sequence_number` counting from 0, and refers to its item by
//! `output_index` and `item_id` (and `content_index` / `summary_index` 0), which is what the
//! OpenAI SDKs' stream accumulators check.
//!
//! Hot path: a text delta is written as a pre-serialised prefix for its item plus the escaped
//! delta; the request parameters every response object repeats (`instructions`, `tools`, …)
//! are serialised once per response.

use std::collections::HashMap;
use std::fmt::Write as _;

use bytes::{BufMut, BytesMut};
use serde_json::{Map, Value, json};

use crate::error::ApiError;
use crate::openai::responses::{ToolKind, ToolShape};
use crate::openai::{ToolCall, Usage};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Message,
    Reasoning,
}

/// The item deltas currently go to.
struct Open {
    kind: Kind,
    index: usize,
    id: String,
    text: String,
    /// `"item_id":"…","output_index":N,"content_index":0` (or `summary_index`).
    locator: String,
    /// What a delta event has between its sequence number and the delta text.
    delta_tail: String,
}

/// The start of a text delta event, up to its sequence number.
const TEXT_DELTA_HEAD: &[u8] = b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":";
const REASONING_DELTA_HEAD: &[u8] = b"event: response.reasoning_summary_text.delta\ndata: {\"type\":\"response.reasoning_summary_text.delta\",\"sequence_number\":";

/// Appends `n` in decimal.
fn push_u64(out: &mut BytesMut, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.put_slice(&buf[i..]);
}

pub struct Encoder {
    id: String,
    run_id: String,
    created_at: u64,
    model: String,
    /// `,"instructions":…,"tools":…,…`: the request parameters the response object repeats.
    echo: String,
    /// The client tools that are not plain functions, by the name the model calls.
    kinds: HashMap<String, ToolShape>,
    /// Write SSE events (a streamed response); otherwise only the output is collected.
    emit: bool,
    seq: u64,
    /// Finished output items, serialised.
    items: Vec<String>,
    open: Option<Open>,
    /// The answer's text over all message items, and the calls handed to the client: the
    /// assistant message a continuation (`previous_response_id`) starts from.
    text: String,
    calls: Vec<ToolCall>,
}

impl Encoder {
    pub fn new(
        run_id: &str,
        model: &str,
        echo: &Map<String, Value>,
        kinds: HashMap<String, ToolShape>,
        emit: bool,
    ) -> Encoder {
        let mut tail = String::new();
        for (k, v) in echo {
            tail.push(',');
            tail.push_str(&Value::from(k.as_str()).to_string());
            tail.push(':');
            tail.push_str(&v.to_string());
        }
        Encoder {
            id: response_id(run_id),
            run_id: run_id.to_string(),
            created_at: now_secs(),
            model: model.to_string(),
            echo: tail,
            kinds,
            emit,
            seq: 0,
            items: Vec::new(),
            open: None,
            text: String::new(),
            calls: Vec::new(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The answer's text (all finished message items) and the calls handed to the client;
    /// complete after [`Encoder::finish`].
    pub fn answer(&self) -> (&str, &[ToolCall]) {
        (&self.text, &self.calls)
    }

    /// `response.created` and `response.in_progress`.
    pub fn created(&mut self, out: &mut BytesMut) {
        if !self.emit {
            return;
        }
        let r = self.response("in_progress", false, None, None, None);
        let fields = format!("\"response\":{r}");
        self.event(out, "response.created", &fields);
        self.event(out, "response.in_progress", &fields);
    }

    /// Answer text.
    pub fn text(&mut self, out: &mut BytesMut, t: &str) {
        self.delta(out, Kind::Message, t);
    }

    /// Reasoning text (the model's, or progress shown as reasoning).
    pub fn reasoning(&mut self, out: &mut BytesMut, t: &str) {
        self.delta(out, Kind::Reasoning, t);
    }

    fn delta(&mut self, out: &mut BytesMut, kind: Kind, t: &str) {
        if t.is_empty() {
            return;
        }
        if self.open.as_ref().is_none_or(|o| o.kind != kind) {
            self.close(out, "completed");
            self.open_item(out, kind);
        }
        let Some(open) = self.open.as_mut() else {
            return;
        };
        open.text.push_str(t);
        if !self.emit {
            return;
        }
        let seq = self.seq;
        self.seq += 1;
        let head = match kind {
            Kind::Message => TEXT_DELTA_HEAD,
            Kind::Reasoning => REASONING_DELTA_HEAD,
        };
        out.reserve(head.len() + open.delta_tail.len() + t.len() + 32);
        out.put_slice(head);
        push_u64(out, seq);
        out.put_slice(open.delta_tail.as_bytes());
        let _ = serde_json::to_writer(out.writer(), t);
        out.put_slice(b"}\n\n");
    }

    fn open_item(&mut self, out: &mut BytesMut, kind: Kind) {
        let index = self.items.len();
        let (id, locator) = match kind {
            Kind::Message => {
                let id = format!("msg_{}_{index}", self.run_id);
                let loc =
                    format!("\"item_id\":\"{id}\",\"output_index\":{index},\"content_index\":0");
                (id, loc)
            }
            Kind::Reasoning => {
                let id = format!("rs_{}_{index}", self.run_id);
                let loc =
                    format!("\"item_id\":\"{id}\",\"output_index\":{index},\"summary_index\":0");
                (id, loc)
            }
        };
        if self.emit {
            match kind {
                Kind::Message => {
                    let item = json!({"id": id, "type": "message", "status": "in_progress",
                                      "role": "assistant", "content": []});
                    self.event(
                        out,
                        "response.output_item.added",
                        &format!("\"output_index\":{index},\"item\":{item}"),
                    );
                    self.event(
                        out,
                        "response.content_part.added",
                        &format!(
                            "{locator},\"part\":{{\"type\":\"output_text\",\"text\":\"\",\"annotations\":[]}}"
                        ),
                    );
                }
                Kind::Reasoning => {
                    let item = json!({"id": id, "type": "reasoning", "summary": []});
                    self.event(
                        out,
                        "response.output_item.added",
                        &format!("\"output_index\":{index},\"item\":{item}"),
                    );
                    self.event(
                        out,
                        "response.reasoning_summary_part.added",
                        &format!("{locator},\"part\":{{\"type\":\"summary_text\",\"text\":\"\"}}"),
                    );
                }
            }
        }
        let delta_tail = match kind {
            Kind::Message => format!(",{locator},\"logprobs\":[],\"delta\":"),
            Kind::Reasoning => format!(",{locator},\"delta\":"),
        };
        self.open = Some(Open {
            kind,
            index,
            id,
            text: String::new(),
            locator,
            delta_tail,
        });
    }

    /// Finishes the open item, if any.
    fn close(&mut self, out: &mut BytesMut, status: &str) {
        let Some(open) = self.open.take() else {
            return;
        };
        if open.kind == Kind::Message {
            self.text.push_str(&open.text);
        }
        let text = Value::from(open.text);
        let item = match open.kind {
            Kind::Message => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                if self.emit {
                    self.event(
                        out,
                        "response.output_text.done",
                        &format!("{},\"logprobs\":[],\"text\":{text}", open.locator),
                    );
                    self.event(
                        out,
                        "response.content_part.done",
                        &format!("{},\"part\":{part}", open.locator),
                    );
                }
                json!({"id": open.id, "type": "message", "status": status, "role": "assistant",
                       "content": [{"type": "output_text", "text": text, "annotations": [],
                                    "logprobs": []}]})
            }
            Kind::Reasoning => {
                let part = json!({"type": "summary_text", "text": text});
                if self.emit {
                    self.event(
                        out,
                        "response.reasoning_summary_text.done",
                        &format!("{},\"text\":{text}", open.locator),
                    );
                    self.event(
                        out,
                        "response.reasoning_summary_part.done",
                        &format!("{},\"part\":{part}", open.locator),
                    );
                }
                json!({"id": open.id, "type": "reasoning", "summary": [part]})
            }
        };
        self.item_done(out, open.index, item);
    }

    fn item_done(&mut self, out: &mut BytesMut, index: usize, item: Value) {
        let item = item.to_string();
        if self.emit {
            self.event(
                out,
                "response.output_item.done",
                &format!("\"output_index\":{index},\"item\":{item}"),
            );
        }
        self.items.push(item);
    }

    /// Calls handed to the client, each as the kind of item its tool was declared as.
    pub fn calls(&mut self, out: &mut BytesMut, calls: &[ToolCall]) {
        self.close(out, "completed");
        for call in calls {
            let index = self.items.len();
            let shape = self.kinds.get(&call.name).cloned();
            let kind = shape.as_ref().map_or(ToolKind::Function, |s| s.kind);
            // A namespaced tool's call names the tool as declared, and its namespace.
            let name = shape
                .as_ref()
                .map_or(call.name.as_str(), |s| s.name.as_str());
            let namespace = shape.as_ref().and_then(|s| s.namespace.as_deref());
            let with_namespace = |mut item: Value| {
                if let Some(ns) = namespace {
                    item["namespace"] = Value::from(ns);
                }
                item
            };
            let item = match kind {
                ToolKind::Function => {
                    let id = format!("fc_{}_{index}", self.run_id);
                    if self.emit {
                        let added = with_namespace(
                            json!({"id": id, "type": "function_call", "status": "in_progress",
                                           "call_id": call.id, "name": name, "arguments": ""}),
                        );
                        self.event(
                            out,
                            "response.output_item.added",
                            &format!("\"output_index\":{index},\"item\":{added}"),
                        );
                        let args = Value::from(call.arguments.as_str());
                        let loc = format!("\"item_id\":\"{id}\",\"output_index\":{index}");
                        self.event(
                            out,
                            "response.function_call_arguments.delta",
                            &format!("{loc},\"delta\":{args}"),
                        );
                        self.event(
                            out,
                            "response.function_call_arguments.done",
                            &format!("{loc},\"name\":{},\"arguments\":{args}", Value::from(name)),
                        );
                    }
                    with_namespace(
                        json!({"id": id, "type": "function_call", "status": "completed",
                           "call_id": call.id, "name": name, "arguments": call.arguments}),
                    )
                }
                ToolKind::Custom => {
                    let id = format!("ctc_{}_{index}", self.run_id);
                    let input = custom_input(&call.arguments);
                    if self.emit {
                        let added = with_namespace(
                            json!({"id": id, "type": "custom_tool_call", "status": "in_progress",
                                           "call_id": call.id, "name": name, "input": ""}),
                        );
                        self.event(
                            out,
                            "response.output_item.added",
                            &format!("\"output_index\":{index},\"item\":{added}"),
                        );
                        let input = Value::from(input.as_str());
                        let loc = format!("\"item_id\":\"{id}\",\"output_index\":{index}");
                        self.event(
                            out,
                            "response.custom_tool_call_input.delta",
                            &format!("{loc},\"delta\":{input}"),
                        );
                        self.event(
                            out,
                            "response.custom_tool_call_input.done",
                            &format!("{loc},\"input\":{input}"),
                        );
                    }
                    with_namespace(
                        json!({"id": id, "type": "custom_tool_call", "status": "completed",
                           "call_id": call.id, "name": name, "input": input}),
                    )
                }
                ToolKind::LocalShell => {
                    let id = format!("lsc_{}_{index}", self.run_id);
                    let action = shell_action(&call.arguments);
                    if self.emit {
                        let added = json!({"id": id, "type": "local_shell_call", "status": "in_progress",
                                           "call_id": call.id, "action": action});
                        self.event(
                            out,
                            "response.output_item.added",
                            &format!("\"output_index\":{index},\"item\":{added}"),
                        );
                    }
                    json!({"id": id, "type": "local_shell_call", "status": "completed",
                           "call_id": call.id, "action": action})
                }
            };
            self.item_done(out, index, item);
        }
        self.calls.extend_from_slice(calls);
    }

    /// The end of a run: the open item is finished and the response completes (or is
    /// incomplete, when the model hit its token limit). Returns the response object.
    pub fn finish(&mut self, out: &mut BytesMut, finish_reason: &str, usage: &Usage) -> String {
        let incomplete = match finish_reason {
            "length" => Some("max_output_tokens"),
            "content_filter" => Some("content_filter"),
            _ => None,
        };
        self.close(
            out,
            if incomplete.is_some() {
                "incomplete"
            } else {
                "completed"
            },
        );
        let status = if incomplete.is_some() {
            "incomplete"
        } else {
            "completed"
        };
        let r = self.response(status, true, Some(usage), None, incomplete);
        if self.emit {
            self.event(
                out,
                &format!("response.{status}"),
                &format!("\"response\":{r}"),
            );
        }
        r
    }

    /// A run that failed after the stream started: `response.failed` with the error.
    pub fn fail(&mut self, out: &mut BytesMut, e: &ApiError) {
        self.close(out, "incomplete");
        let code = e.code.unwrap_or(match e.status.as_u16() {
            429 => "rate_limit_exceeded",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        });
        let error = json!({"code": code, "message": e.message});
        let r = self.response("failed", true, None, Some(&error), None);
        if self.emit {
            self.event(out, "response.failed", &format!("\"response\":{r}"));
        }
    }

    /// The response object.
    fn response(
        &self,
        status: &str,
        with_output: bool,
        usage: Option<&Usage>,
        error: Option<&Value>,
        incomplete: Option<&str>,
    ) -> String {
        let mut s = String::with_capacity(256 + self.echo.len());
        let _ = write!(
            s,
            "{{\"id\":\"{}\",\"object\":\"response\",\"created_at\":{},\"status\":\"{status}\",\"model\":{},\"output\":[",
            self.id,
            self.created_at,
            Value::from(self.model.as_str()),
        );
        if with_output {
            s.push_str(&self.items.join(","));
        }
        s.push_str("],\"usage\":");
        match usage {
            Some(u) => s.push_str(&usage_json(u).to_string()),
            None => s.push_str("null"),
        }
        s.push_str(",\"error\":");
        match error {
            Some(e) => s.push_str(&e.to_string()),
            None => s.push_str("null"),
        }
        s.push_str(",\"incomplete_details\":");
        match incomplete {
            Some(reason) => {
                let _ = write!(s, "{{\"reason\":\"{reason}\"}}");
            }
            None => s.push_str("null"),
        }
        if status == "completed" || status == "incomplete" {
            let _ = write!(s, ",\"completed_at\":{}", now_secs());
        }
        s.push_str(&self.echo);
        s.push('}');
        s
    }

    /// One SSE event: `fields` is the inside of the JSON object after `type` and
    /// `sequence_number`.
    fn event(&mut self, out: &mut BytesMut, name: &str, fields: &str) {
        let seq = self.seq;
        self.seq += 1;
        out.reserve(fields.len() + 2 * name.len() + 64);
        let _ = write!(
            out,
            "event: {name}\ndata: {{\"type\":\"{name}\",\"sequence_number\":{seq}"
        );
        if !fields.is_empty() {
            out.put_u8(b',');
            out.put_slice(fields.as_bytes());
        }
        out.put_slice(b"}\n\n");
    }
}

/// The response id of a run.
pub fn response_id(run_id: &str) -> String {
    format!("resp_{run_id}")
}

/// `usage` in the Responses shape. toolpilot's sums have no cached or reasoning token counts.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.total_tokens,
    })
}

/// The free-form input of a custom tool call: the `input` argument the model was asked for,
/// or (a model that ignored the schema) its only string argument, or the raw arguments.
fn custom_input(arguments: &str) -> String {
    if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(arguments) {
        if let Some(Value::String(s)) = o.get("input") {
            return s.clone();
        }
        let mut strings = o.values().filter_map(Value::as_str);
        if let (Some(only), None, 1) = (strings.next(), strings.next(), o.len()) {
            return only.to_string();
        }
    }
    arguments.to_string()
}

/// The `action` of a `local_shell_call` from the arguments of a `local_shell` function call.
fn shell_action(arguments: &str) -> Value {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    let command = match args.get("command") {
        Some(Value::Array(a)) => Value::Array(a.clone()),
        // A command line instead of an argument vector: run it with a shell.
        Some(Value::String(s)) => json!(["bash", "-lc", s]),
        _ => json!([]),
    };
    json!({
        "type": "exec",
        "command": command,
        "timeout_ms": args.get("timeout_ms").filter(|v| v.is_u64()).cloned().unwrap_or(Value::Null),
        "working_directory": args.get("workdir").filter(|v| v.is_string()).cloned().unwrap_or(Value::Null),
        "env": {},
        "user": null,
    })
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

    /// The events of an SSE body: (event line, data JSON).
    fn events(out: &BytesMut) -> Vec<(String, Value)> {
        std::str::from_utf8(out)
            .unwrap()
            .split("\n\n")
            .filter(|b| !b.is_empty())
            .map(|b| {
                let (ev, data) = b.split_once('\n').unwrap();
                let ev = ev.strip_prefix("event: ").unwrap().to_string();
                let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap())
                    .unwrap_or_else(|e| panic!("bad data {data:?}: {e}"));
                assert_eq!(data["type"], ev.as_str());
                (ev, data)
            })
            .collect()
    }

    fn encoder(emit: bool) -> Encoder {
        let mut echo = Map::new();
        echo.insert("instructions".into(), json!("be \"brief\""));
        echo.insert("tools".into(), json!([]));
        let shape = |kind, namespace: Option<&str>, name: &str| ToolShape {
            kind,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        };
        let kinds = HashMap::from([
            (
                "apply_patch".to_string(),
                shape(ToolKind::Custom, None, "apply_patch"),
            ),
            (
                "local_shell".to_string(),
                shape(ToolKind::LocalShell, None, "local_shell"),
            ),
            (
                "agents__spawn".to_string(),
                shape(ToolKind::Function, Some("agents"), "spawn"),
            ),
        ]);
        Encoder::new("r1", "m\"x", &echo, kinds, emit)
    }

    fn call(id: &str, name: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: args.into(),
            kind: None,
        }
    }

    #[test]
    fn a_streamed_response_is_a_consistent_event_sequence() {
        let mut e = encoder(true);
        let mut out = BytesMut::new();
        e.created(&mut out);
        e.reasoning(&mut out, "thinking");
        e.text(&mut out, "Hel");
        e.text(&mut out, "lo \"you\"\n");
        e.calls(&mut out, &[call("c1", "deploy", "{\"env\":\"prod\"}")]);
        let usage = Usage {
            prompt_tokens: 3,
            completion_tokens: 2,
            total_tokens: 5,
        };
        let body = e.finish(&mut out, "stop", &usage);
        let evs = events(&out);
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.reasoning_summary_part.added",
                "response.reasoning_summary_text.delta",
                "response.reasoning_summary_text.done",
                "response.reasoning_summary_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (_, d)) in evs.iter().enumerate() {
            assert_eq!(d["sequence_number"], i as u64);
        }
        assert_eq!(evs[0].1["response"]["status"], "in_progress");
        assert_eq!(evs[0].1["response"]["instructions"], "be \"brief\"");
        assert_eq!(evs[0].1["response"]["model"], "m\"x");
        assert_eq!(evs[10].1["item_id"], "msg_r1_1");
        assert_eq!(evs[10].1["output_index"], 1);
        assert_eq!(evs[11].1["delta"], "lo \"you\"\n");
        assert_eq!(evs[12].1["text"], "Hello \"you\"\n");
        assert_eq!(evs[16].1["output_index"], 2);
        assert_eq!(evs[17].1["arguments"], "{\"env\":\"prod\"}");
        let done: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(evs[19].1["response"], done);
        assert_eq!(done["status"], "completed");
        assert_eq!(done["id"], "resp_r1");
        assert_eq!(done["output"][0]["summary"][0]["text"], "thinking");
        assert_eq!(done["output"][1]["content"][0]["text"], "Hello \"you\"\n");
        assert_eq!(done["output"][2]["call_id"], "c1");
        assert_eq!(done["output"][2]["status"], "completed");
        assert_eq!(done["usage"]["input_tokens"], 3);
        assert_eq!(
            done["usage"]["output_tokens_details"]["reasoning_tokens"],
            0
        );
        assert_eq!(e.answer().0, "Hello \"you\"\n");
    }

    #[test]
    fn without_emit_only_the_output_is_built() {
        let mut e = encoder(false);
        let mut out = BytesMut::new();
        e.created(&mut out);
        e.text(&mut out, "a");
        e.reasoning(&mut out, "r");
        e.text(&mut out, "b");
        let body = e.finish(&mut out, "length", &Usage::default());
        assert!(out.is_empty());
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "incomplete");
        assert_eq!(v["incomplete_details"]["reason"], "max_output_tokens");
        let types: Vec<&str> = v["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["message", "reasoning", "message"]);
        assert_eq!(v["output"][0]["status"], "completed");
        assert_eq!(v["output"][2]["status"], "incomplete");
        assert_eq!(e.answer().0, "ab");
    }

    #[test]
    fn numbers_are_written_in_decimal() {
        for n in [0, 7, 10, 4096, u64::MAX] {
            let mut out = BytesMut::new();
            push_u64(&mut out, n);
            assert_eq!(&out[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn a_namespaced_tools_call_names_its_namespace_and_its_own_name() {
        let mut e = encoder(true);
        let mut out = BytesMut::new();
        e.calls(&mut out, &[call("a1", "agents__spawn", "{\"task\":\"x\"}")]);
        let evs = events(&out);
        let want = json!({"type": "function_call", "namespace": "agents", "name": "spawn",
                          "call_id": "a1", "arguments": "{\"task\":\"x\"}"});
        for (_, ev) in [&evs[0], &evs[3]] {
            let item = &ev["item"];
            for key in ["type", "namespace", "name", "call_id"] {
                assert_eq!(item[key], want[key], "{item}");
            }
        }
        assert_eq!(evs[3].1["item"]["arguments"], want["arguments"]);
        assert_eq!(evs[2].1["name"], "spawn");
    }

    #[test]
    fn custom_and_shell_calls_go_back_in_their_shape() {
        let mut e = encoder(true);
        let mut out = BytesMut::new();
        e.calls(
            &mut out,
            &[
                call("p1", "apply_patch", "{\"input\":\"*** Begin Patch\\n\"}"),
                call(
                    "s1",
                    "local_shell",
                    "{\"command\":[\"ls\",\"-la\"],\"workdir\":\"/w\"}",
                ),
                call("s2", "local_shell", "{\"command\":\"ls | wc -l\"}"),
            ],
        );
        let evs = events(&out);
        let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.output_item.added",
                "response.custom_tool_call_input.delta",
                "response.custom_tool_call_input.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.output_item.done",
                "response.output_item.added",
                "response.output_item.done",
            ]
        );
        let patch = &evs[3].1["item"];
        assert_eq!(patch["type"], "custom_tool_call");
        assert_eq!(patch["input"], "*** Begin Patch\n");
        let shell = &evs[5].1["item"];
        assert_eq!(shell["type"], "local_shell_call");
        assert_eq!(shell["action"]["command"], json!(["ls", "-la"]));
        assert_eq!(shell["action"]["working_directory"], "/w");
        assert_eq!(
            evs[7].1["item"]["action"]["command"],
            json!(["bash", "-lc", "ls | wc -l"])
        );
        assert_eq!(custom_input("{\"patch\":\"x\"}"), "x");
        assert_eq!(custom_input("not json"), "not json");
    }

    #[test]
    fn a_failure_closes_the_open_item_and_fails_the_response() {
        let mut e = encoder(true);
        let mut out = BytesMut::new();
        e.created(&mut out);
        e.text(&mut out, "partial");
        e.fail(
            &mut out,
            &ApiError::new(
                axum::http::StatusCode::BAD_GATEWAY,
                "upstream_error",
                "GPU on fire",
            ),
        );
        let evs = events(&out);
        let (name, last) = evs.last().unwrap();
        assert_eq!(name, "response.failed");
        assert_eq!(last["response"]["status"], "failed");
        assert_eq!(last["response"]["error"]["message"], "GPU on fire");
        assert_eq!(last["response"]["error"]["code"], "server_error");
        assert_eq!(last["response"]["output"][0]["status"], "incomplete");
        assert_eq!(evs[evs.len() - 2].0, "response.output_item.done");
    }
}
