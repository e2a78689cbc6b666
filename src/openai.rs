//! OpenAI chat-completions wire types and the validation of an incoming request.
//!
//! Nothing here does I/O. Messages and tool specs stay `serde_json::Value`s so that every
//! field a client sends (including ones toolpilot does not know) reaches the upstream
//! unchanged; only the fields toolpilot acts on are lifted into typed fields.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub mod fields;
pub mod responses;

use fields::{Fields, bool_at, str_at};

/// Why a request body is not a valid request (the server answers 400). Names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    /// The field at fault (`messages[2].role`), when one is.
    pub param: Option<String>,
    pub message: String,
    /// OpenAI's error `code`, when there is one (`invalid_json`).
    pub code: Option<&'static str>,
}

impl RequestError {
    /// A bad value of one field.
    pub fn invalid(param: &str, message: impl Into<String>) -> RequestError {
        RequestError {
            param: Some(param.to_string()),
            message: message.into(),
            code: None,
        }
    }

    /// A body that is not a JSON object.
    pub fn invalid_json(message: impl Into<String>) -> RequestError {
        RequestError {
            param: None,
            message: message.into(),
            code: Some("invalid_json"),
        }
    }
}

/// A validated `POST /v1/chat/completions` body.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// The model the client asked for (`--model` may override it upstream).
    pub model: Option<String>,
    /// The conversation, as sent (validated: objects with a known role).
    pub messages: Vec<Value>,
    pub stream: bool,
    /// `stream_options.include_usage`: send a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// The client's `tools`, as sent. `None` when the request had no `tools` field.
    pub tools: Option<Vec<Value>>,
    /// The file open in the client's editor, for `read_currently_open_file`. Comes from the
    /// `toolpilot.current_file` request field or the `X-Toolpilot-Current-File` header.
    pub current_file: Option<String>,
    /// Every other field, forwarded upstream unchanged.
    pub extra: Map<String, Value>,
}

/// Token usage, summed over every upstream round of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// A complete tool call from the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The raw arguments string as the model produced it (`"{}"` when it sent none).
    pub arguments: String,
    /// The call's `type` when it is not `function` (a type toolpilot does not run: the model
    /// is told so in the tool message). `None` for a function call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl ToolCall {
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// The assistant message that records one upstream round in the conversation.
pub fn assistant_message(content: &str, tool_calls: &[ToolCall]) -> Value {
    let mut m = Map::new();
    m.insert("role".into(), Value::from("assistant"));
    if tool_calls.is_empty() {
        m.insert("content".into(), Value::from(content));
    } else {
        // Some servers reject an empty string next to tool calls; null is what OpenAI sends.
        let content = if content.is_empty() {
            Value::Null
        } else {
            Value::from(content)
        };
        m.insert("content".into(), content);
        m.insert(
            "tool_calls".into(),
            Value::Array(tool_calls.iter().map(ToolCall::to_json).collect()),
        );
    }
    Value::Object(m)
}

/// A `role: tool` message carrying one tool result.
pub fn tool_message(tool_call_id: &str, content: String) -> Value {
    serde_json::json!({"role": "tool", "tool_call_id": tool_call_id, "content": content})
}

/// The name of a tool spec (`{"type":"function","function":{"name":…}}`), if it has one.
pub fn tool_spec_name(spec: &Value) -> Option<&str> {
    spec.get("function")?.get("name")?.as_str()
}

const ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

impl ChatRequest {
    /// Parses and validates a request body. Every failure names the offending field.
    pub fn from_slice(body: &[u8]) -> Result<ChatRequest, RequestError> {
        let map = json_object(body, "`model` and `messages`")?;
        ChatRequest::from_map(map)
    }

