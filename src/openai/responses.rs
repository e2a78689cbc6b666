//! The Responses API request (`POST /v1/responses`), mapped onto a chat-completions
//! [`ChatRequest`] so that the same loop serves both APIs.
//!
//! Nothing here does I/O, and nothing here knows about the stored conversations that
//! `previous_response_id` refers to: the caller looks one up and hands it to
//! [`ResponsesRequest::with_prior`]. The mapping, in short:
//!
//! - `instructions` → a `system` message first; `input` (a string, or a list of items) → the
//!   messages: `message` items by role (`developer` → `system`), their text parts joined, images
//!   as `image_url` parts; `function_call`, `custom_tool_call` and `local_shell_call` items →
//!   assistant `tool_calls` (consecutive calls, and the assistant text before them, in one
//!   message); `function_call_output` / `custom_tool_call_output` → `role: tool` messages;
//!   `reasoning` and the other items a chat model cannot read are dropped.
//! - `tools`: `function` tools → chat function tools; `custom` tools (free-form input, such
//!   as Codex's `apply_patch`) → a function with one string parameter `input`; `local_shell`
//!   → a function `local_shell`. OpenAI's hosted tools (`web_search`, `file_search`, …) cannot
//!   run here and are dropped (logged). [`ToolKind`] remembers which client tool had which
//!   shape, so its calls go back as the matching output item.
//! - Options: `max_output_tokens` → `max_tokens`, `text.format` → `response_format`,
//!   `text.verbosity` → `verbosity`, `reasoning.effort` → `reasoning_effort`, `tool_choice`
//!   into the chat shape; `temperature`, `top_p`, `parallel_tool_calls`, `user`,
//!   `safety_identifier`, `prompt_cache_key`, `service_tier` as they are. What has no chat
//!   equivalent is not forwarded (a strict upstream would reject it): `store`, `include`,
//!   `metadata` (echoed in the response), `truncation`, … are accepted and ignored, other
//!   unknown fields are logged and ignored; what toolpilot cannot honour (`conversation`,
//!   `prompt`, `background: true`, `item_reference`) is a 400 that says so.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::fields::{Fields, bool_at, str_at, wrong_type};
use super::{ChatRequest, RequestError, kind_of};

/// How a client tool was declared, so that its calls go back to the client in that shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// `{"type":"function"}`: calls are `function_call` items.
    Function,
    /// `{"type":"custom"}` (free-form text input): offered upstream as a function whose one
    /// string parameter is `input`; calls are `custom_tool_call` items.
    Custom,
    /// `{"type":"local_shell"}`: offered as a function named `local_shell`; calls are
    /// `local_shell_call` items.
    LocalShell,
}

/// A client tool whose calls do not go back as a plain `function_call` of the name the model
/// called: a free-form or shell tool, or a tool declared inside a `namespace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolShape {
    pub kind: ToolKind,
    /// The namespace the tool was declared in (Codex groups its sub-agent tools so); its calls
    /// name it, and `name` is then the tool's own name inside it.
    pub namespace: Option<String>,
    /// The tool's name as the client declared it.
    pub name: String,
}

/// The one name a namespaced tool has upstream: chat function names are flat (and limited
/// to letters, digits, `_` and `-`), so the namespace and the name are joined with `__`
/// (Codex's MCP namespaces already end in `__`, and are not doubled).
pub fn namespaced_name(namespace: &str, name: &str) -> String {
    if namespace.ends_with("__") {
        format!("{namespace}{name}")
    } else {
        format!("{namespace}__{name}")
    }
}

/// The name of the function that stands for the `local_shell` tool upstream.
pub const LOCAL_SHELL: &str = "local_shell";

/// Hosted tools: OpenAI runs them on its side, so a chat-completions upstream cannot. They are
/// dropped from the offer (Codex sends `web_search` when search is on).
const HOSTED_TOOLS: &[&str] = &[
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "web_search_2025_08_26",
    "file_search",
    "computer_use",
    "computer_use_preview",
    "code_interpreter",
    "image_generation",
    "mcp",
];

/// Input items that carry nothing a chat model can read (reasoning, OpenAI-side compaction,
/// the traces of hosted tools); dropped.
const DROPPED_ITEMS: &[&str] = &[
    "reasoning",
    "compaction",
    "compaction_summary",
    "ghost_snapshot",
    "web_search_call",
    "file_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "mcp_list_tools",
];

/// Fields accepted and ignored: OpenAI-side storage and streaming options, and sampling
/// options chat completions has no equivalent for.
const IGNORED_FIELDS: &[&str] = &[
    "include",
    "stream_options",
    "truncation",
    "max_tool_calls",
    "top_logprobs",
    "prompt_cache_retention",
    "client_metadata",
    "background",
];

/// Fields forwarded upstream unchanged (the chat-completions parameters of the same name).
const FORWARDED_FIELDS: &[&str] = &[
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
];

/// A validated `POST /v1/responses` body, as a chat request plus what the response needs.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    /// The chat request the run gets: `instructions` as the first message, then the input.
    pub chat: ChatRequest,
    pub previous_response_id: Option<String>,
    /// `store` (default true): whether this response may be continued with
    /// `previous_response_id`.
    pub store: bool,
    /// The client tools that are not plain functions, by the name the model calls them by.
    pub kinds: HashMap<String, ToolShape>,
    /// Request parameters the response object repeats (`instructions`, `tools`, `metadata`,
    /// `temperature`, …), with the API's defaults for those not sent.
    pub echo: Map<String, Value>,
    /// Whether `chat.messages` starts with the `instructions` message.
    has_instructions: bool,
    /// Outputs whose call is not in `input` (input index, call id): allowed only when they
    /// answer a call of the previous response.
    unmatched: Vec<(usize, String)>,
}

impl ResponsesRequest {
    /// Parses and validates a request body. Every failure names the offending field.
    pub fn from_slice(body: &[u8]) -> Result<ResponsesRequest, RequestError> {
        let map = crate::openai::json_object(body, "`model` and `input`")?;
        ResponsesRequest::from_map(map)
    }

