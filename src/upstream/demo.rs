//! The built-in demo model: a small scripted "model" used when no upstream is configured.
//!
//! It reads the conversation it is sent like a real model would and drives a real tool loop:
//! list the workspace with `ls`, read the README it finds with `read_file`, then answer with
//! what the tools returned. Every answer starts by saying that it is the demo model and how
//! to configure a real one. Its output is an ordinary chat-completions event stream, so it
//! exercises exactly the same path as an HTTP upstream.

use serde_json::{Value, json};

use crate::text::{content_text, preview};

/// The model name the demo reports.
pub const MODEL: &str = "toolpilot-demo";

/// The first words of every demo answer.
pub const BANNER: &str = "[toolpilot demo model] No upstream model is configured, so this \
scripted demo model is answering. Start toolpilot with --upstream URL --model NAME (any \
OpenAI-compatible server) to use a real model.";

/// The SSE data payloads of one round, answering `request`.
pub fn respond(request: &Value) -> Vec<String> {
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let offered: Vec<&str> = request
        .get("tools")
        .and_then(Value::as_array)
        .map(|t| t.iter().filter_map(crate::openai::tool_spec_name).collect())
        .unwrap_or_default();
    let last_user = messages
        .iter()
        .rposition(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        .unwrap_or(0);
    let question = messages
        .get(last_user)
        .map(|m| content_text(m.get("content"), ""))
        .unwrap_or_default();
    let since = &messages[last_user..];
    let ls_result = tool_result(since, "ls");
    let readme_result = tool_result(since, "read_file");

    let prompt_tokens = messages
        .iter()
        .map(|m| content_text(m.get("content"), "").len() / 4)
        .sum::<usize>() as u64;

    if offered.contains(&"ls") && ls_result.is_none() {
        return tool_call_round(
            "ls",
            json!({"dirPath": ".", "recursive": false}),
            prompt_tokens,
        );
    }
    if let (Some(listing), None) = (&ls_result, &readme_result)
        && offered.contains(&"read_file")
        && let Some(readme) = find_readme(listing)
    {
        return tool_call_round("read_file", json!({"filepath": readme}), prompt_tokens);
    }

    let mut answer = String::from(BANNER);
    answer.push_str("\n\n");
    if !question.trim().is_empty() {
        answer.push_str(&format!(
            "You asked: \"{}\"\n\n",
            preview(question.trim(), 200)
        ));
    }
    match &ls_result {
        Some(listing) => {
            let entries: Vec<&str> = listing
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with('['))
                .collect();
            if entries.is_empty() || listing.contains("was not run") || listing.contains("failed") {
                answer.push_str(&format!(
                    "I tried to list the workspace, but: {}\n",
                    preview(listing, 300)
                ));
            } else {
                answer.push_str(&format!(
                    "I listed the workspace with the ls tool: it has {} top-level entries ({}).\n",
                    entries.len(),
                    preview(&entries.join(", "), 400)
                ));
            }
        }
        None => answer.push_str(
            "No tools were offered to me in this request, so I could not look at the workspace.\n",
        ),
    }
    match (&readme_result, ls_result.as_deref().and_then(find_readme)) {
        (Some(text), Some(name)) => {
            let head: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .take(5)
                .collect();
            answer.push_str(&format!(
                "\nThen I read {name} with the read_file tool. It begins:\n\n{}\n",
                head.iter()
                    .map(|l| format!("> {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        (None, None) if ls_result.is_some() => {
            answer.push_str("\nThere is no README at the top level, so I stopped there.\n");
        }
        _ => {}
    }
    answer.push_str("\nA real model would now answer your question using these tool results.");
    text_round(&answer, prompt_tokens)
}

fn tool_call_round(name: &str, args: Value, prompt_tokens: u64) -> Vec<String> {
    let id = format!("call_demo_{}", fastrand::u32(..));
    vec![
        chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{
            "index": 0, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": args.to_string()}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
        usage(prompt_tokens, 12),
        "[DONE]".to_string(),
    ]
}

fn text_round(text: &str, prompt_tokens: u64) -> Vec<String> {
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    // Word-sized pieces, like a real token stream.
    let mut piece = String::new();
    for ch in text.chars() {
        piece.push(ch);
        if ch == ' ' || ch == '\n' {
            out.push(chunk(json!({"content": piece}), None));
            piece.clear();
        }
    }
    if !piece.is_empty() {
        out.push(chunk(json!({"content": piece}), None));
    }
    out.push(chunk(json!({}), Some("stop")));
    out.push(usage(prompt_tokens, (text.len() / 4) as u64));
    out.push("[DONE]".to_string());
    out
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    json!({
        "id": "chatcmpl-demo",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
    .to_string()
}

fn usage(prompt: u64, completion: u64) -> String {
    json!({
        "id": "chatcmpl-demo", "object": "chat.completion.chunk", "created": 0, "model": MODEL,
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion},
    })
    .to_string()
}

/// The content of the tool message answering the first call of `tool` in `messages`.
fn tool_result(messages: &[Value], tool: &str) -> Option<String> {
    let id = messages.iter().find_map(|m| {
        m.get("tool_calls")?.as_array()?.iter().find_map(|c| {
            (c.get("function")?.get("name")?.as_str()? == tool)
                .then(|| c.get("id")?.as_str().map(str::to_string))
                .flatten()
        })
    })?;
    messages.iter().find_map(|m| {
        (m.get("role")?.as_str()? == "tool" && m.get("tool_call_id")?.as_str()? == id)
            .then(|| content_text(m.get("content"), ""))
    })
}

fn find_readme(listing: &str) -> Option<String> {
    listing
        .lines()
        .map(str::trim)
        .find(|l| {
            let lower = l.to_ascii_lowercase();
            lower == "readme" || (lower.starts_with("readme.") && !lower.ends_with('/'))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::accumulate::Accumulator;

    fn round(req: &Value) -> crate::upstream::accumulate::Round {
        let mut acc = Accumulator::new();
        let mut out = vec![];
        for d in respond(req) {
            acc.push_data(None, &d, &mut out).unwrap();
        }
        acc.finish().unwrap()
    }

    #[test]
    fn lists_then_reads_the_readme_then_answers() {
        let tools = json!([{"type":"function","function":{"name":"ls"}},
                           {"type":"function","function":{"name":"read_file"}}]);
        let mut req =
            json!({"messages": [{"role":"user","content":"what is this?"}], "tools": tools});
        let r = round(&req);
        assert_eq!(r.tool_calls[0].name, "ls");
        let id = r.tool_calls[0].id.clone();
        let msgs = req["messages"].as_array_mut().unwrap();
        msgs.push(crate::openai::assistant_message("", &r.tool_calls));
        msgs.push(crate::openai::tool_message(&id, "README.md\nsrc/".into()));
        let r = round(&req);
        assert_eq!(r.tool_calls[0].name, "read_file");
        assert_eq!(r.tool_calls[0].arguments, r#"{"filepath":"README.md"}"#);
        let id = r.tool_calls[0].id.clone();
        let msgs = req["messages"].as_array_mut().unwrap();
        msgs.push(crate::openai::assistant_message("", &r.tool_calls));
        msgs.push(crate::openai::tool_message(&id, "# Hello\n\nworld".into()));
        let r = round(&req);
        assert!(r.tool_calls.is_empty());
        assert!(r.content.starts_with(BANNER));
        assert!(
            r.content.contains("2 top-level entries (README.md, src/)"),
            "{}",
            r.content
        );
        assert!(r.content.contains("> # Hello\n> world"), "{}", r.content);
    }

    #[test]
    fn without_tools_it_answers_at_once() {
        let r = round(&json!({"messages": [{"role":"user","content":"hi"}]}));
        assert!(r.content.starts_with(BANNER));
        assert!(r.content.contains("No tools were offered"));
    }
}