    pub fn from_map(map: Map<String, Value>) -> Result<ChatRequest, RequestError> {
        let mut f = Fields::new(map);
        let model = f
            .string("model", "a string")?
            .filter(|s| !s.trim().is_empty());

        let Some(messages) = f.array("messages", "an array of messages")? else {
            return Err(RequestError::invalid(
                "messages",
                "`messages` is required: a non-empty array of chat messages such as \
                 [{\"role\":\"user\",\"content\":\"hello\"}]",
            ));
        };
        if messages.is_empty() {
            return Err(RequestError::invalid(
                "messages",
                "`messages` is empty: send at least one message",
            ));
        }
        for (i, m) in messages.iter().enumerate() {
            validate_message(i, m)?;
        }

        let stream = f.bool("stream")?.unwrap_or(false);
        let include_usage = match f.object("stream_options", "an object")? {
            None => false,
            Some(o) => {
                bool_at("stream_options.include_usage", o.get("include_usage"))?.unwrap_or(false)
            }
        };

        match f.get("n") {
            None => {}
            Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
            Some(other) => {
                return Err(RequestError::invalid(
                    "n",
                    format!(
                        "n = {other} is not supported: toolpilot runs the tools of one \
                         conversation at a time; send n = 1 or leave it out"
                    ),
                ));
            }
        }

        let tools = f.array("tools", "an array of tool definitions")?;
        for (i, t) in tools.iter().flatten().enumerate() {
            validate_tool(i, t)?;
        }

        let current_file = match f.object("toolpilot", "an object")? {
            None => None,
            Some(o) => {
                if let Some(key) = o.keys().find(|k| *k != "current_file") {
                    return Err(RequestError::invalid(
                        &format!("toolpilot.{key}"),
                        format!(
                            "unknown field `toolpilot.{key}`; the `toolpilot` object accepts \
                             only `current_file`"
                        ),
                    ));
                }
                str_at(
                    "toolpilot.current_file",
                    "a path string",
                    o.get("current_file"),
                )?
                .map(str::to_string)
            }
        };

        Ok(ChatRequest {
            model,
            messages,
            stream,
            include_usage,
            tools,
            current_file,
            extra: f.rest(),
        })
    }
}

fn validate_message(i: usize, m: &Value) -> Result<(), RequestError> {
    let param = format!("messages[{i}]");
    let Value::Object(o) = m else {
        return Err(RequestError::invalid(
            &param,
            format!(
                "{param} must be an object with `role` and `content`, got {}",
                kind_of(m)
            ),
        ));
    };
    let role = match o.get("role") {
        Some(Value::String(r)) => r.as_str(),
        None => {
            return Err(RequestError::invalid(
                &format!("{param}.role"),
                format!("{param} has no `role`; use one of {}", ROLES.join(", ")),
            ));
        }
        Some(other) => {
            return Err(RequestError::invalid(
                &format!("{param}.role"),
                format!("{param}.role must be a string, got {}", kind_of(other)),
            ));
        }
    };
    if !ROLES.contains(&role) {
        return Err(RequestError::invalid(
            &format!("{param}.role"),
            format!(
                "{param}.role \"{role}\" is not a chat role; use one of {}",
                ROLES.join(", ")
            ),
        ));
    }
    match o.get("content") {
        None | Some(Value::Null) | Some(Value::String(_)) | Some(Value::Array(_)) => {}
        Some(other) => {
            return Err(RequestError::invalid(
                &format!("{param}.content"),
                format!(
                    "{param}.content must be a string or an array of content parts, got {}",
                    kind_of(other)
                ),
            ));
        }
    }
    if role == "tool" && !matches!(o.get("tool_call_id"), Some(Value::String(_))) {
        return Err(RequestError::invalid(
            &format!("{param}.tool_call_id"),
            format!(
                "{param} has role \"tool\" but no `tool_call_id`; a tool result must name the \
                 assistant tool call it answers"
            ),
        ));
    }
    if let Some(calls) = o.get("tool_calls") {
        let ok = match calls {
            Value::Null => true,
            Value::Array(a) => a.iter().all(|c| {
                c.get("function")
                    .and_then(|f| f.get("name"))
                    .is_some_and(Value::is_string)
            }),
            _ => false,
        };
        if !ok {
            return Err(RequestError::invalid(
                &format!("{param}.tool_calls"),
                format!(
                    "{param}.tool_calls must be an array of {{\"id\",\"type\":\"function\",\
                     \"function\":{{\"name\",\"arguments\"}}}} objects"
                ),
            ));
        }
    }
    Ok(())
}