    pub fn from_map(map: Map<String, Value>) -> Result<ResponsesRequest, RequestError> {
        let mut f = Fields::new(map);
        refuse_unsupported(&f)?;
        let mut chat = Map::new();
        let mut echo = Map::new();
        // Read by the chat request as they are.
        for key in ["model", "stream", "toolpilot"] {
            if let Some(v) = f.remove(key) {
                chat.insert(key.into(), v);
            }
        }
        let instructions = f.string("instructions", "a string (the system message)")?;
        echo.insert("instructions".into(), instructions.clone().into());
        let previous_response_id = previous_response_id(&mut f)?;
        echo.insert(
            "previous_response_id".into(),
            previous_response_id.clone().into(),
        );
        let store = f.bool("store")?.unwrap_or(true);
        echo.insert("store".into(), Value::Bool(store));
        // Tools first: the input's calls of custom tools need their kinds.
        let kinds = tools(&mut f, &mut chat, &mut echo)?;
        options(&mut f, &mut chat, &mut echo)?;
        // Input last: everything it refers to is known by now.
        let mut conv = Conversation::default();
        if let Some(text) = &instructions {
            conv.messages
                .push(json!({"role": "system", "content": text}));
        }
        conv.input(f.take("input"), previous_response_id.is_some())?;
        if previous_response_id.is_none()
            && let Some((i, id)) = conv.unmatched.first()
        {
            return Err(unmatched_output(*i, id, false));
        }
        let rest = f.rest();
        if !rest.is_empty() {
            let keys: Vec<&str> = rest.keys().map(String::as_str).collect();
            tracing::warn!(
                fields = ?keys,
                "ignored unknown fields of a Responses request (not forwarded upstream)"
            );
        }
        let unmatched = std::mem::take(&mut conv.unmatched);
        // Empty only with previous_response_id and an empty input: the stored conversation
        // fills it in `with_prior`. (Chat validation wants a message meanwhile.)
        let empty = conv.messages.is_empty();
        let messages = if empty {
            vec![json!({"role": "user", "content": ""})]
        } else {
            conv.messages
        };
        chat.insert("messages".into(), Value::Array(messages));
        let mut chat = ChatRequest::from_map(chat)?;
        if empty {
            chat.messages.clear();
        }
        Ok(ResponsesRequest {
            chat,
            previous_response_id,
            store,
            kinds,
            echo,
            has_instructions: instructions.is_some(),
            unmatched,
        })
    }

    /// Continues a stored conversation: `prior` (the messages of the previous response, its
    /// answer included, without its instructions) goes after this request's instructions and
    /// before its input. Every tool output in the input must answer a call made there or in
    /// the input.
    pub fn with_prior(&mut self, prior: &[Value]) -> Result<(), RequestError> {
        let known: HashSet<&str> = prior
            .iter()
            .filter_map(|m| m.get("tool_calls")?.as_array())
            .flatten()
            .filter_map(|c| c.get("id")?.as_str())
            .collect();
        if let Some((i, id)) = self
            .unmatched
            .iter()
            .find(|(_, id)| !known.contains(id.as_str()))
        {
            return Err(unmatched_output(*i, id, true));
        }
        let at = usize::from(self.has_instructions);
        self.chat.messages.splice(at..at, prior.iter().cloned());
        if self.chat.messages.is_empty() {
            return Err(RequestError::invalid(
                "input",
                "`input` is empty and the previous response has no messages: send at least \
                 one input item",
            ));
        }
        Ok(())
    }

    /// The conversation as the client sees it: the messages without the instructions (which,
    /// as with OpenAI, a continuation does not inherit).
    pub fn conversation(&self) -> &[Value] {
        let at = usize::from(self.has_instructions).min(self.chat.messages.len());
        &self.chat.messages[at..]
    }
}

/// What toolpilot cannot honour: OpenAI-side conversations and prompt templates, and
/// background responses.
fn refuse_unsupported(f: &Fields) -> Result<(), RequestError> {
    for (key, what) in [
        ("conversation", "conversations are stored by OpenAI"),
        ("prompt", "prompt templates are stored by OpenAI"),
    ] {
        if f.get(key).is_some() {
            return Err(RequestError::invalid(
                key,
                format!(
                    "`{key}` is not supported: {what}, and toolpilot cannot read them; send \
                     the conversation in `input` (or continue a response of this server \
                     with `previous_response_id`)"
                ),
            ));
        }
    }
    if bool_at("background", f.get("background"))? == Some(true) {
        return Err(RequestError::invalid(
            "background",
            "`background: true` is not supported; toolpilot answers in the request \
             (with the header `x-toolpilot-detach: true` a run goes on without its \
             client and can be re-attached with GET /v1/runs/{id}/attach)",
        ));
    }
    Ok(())
}

/// `previous_response_id`: a non-empty string.
fn previous_response_id(f: &mut Fields) -> Result<Option<String>, RequestError> {
    const KEY: &str = "previous_response_id";
    const MUST_BE: &str = "the id of an earlier response (\"resp_…\")";
    match f.string(KEY, MUST_BE)? {
        Some(s) if s.trim().is_empty() => Err(wrong_type(KEY, MUST_BE, &Value::String(s))),
        id => Ok(id),
    }
}

/// `tools` → chat function tools (and `tool_choice`, `parallel_tool_calls`); returns the
/// kinds of the client tools that are not plain functions.
fn tools(
    f: &mut Fields,
    chat: &mut Map<String, Value>,
    echo: &mut Map<String, Value>,
) -> Result<HashMap<String, ToolShape>, RequestError> {
    let list = f.array(
        "tools",
        "an array of tool definitions such as \
         {\"type\":\"function\",\"name\":\"…\",\"parameters\":{…}}",
    )?;
    let kinds = match list {
        None => {
            echo.insert("tools".into(), json!([]));
            HashMap::new()
        }
        Some(list) => {
            let (specs, kinds) = map_tools(&list)?;
            echo.insert("tools".into(), Value::Array(list));
            chat.insert("tools".into(), Value::Array(specs));
            kinds
        }
    };
    match f.take("tool_choice") {
        None => {
            echo.insert("tool_choice".into(), Value::from("auto"));
        }
        Some(choice) => {
            chat.insert("tool_choice".into(), map_tool_choice(&choice)?);
            echo.insert("tool_choice".into(), choice);
        }
    }
    let parallel = f.bool("parallel_tool_calls")?;
    if let Some(b) = parallel {
        chat.insert("parallel_tool_calls".into(), Value::Bool(b));
    }
    echo.insert(
        "parallel_tool_calls".into(),
        Value::Bool(parallel.unwrap_or(true)),
    );
    Ok(kinds)
}

/// The options: sampling, `max_output_tokens`, `text`, `reasoning`, `metadata`, the
/// forwarded and the ignored fields; into their chat names, and what the response repeats.
fn options(
    f: &mut Fields,
    chat: &mut Map<String, Value>,
    echo: &mut Map<String, Value>,
) -> Result<(), RequestError> {
    for key in ["temperature", "top_p"] {
        let n = f.number(key, "a number")?;
        if let Some(n) = &n {
            chat.insert(key.into(), Value::Number(n.clone()));
        }
        echo.insert(key.into(), n.map_or(Value::Null, Value::Number));
    }
    match f.take("max_output_tokens") {
        None => {
            echo.insert("max_output_tokens".into(), Value::Null);
        }
        Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => {
            chat.insert("max_tokens".into(), Value::Number(n.clone()));
            echo.insert("max_output_tokens".into(), Value::Number(n));
        }
        Some(other) => {
            return Err(RequestError::invalid(
                "max_output_tokens",
                format!("`max_output_tokens` must be a positive integer, got {other}"),
            ));
        }
    }
    let text = f.object("text", "an object such as {\"format\":{\"type\":\"text\"}}")?;
    let mut shown = text.clone().unwrap_or_default();
    if let Some(text) = &text {
        if let Some(format) = text.get("format").filter(|f| !f.is_null())
            && let Some(rf) = map_text_format(format)?
        {
            chat.insert("response_format".into(), rf);
        }
        let verbosity = str_at(
            "text.verbosity",
            "\"low\", \"medium\" or \"high\"",
            text.get("verbosity"),
        )?;
        if let Some(v) = verbosity {
            chat.insert("verbosity".into(), Value::from(v));
        }
    }
    shown
        .entry("format")
        .or_insert_with(|| json!({"type": "text"}));
    echo.insert("text".into(), Value::Object(shown));
    let reasoning = f.object("reasoning", "an object such as {\"effort\":\"medium\"}")?;
    if let Some(r) = &reasoning {
        let effort = str_at(
            "reasoning.effort",
            "a string such as \"medium\"",
            r.get("effort"),
        )?;
        if let Some(e) = effort {
            chat.insert("reasoning_effort".into(), Value::from(e));
        }
    }
    echo.insert(
        "reasoning".into(),
        reasoning.map_or(Value::Null, Value::Object),
    );
    let metadata = f.object("metadata", "an object of strings")?;
    echo.insert(
        "metadata".into(),
        Value::Object(metadata.unwrap_or_default()),
    );
    for key in FORWARDED_FIELDS {
        if let Some(v) = f.take(key) {
            echo.insert((*key).into(), v.clone());
            chat.insert((*key).into(), v);
        }
    }
    for key in IGNORED_FIELDS {
        if let Some(v) = f.remove(key)
            && matches!(*key, "truncation" | "max_tool_calls" | "top_logprobs")
        {
            echo.insert((*key).into(), v);
        }
    }
    echo.entry("truncation")
        .or_insert_with(|| Value::from("disabled"));
    echo.insert("background".into(), Value::Bool(false));
    Ok(())
}

