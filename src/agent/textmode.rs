//! Text tool mode, for upstreams without native tool calling (`tool_mode = "text"`).
//!
//! The conversation is kept in the native shape (assistant `tool_calls`, `role: tool`
//! results) and rewritten for the wire on every round: the tools are described in the system
//! message with the exact form a call takes (`<tool_call>{"name": …, "arguments": …}</tool_call>`,
//! the Hermes/Qwen form most open models are trained on), earlier calls become that text in
//! the assistant's message, and results go back in a user message as `<tool_response>` blocks.
//! Calls in the answer are read by the same text-call recogniser that rescues calls local
//! servers fail to parse, so nothing new is needed on the way back.

use serde_json::{Value, json};

use crate::text::content_text;

/// The system-message section that teaches the model the tools and the call format.
pub fn tools_prompt(specs: &[Value]) -> String {
    let mut out = String::from(
        "# Tools\n\nYou can call tools to act on the user's workspace. To call a tool, write a \
         block exactly like this, with the arguments as a JSON object:\n\n<tool_call>\n\
         {\"name\": \"TOOL_NAME\", \"arguments\": {\"ARGUMENT\": \"VALUE\"}}\n</tool_call>\n\n\
         Write one block per call; you may write several. After your calls, stop and wait: the \
         results come back in the next message as <tool_response name=\"TOOL_NAME\"> blocks, in \
         the order of your calls. Call a tool only when you need its result; when you have what \
         you need, answer the user directly without any tool_call block.\n\nAvailable tools:\n",
    );
    for spec in specs {
        let f = spec.get("function").unwrap_or(spec);
        let Some(name) = f.get("name").and_then(Value::as_str) else {
            continue;
        };
        out.push_str(&format!("\n## {name}\n"));
        if let Some(d) = f.get("description").and_then(Value::as_str) {
            out.push_str(d.trim());
            out.push('\n');
        }
        if let Some(p) = f.get("parameters") {
            out.push_str(&format!("Arguments (JSON schema): {p}\n"));
        }
    }
    out
}

/// The wire form of `messages` in text mode: tool calls as text, results as user messages,
/// the tools described in the (first) system message.
pub fn to_text(messages: &[Value], tools_prompt: &str) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    // Tool results name their call; the model is shown the tool's name.
    let mut names: std::collections::HashMap<String, String> = Default::default();
    let mut system_done = false;
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        match role {
            "system" | "developer" if !system_done => {
                system_done = true;
                let text = content_text(m.get("content"), "\n");
                out.push(json!({"role": "system", "content": format!("{text}\n\n{tools_prompt}")}));
            }
            "assistant" => {
                let mut text = content_text(m.get("content"), "\n");
                for c in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = c
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    if let Some(id) = c.get("id").and_then(Value::as_str) {
                        names.insert(id.to_string(), name.to_string());
                    }
                    let args = match c.pointer("/function/arguments") {
                        Some(Value::String(s)) => {
                            serde_json::from_str::<Value>(s).unwrap_or(Value::String(s.clone()))
                        }
                        Some(v) => v.clone(),
                        None => json!({}),
                    };
                    if !text.is_empty() && !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "<tool_call>\n{{\"name\": {}, \"arguments\": {args}}}\n</tool_call>",
                        Value::String(name.to_string())
                    ));
                }
                out.push(json!({"role": "assistant", "content": text}));
            }
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                let name = names.get(id).map(String::as_str).unwrap_or("tool");
                let block = format!(
                    "<tool_response name=\"{name}\">\n{}\n</tool_response>",
                    content_text(m.get("content"), "\n")
                );
                push_user(&mut out, block);
            }
            "user" => match m.get("content") {
                Some(Value::String(s)) => push_user(&mut out, s.clone()),
                // Images and other parts stay as they are.
                _ => out.push(m.clone()),
            },
            _ => out.push(m.clone()),
        }
    }
    if !system_done {
        out.insert(0, json!({"role": "system", "content": tools_prompt}));
    }
    out
}

/// Appends user text, merged into a user message just before it (tool results of one round
/// become one message; templates that insist on alternating roles accept that).
fn push_user(out: &mut Vec<Value>, text: String) {
    if let Some(last) = out.last_mut()
        && last.get("role").and_then(Value::as_str) == Some("user")
        && let Some(prev) = last.get("content").and_then(Value::as_str)
    {
        last["content"] = Value::String(format!("{prev}\n\n{text}"));
        return;
    }
    out.push(json!({"role": "user", "content": text}));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_and_results_become_text_and_tools_are_described() {
        let specs = vec![json!({"type": "function", "function": {
            "name": "read_file", "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"filepath": {"type": "string"}}}}})];
        let prompt = tools_prompt(&specs);
        assert!(prompt.contains("## read_file\nRead a file.\nArguments (JSON schema): {"));
        let messages = vec![
            json!({"role": "system", "content": "Be brief."}),
            json!({"role": "user", "content": "read a.txt and b.txt"}),
            json!({"role": "assistant", "content": "Reading.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"filepath\":\"a.txt\"}"}},
                {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"filepath\":\"b.txt\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "A"}),
            json!({"role": "tool", "tool_call_id": "c2", "content": "B"}),
        ];
        let wire = to_text(&messages, &prompt);
        assert_eq!(wire.len(), 4);
        assert!(
            wire[0]["content"]
                .as_str()
                .unwrap()
                .starts_with("Be brief.\n\n# Tools")
        );
        assert_eq!(
            wire[2]["content"],
            "Reading.\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"filepath\":\"a.txt\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"read_file\", \"arguments\": {\"filepath\":\"b.txt\"}}\n</tool_call>"
        );
        assert!(wire[2].get("tool_calls").is_none());
        assert_eq!(wire[3]["role"], "user");
        assert_eq!(
            wire[3]["content"],
            "<tool_response name=\"read_file\">\nA\n</tool_response>\n\n<tool_response name=\"read_file\">\nB\n</tool_response>"
        );
    }

    #[test]
    fn without_a_system_message_one_is_added() {
        let wire = to_text(&[json!({"role": "user", "content": "hi"})], "TOOLS");
        assert_eq!(wire[0], json!({"role": "system", "content": "TOOLS"}));
        assert_eq!(wire[1]["content"], "hi");
    }
}