fn validate_tool(i: usize, t: &Value) -> Result<(), RequestError> {
    let param = format!("tools[{i}]");
    let Value::Object(o) = t else {
        return Err(RequestError::invalid(
            &param,
            format!("{param} must be an object, got {}", kind_of(t)),
        ));
    };
    // Non-function tool types are the client's business; forward them untouched.
    if o.get("type").and_then(Value::as_str).unwrap_or("function") != "function" {
        return Ok(());
    }
    match o.get("function").and_then(|f| f.get("name")) {
        Some(Value::String(name)) if !name.is_empty() => Ok(()),
        _ => Err(RequestError::invalid(
            &format!("{param}.function.name"),
            format!(
                "{param} needs `function.name`: tools look like {{\"type\":\"function\",\
                 \"function\":{{\"name\":\"…\",\"parameters\":{{…}}}}}}"
            ),
        )),
    }
}

/// A request body as a JSON object; `fields` names what it should hold (for the error).
pub fn json_object(body: &[u8], fields: &str) -> Result<Map<String, Value>, RequestError> {
    let invalid = RequestError::invalid_json;
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(invalid(format!(
            "the request body must be a JSON object with {fields}, got {}",
            kind_of(&other)
        ))),
        Err(e) => Err(invalid(format!("the request body is not valid JSON: {e}"))),
    }
}

/// "a string", "an array", … for error messages.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_err(body: &str, expected: &str) {
        let err = ChatRequest::from_slice(body.as_bytes()).unwrap_err();
        assert!(
            err.message.contains(expected),
            "error {:?} does not contain {expected:?}",
            err.message
        );
    }

    #[test]
    fn rejects_bad_requests_with_specific_messages() {
        check_err("{", "not valid JSON");
        check_err("[1]", "must be a JSON object");
        check_err(r#"{"model":"m"}"#, "`messages` is required");
        check_err(r#"{"messages":[]}"#, "`messages` is empty");
        check_err(r#"{"messages":"hi"}"#, "`messages` must be an array");
        check_err(r#"{"messages":[1]}"#, "messages[0] must be an object");
        check_err(
            r#"{"messages":[{"content":"x"}]}"#,
            "messages[0] has no `role`",
        );
        check_err(
            r#"{"messages":[{"role":"robot"}]}"#,
            "\"robot\" is not a chat role",
        );
        check_err(
            r#"{"messages":[{"role":"user","content":5}]}"#,
            "content must be a string",
        );
        check_err(
            r#"{"messages":[{"role":"tool","content":"x"}]}"#,
            "no `tool_call_id`",
        );
        check_err(
            r#"{"messages":[{"role":"user","content":"x"}],"n":2}"#,
            "n = 2 is not supported",
        );
        check_err(
            r#"{"messages":[{"role":"user","content":"x"}],"stream":"yes"}"#,
            "`stream` must be",
        );
        check_err(
            r#"{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]}"#,
            "tools[0] needs `function.name`",
        );
        check_err(
            r#"{"messages":[{"role":"user","content":"x"}],"toolpilot":{"x":1}}"#,
            "unknown field `toolpilot.x`",
        );
    }

    #[test]
    fn keeps_unknown_fields_for_the_upstream() {
        let r = ChatRequest::from_slice(
            br#"{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":0.2,
                "stream":true,"stream_options":{"include_usage":true},"seed":7,"n":1,
                "toolpilot":{"current_file":"src/a.rs"}}"#,
        )
        .unwrap();
        assert!(r.stream && r.include_usage);
        assert_eq!(r.current_file.as_deref(), Some("src/a.rs"));
        assert_eq!(r.extra.get("temperature"), Some(&serde_json::json!(0.2)));
        assert_eq!(r.extra.get("seed"), Some(&serde_json::json!(7)));
        assert!(!r.extra.contains_key("stream_options"));
    }
}