fn unmatched_output(i: usize, id: &str, had_prior: bool) -> RequestError {
    let hint = if had_prior {
        "neither in `input` nor in the previous response"
    } else {
        "in `input` (include the function_call item before its output, or send the \
         previous_response_id of the response that made the call)"
    };
    RequestError::invalid(
        &format!("input[{i}].call_id"),
        format!(
            "input[{i}] is the output of call {id:?}, but no call with that id was made {hint}"
        ),
    )
}

/// Builds the chat messages from input items.
#[derive(Default)]
struct Conversation {
    messages: Vec<Value>,
    /// Ids of the calls made so far.
    calls: HashSet<String>,
    /// Outputs of calls not (yet) seen: (input index, call id).
    unmatched: Vec<(usize, String)>,
}

impl Conversation {
    /// `input`: a string (the user's message) or a list of items; empty only when the
    /// conversation continues a previous response.
    fn input(&mut self, input: Option<Value>, continues: bool) -> Result<(), RequestError> {
        match input {
            None => Err(RequestError::invalid(
                "input",
                "`input` is required: a string (the user's message) or an array of input \
                 items such as [{\"role\":\"user\",\"content\":\"hello\"}]",
            )),
            Some(Value::String(s)) => {
                self.messages.push(json!({"role": "user", "content": s}));
                Ok(())
            }
            Some(Value::Array(items)) if items.is_empty() && !continues => Err(
                RequestError::invalid("input", "`input` is empty: send at least one input item"),
            ),
            Some(Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    self.item(i, item)?;
                }
                Ok(())
            }
            Some(other) => Err(wrong_type(
                "input",
                "a string or an array of input items",
                &other,
            )),
        }
    }

    fn item(&mut self, i: usize, item: &Value) -> Result<(), RequestError> {
        let param = format!("input[{i}]");
        let Value::Object(o) = item else {
            return Err(RequestError::invalid(
                &param,
                format!(
                    "{param} must be an input item (an object such as {{\"role\":\"user\",\
                     \"content\":\"…\"}}), got {}",
                    kind_of(item)
                ),
            ));
        };
        let kind = match o.get("type") {
            None | Some(Value::Null) if o.contains_key("role") => "message",
            None | Some(Value::Null) => {
                return Err(RequestError::invalid(
                    &format!("{param}.type"),
                    format!("{param} has neither `type` nor `role`"),
                ));
            }
            Some(Value::String(t)) => t.as_str(),
            Some(other) => {
                return Err(RequestError::invalid(
                    &format!("{param}.type"),
                    format!("{param}.type must be a string, got {}", kind_of(other)),
                ));
            }
        };
        match kind {
            "message" => self.message(&param, o),
            "function_call" => {
                let call_id = required_str(o, &param, "call_id")?;
                let name = call_name(o, &param)?;
                let arguments = match o.get("arguments") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Object(a)) => Value::Object(a.clone()).to_string(),
                    Some(other) => {
                        return Err(RequestError::invalid(
                            &format!("{param}.arguments"),
                            format!(
                                "{param}.arguments must be a JSON string, got {}",
                                kind_of(other)
                            ),
                        ));
                    }
                };
                self.call(call_id, &name, arguments);
                Ok(())
            }
            "custom_tool_call" => {
                let call_id = required_str(o, &param, "call_id")?;
                let name = call_name(o, &param)?;
                let input = match o.get("input") {
                    None | Some(Value::Null) => "",
                    Some(Value::String(s)) => s.as_str(),
                    Some(other) => {
                        return Err(RequestError::invalid(
                            &format!("{param}.input"),
                            format!("{param}.input must be a string, got {}", kind_of(other)),
                        ));
                    }
                };
                self.call(call_id, &name, json!({"input": input}).to_string());
                Ok(())
            }
            "local_shell_call" => {
                let call_id = match (o.get("call_id"), o.get("id")) {
                    (Some(Value::String(c)), _) | (_, Some(Value::String(c))) if !c.is_empty() => {
                        c.as_str()
                    }
                    _ => {
                        return Err(RequestError::invalid(
                            &format!("{param}.call_id"),
                            format!("{param} (a local_shell_call) has no `call_id`"),
                        ));
                    }
                };
                let action = o.get("action").cloned().unwrap_or(Value::Null);
                let mut args = Map::new();
                args.insert(
                    "command".into(),
                    action.get("command").cloned().unwrap_or_else(|| json!([])),
                );
                if let Some(w) = action.get("working_directory").filter(|v| !v.is_null()) {
                    args.insert("workdir".into(), w.clone());
                }
                if let Some(t) = action.get("timeout_ms").filter(|v| !v.is_null()) {
                    args.insert("timeout_ms".into(), t.clone());
                }
                self.call(call_id, LOCAL_SHELL, Value::Object(args).to_string());
                Ok(())
            }
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                let call_id = match (o.get("call_id"), o.get("id"), kind) {
                    (Some(Value::String(c)), _, _) if !c.is_empty() => c.as_str(),
                    // `local_shell_call_output` names its call by `id`.
                    (_, Some(Value::String(c)), "local_shell_call_output") if !c.is_empty() => {
                        c.as_str()
                    }
                    _ => {
                        return Err(RequestError::invalid(
                            &format!("{param}.call_id"),
                            format!(
                                "{param} (a {kind}) has no `call_id`: a tool output must name \
                                 the call it answers"
                            ),
                        ));
                    }
                };
                let content = tool_output(&format!("{param}.output"), o.get("output"))?;
                if !self.calls.contains(call_id) {
                    self.unmatched.push((i, call_id.to_string()));
                }
                self.messages
                    .push(json!({"role": "tool", "tool_call_id": call_id, "content": content}));
                Ok(())
            }
            "item_reference" => Err(RequestError::invalid(
                &param,
                format!(
                    "{param} is an item_reference, which toolpilot cannot resolve (it keeps no \
                     items by id); send the item itself, or continue a response of this server \
                     with `previous_response_id`"
                ),
            )),
            k if DROPPED_ITEMS.contains(&k) => {
                tracing::debug!(item = k, "dropped an input item a chat model cannot read");
                Ok(())
            }
            other => Err(RequestError::invalid(
                &format!("{param}.type"),
                format!(
                    "{param}.type {other:?} is not an input item toolpilot can pass to a chat \
                     model; it accepts message, function_call, function_call_output, \
                     custom_tool_call, custom_tool_call_output, local_shell_call and \
                     local_shell_call_output (reasoning items are dropped)"
                ),
            )),
        }
    }

    fn message(&mut self, param: &str, o: &Map<String, Value>) -> Result<(), RequestError> {
        let role = match o.get("role") {
            Some(Value::String(r)) => r.as_str(),
            _ => {
                return Err(RequestError::invalid(
                    &format!("{param}.role"),
                    format!(
                        "{param} is a message without a `role`; use user, assistant, system or \
                         developer"
                    ),
                ));
            }
        };
        let role = match role {
            "user" | "assistant" | "system" => role,
            "developer" => "system",
            other => {
                return Err(RequestError::invalid(
                    &format!("{param}.role"),
                    format!(
                        "{param}.role {other:?} is not a message role; use user, assistant, \
                         system or developer"
                    ),
                ));
            }
        };
        let content = message_content(param, role, o.get("content"))?;
        if role == "assistant" {
            // Consecutive assistant messages (an answer split by a reasoning item) are one
            // message to a chat model.
            if let Some(last) = self.messages.last_mut()
                && last["role"] == "assistant"
                && last.get("tool_calls").is_none()
            {
                let add = content.as_str().unwrap_or_default();
                let prev = last["content"].as_str().unwrap_or_default();
                let joined = join_text(prev, add);
                last["content"] = Value::from(joined);
                return Ok(());
            }
        }
        self.messages
            .push(json!({"role": role, "content": content}));
        Ok(())
    }

    /// An assistant tool call: joins the assistant message just before it (its text, or the
    /// calls made with it).
    fn call(&mut self, call_id: &str, name: &str, arguments: String) {
        self.calls.insert(call_id.to_string());
        let call = json!({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": arguments}});
        if let Some(last) = self.messages.last_mut()
            && last["role"] == "assistant"
        {
            match last.get_mut("tool_calls").and_then(Value::as_array_mut) {
                Some(calls) => calls.push(call),
                None => {
                    if last["content"].as_str().is_some_and(str::is_empty) {
                        last["content"] = Value::Null;
                    }
                    last["tool_calls"] = json!([call]);
                }
            }
            return;
        }
        self.messages
            .push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
    }
}

/// The name a call item's tool has upstream: `name`, joined to `namespace` when the call names
/// one (as the calls of a namespaced tool do).
fn call_name(o: &Map<String, Value>, param: &str) -> Result<String, RequestError> {
    let name = required_str(o, param, "name")?;
    Ok(match o.get("namespace") {
        Some(Value::String(ns)) if !ns.is_empty() => namespaced_name(ns, name),
        _ => name.to_string(),
    })
}

fn required_str<'a>(
    o: &'a Map<String, Value>,
    param: &str,
    key: &str,
) -> Result<&'a str, RequestError> {
    match o.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        _ => {
            let kind = o.get("type").and_then(Value::as_str).unwrap_or("item");
            Err(RequestError::invalid(
                &format!("{param}.{key}"),
                format!("{param} (a {kind}) needs `{key}`, a non-empty string"),
            ))
        }
    }
}

/// Two pieces of one answer: kept as they are when a separator is already there.
fn join_text(a: &str, b: &str) -> String {
    if a.is_empty() {
        return b.to_string();
    }
    if b.is_empty() {
        return a.to_string();
    }
    let sep = if a.ends_with(char::is_whitespace) || b.starts_with(char::is_whitespace) {
        ""
    } else {
        "\n\n"
    };
    format!("{a}{sep}{b}")
}

/// A message's content in chat form: a string when it is all text (parts joined by a blank
/// line), else an array of chat content parts.
fn message_content(
    param: &str,
    role: &str,
    content: Option<&Value>,
) -> Result<Value, RequestError> {
    let parts = match content {
        None | Some(Value::Null) => return Ok(Value::from("")),
        Some(Value::String(s)) => return Ok(Value::from(s.as_str())),
        Some(Value::Array(parts)) => parts,
        Some(other) => {
            return Err(RequestError::invalid(
                &format!("{param}.content"),
                format!(
                    "{param}.content must be a string or an array of content parts, got {}",
                    kind_of(other)
                ),
            ));
        }
    };
    let mut texts: Vec<&str> = Vec::new();
    let mut chat_parts: Vec<Value> = Vec::new();
    let mut rich = false;
    for (j, part) in parts.iter().enumerate() {
        let pp = format!("{param}.content[{j}]");
        let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "input_text" | "output_text" | "text" | "refusal" => {
                let key = if kind == "refusal" { "refusal" } else { "text" };
                let Some(text) = part.get(key).and_then(Value::as_str) else {
                    return Err(RequestError::invalid(
                        &format!("{pp}.{key}"),
                        format!("{pp} (a {kind} part) needs `{key}`, a string"),
                    ));
                };
                texts.push(text);
                chat_parts.push(json!({"type": "text", "text": text}));
            }
            "input_image" | "input_file" if role == "assistant" => {
                return Err(RequestError::invalid(
                    &format!("{pp}.type"),
                    format!(
                        "{pp} is an {kind} in an assistant message; assistant messages carry text"
                    ),
                ));
            }
            "input_image" => {
                rich = true;
                let url = match (part.get("image_url"), part.get("file_id")) {
                    (Some(Value::String(u)), _) => u.as_str(),
                    (_, Some(Value::String(_))) => {
                        return Err(RequestError::invalid(
                            &format!("{pp}.file_id"),
                            format!(
                                "{pp} names an uploaded file (`file_id`); toolpilot has no Files \
                                 API: send the image as `image_url` (an https: or data: URL)"
                            ),
                        ));
                    }
                    _ => {
                        return Err(RequestError::invalid(
                            &format!("{pp}.image_url"),
                            format!("{pp} (an input_image) needs `image_url`"),
                        ));
                    }
                };
                let mut image = json!({"url": url});
                if let Some(d) = part.get("detail").and_then(Value::as_str) {
                    image["detail"] = Value::from(d);
                }
                chat_parts.push(json!({"type": "image_url", "image_url": image}));
            }
            "input_file" => {
                rich = true;
                let Some(data) = part.get("file_data").and_then(Value::as_str) else {
                    return Err(RequestError::invalid(
                        &format!("{pp}.file_data"),
                        format!(
                            "{pp} is an input_file without `file_data`; toolpilot has no Files \
                             API and does not fetch `file_url`: send the file's content as \
                             `file_data`"
                        ),
                    ));
                };
                let mut file = json!({"file_data": data});
                if let Some(name) = part.get("filename").and_then(Value::as_str) {
                    file["filename"] = Value::from(name);
                }
                chat_parts.push(json!({"type": "file", "file": file}));
            }
            other => {
                return Err(RequestError::invalid(
                    &format!("{pp}.type"),
                    format!(
                        "{pp}.type {other:?} is not a content part toolpilot understands; use \
                         input_text, output_text, input_image or input_file"
                    ),
                ));
            }
        }
    }
    Ok(if rich {
        Value::Array(chat_parts)
    } else {
        Value::from(texts.join("\n\n"))
    })
}

/// A tool output as the text of a `role: tool` message.
fn tool_output(param: &str, output: Option<&Value>) -> Result<String, RequestError> {
    match output {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        // An older shape: `{"content": "…", "success": false}`.
        Some(Value::Object(o)) if o.get("content").is_some_and(Value::is_string) => {
            Ok(o["content"].as_str().unwrap_or_default().to_string())
        }
        Some(Value::Array(parts)) => {
            let mut texts = Vec::new();
            for (j, p) in parts.iter().enumerate() {
                match p.get("type").and_then(Value::as_str).unwrap_or("") {
                    "input_text" | "output_text" | "text" => {
                        texts.push(p.get("text").and_then(Value::as_str).unwrap_or_default());
                    }
                    // A chat tool message carries text only.
                    "input_image" => texts.push("[an image was returned here; toolpilot passes tool outputs to the model as text only]"),
                    "input_file" => texts.push("[a file was returned here; toolpilot passes tool outputs to the model as text only]"),
                    other => {
                        return Err(RequestError::invalid(
                            &format!("{param}[{j}].type"),
                            format!(
                                "{param}[{j}].type {other:?} is not an output part; use \
                                 input_text (or input_image, input_file)"
                            ),
                        ));
                    }
                }
            }
            Ok(texts.join("\n\n"))
        }
        Some(other) => Err(RequestError::invalid(
            param,
            format!(
                "{param} must be a string or an array of content parts, got {}",
                kind_of(other)
            ),
        )),
    }
}

/// The Responses tools as chat function tools, and the shapes of the ones that are not plain
/// functions. A tool type toolpilot cannot offer (hosted tools, types newer than this code)
/// is dropped with a warning: the model simply does not see it (a `tool_choice` naming such
/// a type is refused in [`map_tool_choice`]).
fn map_tools(list: &[Value]) -> Result<(Vec<Value>, HashMap<String, ToolShape>), RequestError> {
    let mut specs = Vec::with_capacity(list.len());
    let mut kinds = HashMap::new();
    let mut dropped = Vec::new();
    let mut unknown = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let param = format!("tools[{i}]");
        let (o, kind) = tool_object(t, &param)?;
        match kind {
            "function" | "custom" => specs.push(member_spec(o, kind, &param, None, &mut kinds)?),
            "namespace" => {
                let ns = tool_name(o, &param)?;
                let Some(members) = o.get("tools").and_then(Value::as_array) else {
                    return Err(RequestError::invalid(
                        &format!("{param}.tools"),
                        format!(
                            "{param} (a namespace) needs `tools`, the function tools it groups"
                        ),
                    ));
                };
                let about = o
                    .get("description")
                    .and_then(Value::as_str)
                    .filter(|d| !d.is_empty());
                for (j, m) in members.iter().enumerate() {
                    let param = format!("{param}.tools[{j}]");
                    let (mo, mkind) = tool_object(m, &param)?;
                    match mkind {
                        "function" | "custom" => specs.push(member_spec(
                            mo,
                            mkind,
                            &param,
                            Some((ns, about)),
                            &mut kinds,
                        )?),
                        other => unknown.push(format!("{ns}.{other}")),
                    }
                }
            }
            "local_shell" => {
                specs.push(json!({"type": "function", "function": {
                    "name": LOCAL_SHELL,
                    "description": "Runs a command on the user's machine and returns its output.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "command": {"type": "array", "items": {"type": "string"},
                                        "description": "the program and its arguments, e.g. [\"bash\", \"-lc\", \"ls -la\"]"},
                            "workdir": {"type": "string", "description": "the working directory"},
                            "timeout_ms": {"type": "integer", "description": "the time limit in milliseconds"},
                        },
                        "required": ["command"],
                        "additionalProperties": false,
                    },
                }}));
                kinds.insert(
                    LOCAL_SHELL.to_string(),
                    ToolShape {
                        kind: ToolKind::LocalShell,
                        namespace: None,
                        name: LOCAL_SHELL.to_string(),
                    },
                );
            }
            k if HOSTED_TOOLS.contains(&k) => dropped.push(k.to_string()),
            other => unknown.push(other.to_string()),
        }
    }
    if !dropped.is_empty() {
        tracing::warn!(
            tools = ?dropped,
            "dropped hosted tools from a Responses request: they run at OpenAI, not behind a \
             chat-completions upstream"
        );
    }
    if !unknown.is_empty() {
        tracing::warn!(
            types = ?unknown,
            "dropped tools of types toolpilot does not know from a Responses request: the model \
             is not offered them (toolpilot offers function, custom, local_shell and namespace \
             tools)"
        );
    }
    Ok((specs, kinds))
}

/// A tool entry's object and its `type`.
fn tool_object<'a>(
    t: &'a Value,
    param: &str,
) -> Result<(&'a Map<String, Value>, &'a str), RequestError> {
    let Value::Object(o) = t else {
        return Err(RequestError::invalid(
            param,
            format!("{param} must be an object, got {}", kind_of(t)),
        ));
    };
    let Some(kind) = o.get("type").and_then(Value::as_str) else {
        return Err(RequestError::invalid(
            &format!("{param}.type"),
            format!("{param} needs a `type` (\"function\", \"custom\", …)"),
        ));
    };
    Ok((o, kind))
}

/// A `function` or `custom` tool as a chat function, at the top level or inside a namespace
/// (`namespace`: its name and description); records the shape of what is not a plain
/// top-level function.
fn member_spec(
    o: &Map<String, Value>,
    kind: &str,
    param: &str,
    namespace: Option<(&str, Option<&str>)>,
    kinds: &mut HashMap<String, ToolShape>,
) -> Result<Value, RequestError> {
    // The chat shape, sent by mistake, is understood too (at the top level).
    if kind == "function"
        && namespace.is_none()
        && let Some(Value::Object(f)) = o.get("function")
    {
        if f.get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(RequestError::invalid(
                &format!("{param}.function.name"),
                format!("{param}.function needs `name`"),
            ));
        }
        return Ok(Value::Object(o.clone()));
    }
    let name = tool_name(o, param)?;
    let chat_name = match namespace {
        Some((ns, _)) => namespaced_name(ns, name),
        None => name.to_string(),
    };
    let mut description = o
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if let Some((ns, about)) = namespace {
        let head = match about {
            Some(about) => format!("[{ns}: {about}]"),
            None => format!("[{ns}]"),
        };
        description = if description.is_empty() {
            head
        } else {
            format!("{head} {description}")
        };
    }
    let shape = |kind| ToolShape {
        kind,
        namespace: namespace.map(|(ns, _)| ns.to_string()),
        name: name.to_string(),
    };
    if kind == "function" {
        let mut f = Map::new();
        f.insert("name".into(), Value::from(chat_name.as_str()));
        if !description.is_empty() {
            f.insert("description".into(), Value::from(description));
        }
        for key in ["parameters", "strict"] {
            if let Some(v) = o.get(key).filter(|v| !v.is_null()) {
                f.insert(key.into(), v.clone());
            }
        }
        if namespace.is_some() {
            kinds.insert(chat_name, shape(ToolKind::Function));
        }
        return Ok(json!({"type": "function", "function": f}));
    }
    if !description.is_empty() {
        description.push_str("\n\n");
    }
    description.push_str(
        "This tool takes free-form text, not JSON: pass all of it as the string \
         argument `input`.",
    );
    let format = o.get("format");
    if format.and_then(|f| f.get("type")).and_then(Value::as_str) == Some("grammar") {
        let syntax = format
            .and_then(|f| f.get("syntax"))
            .and_then(Value::as_str)
            .unwrap_or("lark");
        if let Some(def) = format
            .and_then(|f| f.get("definition"))
            .and_then(Value::as_str)
        {
            description.push_str(&format!(
                " The input must match this {syntax} grammar:\n\n{def}"
            ));
        }
    }
    let spec = json!({"type": "function", "function": {
        "name": chat_name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": {"input": {"type": "string",
                                     "description": "the tool's free-form input"}},
            "required": ["input"],
            "additionalProperties": false,
        },
    }});
    kinds.insert(chat_name, shape(ToolKind::Custom));
    Ok(spec)
}

fn tool_name<'a>(o: &'a Map<String, Value>, param: &str) -> Result<&'a str, RequestError> {
    match o.get("name") {
        Some(Value::String(n)) if !n.is_empty() => Ok(n),
        _ => Err(RequestError::invalid(
            &format!("{param}.name"),
            format!(
                "{param} needs `name`: tools look like {{\"type\":\"function\",\"name\":\"…\",\
                 \"parameters\":{{…}}}}"
            ),
        )),
    }
}

/// `tool_choice` in the chat shape.
fn map_tool_choice(choice: &Value) -> Result<Value, RequestError> {
    let bad = |msg: String| Err(RequestError::invalid("tool_choice", msg));
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" | "none" | "required" => Ok(choice.clone()),
            other => bad(format!(
                "tool_choice {other:?} is not \"auto\", \"none\", \"required\" or an object \
                 naming a function"
            )),
        },
        Value::Object(o) => {
            let named = |o: &Map<String, Value>| -> Option<String> {
                let name = o
                    .get("name")
                    .or_else(|| o.get("function").and_then(|f| f.get("name")))
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())?;
                Some(match o.get("namespace").and_then(Value::as_str) {
                    Some(ns) if !ns.is_empty() => namespaced_name(ns, name),
                    _ => name.to_string(),
                })
            };
            match o.get("type").and_then(Value::as_str) {
                Some("function" | "custom") => match named(o) {
                    Some(name) => Ok(json!({"type": "function", "function": {"name": name}})),
                    None => bad(
                        "tool_choice {\"type\":\"function\"} needs `name`, the function to call"
                            .into(),
                    ),
                },
                Some("local_shell") => {
                    Ok(json!({"type": "function", "function": {"name": LOCAL_SHELL}}))
                }
                Some("allowed_tools") => {
                    let mode = o.get("mode").and_then(Value::as_str).unwrap_or("auto");
                    let Some(tools) = o.get("tools").and_then(Value::as_array) else {
                        return bad(
                            "tool_choice {\"type\":\"allowed_tools\"} needs `tools`, a list of \
                             {\"type\":\"function\",\"name\":\"…\"}"
                                .into(),
                        );
                    };
                    let mut names = Vec::new();
                    for t in tools {
                        let Some(t) = t.as_object() else {
                            return bad("tool_choice.tools must hold objects".into());
                        };
                        match named(t) {
                            Some(n) => {
                                names.push(json!({"type": "function", "function": {"name": n}}))
                            }
                            None => {
                                return bad("every entry of tool_choice.tools needs `name`".into());
                            }
                        }
                    }
                    Ok(json!({"type": "allowed_tools",
                              "allowed_tools": {"mode": mode, "tools": names}}))
                }
                Some(other) => bad(format!(
                    "tool_choice type {other:?} cannot be honoured: toolpilot offers function, \
                     custom and local_shell tools (hosted tools run at OpenAI)"
                )),
                None => bad("tool_choice objects need a `type`".into()),
            }
        }
        other => bad(format!(
            "tool_choice must be \"auto\", \"none\", \"required\" or an object, got {}",
            kind_of(other)
        )),
    }
}

/// `text.format` as a chat `response_format` (`None` for plain text).
fn map_text_format(format: &Value) -> Result<Option<Value>, RequestError> {
    let kind = format.get("type").and_then(Value::as_str);
    match kind {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "json_object"}))),
        Some("json_schema") => {
            let Some(schema) = format.get("schema").filter(|s| s.is_object()) else {
                return Err(RequestError::invalid(
                    "text.format.schema",
                    "text.format {\"type\":\"json_schema\"} needs `schema`, a JSON Schema object",
                ));
            };
            let mut js = Map::new();
            js.insert(
                "name".into(),
                format
                    .get("name")
                    .cloned()
                    .filter(Value::is_string)
                    .unwrap_or_else(|| Value::from("response")),
            );
            js.insert("schema".into(), schema.clone());
            for key in ["description", "strict"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    js.insert(key.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": js})))
        }
        _ => Err(RequestError::invalid(
            "text.format",
            format!(
                "text.format must be {{\"type\":\"text\"}}, {{\"type\":\"json_object\"}} or \
                 {{\"type\":\"json_schema\",\"name\":…,\"schema\":{{…}}}}, got {format}"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> ResponsesRequest {
        ResponsesRequest::from_slice(v.to_string().as_bytes()).unwrap()
    }

    #[track_caller]
    fn check_err(body: &str, param: &str, expected: &str) {
        let param = Some(param).filter(|p| !p.is_empty());
        let err = ResponsesRequest::from_slice(body.as_bytes()).unwrap_err();
        assert!(
            err.message.contains(expected),
            "error {:?} does not contain {expected:?}",
            err.message
        );
        assert_eq!(err.param.as_deref(), param, "{}", err.message);
    }

    #[test]
    fn a_string_input_is_one_user_message_after_the_instructions() {
        let r = parse(json!({"model": "m", "instructions": "be brief", "input": "hi"}));
        assert_eq!(
            r.chat.messages,
            vec![
                json!({"role": "system", "content": "be brief"}),
                json!({"role": "user", "content": "hi"})
            ]
        );
        assert_eq!(r.chat.model.as_deref(), Some("m"));
        assert_eq!(
            r.conversation(),
            &[json!({"role": "user", "content": "hi"})]
        );
        assert!(r.store && r.chat.tools.is_none());
    }

    #[test]
    fn items_become_chat_messages() {
        let r = parse(json!({"input": [
            {"role": "developer", "content": "rules"},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAA", "detail": "low"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
            {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
            {"type": "function_call", "call_id": "c2", "name": "read", "arguments": {"p": 1}},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
            {"type": "function_call_output", "call_id": "c2", "output": [
                {"type": "input_text", "text": "one"}, {"type": "input_text", "text": "two"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]}
        ]}));
        let m = &r.chat.messages;
        assert_eq!(m[0], json!({"role": "system", "content": "rules"}));
        assert_eq!(
            m[1]["content"],
            json!([{"type": "text", "text": "look"},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA", "detail": "low"}}])
        );
        assert_eq!(m[2]["role"], "assistant");
        assert_eq!(m[2]["content"], "Checking.");
        assert_eq!(m[2]["tool_calls"][0]["id"], "c1");
        assert_eq!(m[2]["tool_calls"][0]["function"]["name"], "shell");
        assert_eq!(m[2]["tool_calls"][1]["function"]["arguments"], "{\"p\":1}");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "a.txt"})
        );
        assert_eq!(m[4]["content"], "one\n\ntwo");
        assert_eq!(m[5], json!({"role": "user", "content": "a\n\nb"}));
        assert_eq!(m.len(), 6);
    }

    #[test]
    fn split_assistant_text_is_joined_and_calls_without_text_get_null_content() {
        let r = parse(json!({"input": [
            {"role": "user", "content": "go"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "\n\nFound it."}]},
            {"role": "user", "content": "next"},
            {"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "x", "output": "ok"}
        ]}));
        let m = &r.chat.messages;
        assert_eq!(
            m[1],
            json!({"role": "assistant", "content": "Let me look.\n\nFound it."})
        );
        assert_eq!(m[3]["content"], Value::Null);
        assert_eq!(m[3]["tool_calls"][0]["id"], "x");
        assert_eq!(join_text("a", "b"), "a\n\nb");
        assert_eq!(join_text("a ", "b"), "a b");
    }

    #[test]
    fn tools_map_to_chat_functions_and_remember_their_kinds() {
        let r = parse(json!({"input": "x", "tools": [
            {"type": "function", "name": "deploy", "description": "ship it",
             "parameters": {"type": "object", "properties": {}}, "strict": true},
            {"type": "custom", "name": "apply_patch", "description": "Edit files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"*** Begin Patch\""}},
            {"type": "local_shell"},
            {"type": "web_search"}
        ], "tool_choice": {"type": "function", "name": "deploy"}}));
        let tools = r.chat.tools.as_ref().unwrap();
        assert_eq!(tools.len(), 3);
        assert_eq!(
            tools[0],
            json!({"type": "function", "function": {"name": "deploy", "description": "ship it",
                   "parameters": {"type": "object", "properties": {}}, "strict": true}})
        );
        let patch = &tools[1]["function"];
        assert_eq!(patch["name"], "apply_patch");
        assert_eq!(patch["parameters"]["required"], json!(["input"]));
        let desc = patch["description"].as_str().unwrap();
        assert!(
            desc.starts_with("Edit files.") && desc.contains("start: \"*** Begin Patch\""),
            "{desc}"
        );
        assert_eq!(tools[2]["function"]["name"], "local_shell");
        assert_eq!(r.kinds["apply_patch"].kind, ToolKind::Custom);
        assert_eq!(r.kinds["local_shell"].kind, ToolKind::LocalShell);
        assert_eq!(r.kinds.get("deploy"), None);
        assert_eq!(
            r.chat.extra["tool_choice"],
            json!({"type": "function", "function": {"name": "deploy"}})
        );
        // The response repeats the tools as sent.
        assert_eq!(r.echo["tools"].as_array().unwrap().len(), 4);
    }

    #[test]
    fn namespace_tools_are_offered_under_joined_names_and_unknown_types_are_dropped() {
        // Codex 0.169 groups its sub-agent tools so, and sends tool types newer than this code.
        let r = parse(json!({"input": [
            {"type": "function_call", "call_id": "c1", "namespace": "multi_agent_v1",
             "name": "spawn_agent", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "spawned"}
        ], "tools": [
            {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
             "tools": [
                {"type": "function", "name": "spawn_agent", "description": "Start one.",
                 "parameters": {"type": "object", "properties": {}}},
                {"type": "custom", "name": "note", "description": "Free text."},
                {"type": "teleport"}
             ]},
            {"type": "mcp__srv__", "name": "x"},
            {"type": "tool_search"},
            {"type": "teleport"}
        ], "tool_choice": {"type": "function", "namespace": "multi_agent_v1", "name": "spawn_agent"}}));
        let tools = r.chat.tools.as_ref().unwrap();
        assert_eq!(tools.len(), 2, "{tools:?}");
        assert_eq!(
            tools[0],
            json!({"type": "function", "function": {"name": "multi_agent_v1__spawn_agent",
                   "description": "[multi_agent_v1: Sub-agents.] Start one.",
                   "parameters": {"type": "object", "properties": {}}}})
        );
        assert_eq!(tools[1]["function"]["name"], "multi_agent_v1__note");
        assert_eq!(
            r.kinds["multi_agent_v1__spawn_agent"],
            ToolShape {
                kind: ToolKind::Function,
                namespace: Some("multi_agent_v1".into()),
                name: "spawn_agent".into()
            }
        );
        assert_eq!(r.kinds["multi_agent_v1__note"].kind, ToolKind::Custom);
        assert_eq!(
            r.chat.messages[0]["tool_calls"][0]["function"]["name"],
            "multi_agent_v1__spawn_agent"
        );
        assert_eq!(
            r.chat.extra["tool_choice"],
            json!({"type": "function", "function": {"name": "multi_agent_v1__spawn_agent"}})
        );
        assert_eq!(
            namespaced_name("mcp__github__", "search"),
            "mcp__github__search"
        );
        // Naming a tool type that cannot be offered is refused: dropping it would change
        // what the client asked for.
        check_err(
            r#"{"input":"x","tools":[{"type":"tool_search"}],"tool_choice":{"type":"tool_search"}}"#,
            "tool_choice",
            "cannot be honoured",
        );
    }

    #[test]
    fn custom_and_shell_calls_in_the_input_become_function_calls() {
        let r = parse(json!({"input": [
            {"role": "user", "content": "patch it"},
            {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": "*** Begin Patch\n"},
            {"type": "custom_tool_call_output", "call_id": "p1", "output": "Done!"},
            {"type": "local_shell_call", "call_id": "s1", "status": "completed",
             "action": {"type": "exec", "command": ["ls"], "timeout_ms": 1000, "working_directory": null}},
            {"type": "function_call_output", "call_id": "s1", "output": "a\n"}
        ]}));
        let m = &r.chat.messages;
        assert_eq!(
            m[1]["tool_calls"][0]["function"],
            json!({"name": "apply_patch", "arguments": "{\"input\":\"*** Begin Patch\\n\"}"})
        );
        assert_eq!(m[2]["content"], "Done!");
        let args: Value = serde_json::from_str(
            m[3]["tool_calls"][0]["function"]["arguments"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(args, json!({"command": ["ls"], "timeout_ms": 1000}));
        assert_eq!(m[3]["tool_calls"][0]["function"]["name"], "local_shell");
    }

    #[test]
    fn options_map_to_their_chat_names_and_the_rest_is_not_forwarded() {
        let r = parse(json!({
            "input": "x", "stream": true, "temperature": 0.5, "top_p": 0.9,
            "max_output_tokens": 100, "parallel_tool_calls": false,
            "text": {"format": {"type": "json_schema", "name": "out", "strict": true,
                                "schema": {"type": "object"}}, "verbosity": "low"},
            "reasoning": {"effort": "high", "summary": "auto"},
            "metadata": {"k": "v"}, "user": "u1", "prompt_cache_key": "pk",
            "store": false, "include": ["reasoning.encrypted_content"], "truncation": "auto",
            "some_future_field": 1
        }));
        let x = &r.chat.extra;
        assert!(r.chat.stream && !r.store);
        assert_eq!(x["temperature"], json!(0.5));
        assert_eq!(x["top_p"], json!(0.9));
        assert_eq!(x["max_tokens"], json!(100));
        assert_eq!(x["parallel_tool_calls"], json!(false));
        assert_eq!(
            x["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "out", "strict": true,
                   "schema": {"type": "object"}}})
        );
        assert_eq!(x["verbosity"], "low");
        assert_eq!(x["reasoning_effort"], "high");
        assert_eq!(x["user"], "u1");
        assert_eq!(x["prompt_cache_key"], "pk");
        for absent in [
            "metadata",
            "store",
            "include",
            "truncation",
            "some_future_field",
            "max_output_tokens",
            "text",
            "reasoning",
            "instructions",
            "input",
        ] {
            assert!(!x.contains_key(absent), "{absent} was forwarded");
        }
        assert_eq!(r.echo["metadata"], json!({"k": "v"}));
        assert_eq!(r.echo["max_output_tokens"], json!(100));
        assert_eq!(r.echo["truncation"], "auto");
        let r = parse(json!({"input": "x", "text": {"format": {"type": "json_object"}}}));
        assert_eq!(
            r.chat.extra["response_format"],
            json!({"type": "json_object"})
        );
        let r = parse(
            json!({"input": "x", "tool_choice": {"type": "allowed_tools", "mode": "required",
            "tools": [{"type": "function", "name": "a"}]}}),
        );
        assert_eq!(
            r.chat.extra["tool_choice"],
            json!({"type": "allowed_tools", "allowed_tools": {"mode": "required",
                   "tools": [{"type": "function", "function": {"name": "a"}}]}})
        );
    }

    #[test]
    fn outputs_must_answer_a_call() {
        check_err(
            r#"{"input":[{"type":"function_call_output","call_id":"zz","output":"x"}]}"#,
            "input[0].call_id",
            "no call with that id",
        );
        // With a previous response, the call may be there.
        let mut r = parse(
            json!({"previous_response_id": "resp_1", "instructions": "sys",
            "input": [{"type": "function_call_output", "call_id": "c9", "output": "done"}]}),
        );
        let prior = vec![
            json!({"role": "user", "content": "deploy"}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c9", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]}),
        ];
        r.with_prior(&prior).unwrap();
        assert_eq!(r.chat.messages.len(), 4);
        assert_eq!(r.chat.messages[0]["content"], "sys");
        assert_eq!(r.chat.messages[1], prior[0]);
        assert_eq!(r.chat.messages[3]["tool_call_id"], "c9");
        assert_eq!(r.conversation().len(), 3);
        // An empty input just continues the stored conversation.
        let mut r = parse(json!({"previous_response_id": "resp_1", "input": []}));
        assert!(r.chat.messages.is_empty());
        r.with_prior(&prior).unwrap();
        assert_eq!(r.chat.messages, prior);
        let mut r = parse(json!({"previous_response_id": "resp_1",
            "input": [{"type": "function_call_output", "call_id": "other", "output": "done"}]}));
        let err = r.with_prior(&prior).unwrap_err();
        assert!(
            err.message.contains("nor in the previous response"),
            "{}",
            err.message
        );
    }

    #[test]
    fn rejects_bad_requests_with_specific_messages() {
        check_err("{", "", "not valid JSON");
        check_err(r#"{"model":"m"}"#, "input", "`input` is required");
        check_err(r#"{"input":5}"#, "input", "must be a string or an array");
        check_err(r#"{"input":[]}"#, "input", "`input` is empty");
        check_err(r#"{"input":[3]}"#, "input[0]", "must be an input item");
        check_err(
            r#"{"input":[{"content":"x"}]}"#,
            "input[0].type",
            "neither `type` nor `role`",
        );
        check_err(
            r#"{"input":[{"role":"tool","content":"x"}]}"#,
            "input[0].role",
            "not a message role",
        );
        check_err(
            r#"{"input":[{"type":"banana"}]}"#,
            "input[0].type",
            "\"banana\" is not an input item",
        );
        check_err(
            r#"{"input":[{"type":"item_reference","id":"msg_1"}]}"#,
            "input[0]",
            "item_reference",
        );
        check_err(
            r#"{"input":[{"type":"function_call_output","output":"x"}]}"#,
            "input[0].call_id",
            "has no `call_id`",
        );
        check_err(
            r#"{"input":[{"type":"function_call","name":"f"}]}"#,
            "input[0].call_id",
            "needs `call_id`",
        );
        check_err(
            r#"{"input":[{"role":"user","content":[{"type":"input_image","file_id":"f1"}]}]}"#,
            "input[0].content[0].file_id",
            "no Files API",
        );
        check_err(
            r#"{"input":[{"role":"user","content":[{"type":"input_video"}]}]}"#,
            "input[0].content[0].type",
            "not a content part",
        );
        check_err(
            r#"{"input":"x","tools":{}}"#,
            "tools",
            "`tools` must be an array",
        );
        check_err(
            r#"{"input":"x","tools":[{"type":"function"}]}"#,
            "tools[0].name",
            "needs `name`",
        );
        check_err(
            r#"{"input":"x","tools":[{"name":"f"}]}"#,
            "tools[0].type",
            "needs a `type`",
        );
        check_err(
            r#"{"input":"x","tool_choice":"sometimes"}"#,
            "tool_choice",
            "\"sometimes\"",
        );
        check_err(
            r#"{"input":"x","tool_choice":{"type":"function"}}"#,
            "tool_choice",
            "needs `name`",
        );
        check_err(
            r#"{"input":"x","tool_choice":{"type":"file_search"}}"#,
            "tool_choice",
            "cannot be honoured",
        );
        check_err(
            r#"{"input":"x","instructions":[1]}"#,
            "instructions",
            "must be a string",
        );
        check_err(
            r#"{"input":"x","stream":"yes"}"#,
            "stream",
            "`stream` must be",
        );
        check_err(
            r#"{"input":"x","max_output_tokens":0}"#,
            "max_output_tokens",
            "positive integer",
        );
        check_err(
            r#"{"input":"x","text":{"format":{"type":"yaml"}}}"#,
            "text.format",
            "text.format must be",
        );
        check_err(
            r#"{"input":"x","conversation":"conv_1"}"#,
            "conversation",
            "not supported",
        );
        check_err(
            r#"{"input":"x","background":true}"#,
            "background",
            "not supported",
        );
        check_err(
            r#"{"input":"x","previous_response_id":7}"#,
            "previous_response_id",
            "must be the id",
        );
    }
}
