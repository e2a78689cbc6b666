//! An MCP tool result as the text of a `role: tool` message.
//!
//! Chat-completions tool messages carry text only, so every content block becomes text: text
//! as is, structured content as JSON (when no text block carries it already), an embedded
//! text resource as its text, and what the upstream cannot read (images, audio, binary
//! resources) as a line that says what it was and how big, instead of megabytes of base64.

use serde_json::Value;

/// The text of a result, and whether the server marked it an error (`isError`).
pub fn render(result: &Value) -> (String, bool) {
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let mut parts: Vec<String> = Vec::new();
    let blocks = result
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut has_text = false;
    for block in blocks {
        let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => {
                has_text = true;
                parts.push(str_of(block, "text").to_string());
            }
            "image" | "audio" => {
                let mime = block
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .unwrap_or(kind);
                parts.push(format!(
                    "[{kind}: {mime}, {} — tool results reach the model as text only, so it \
                     is not shown here]",
                    size_of_base64(str_of(block, "data"))
                ));
            }
            "resource" => {
                let res = block.get("resource").unwrap_or(&Value::Null);
                let uri = str_of(res, "uri");
                if let Some(text) = res.get("text").and_then(Value::as_str) {
                    has_text = true;
                    parts.push(format!("[resource {uri}]\n{text}"));
                } else {
                    let mime = res
                        .get("mimeType")
                        .and_then(Value::as_str)
                        .unwrap_or("binary");
                    parts.push(format!(
                        "[resource {uri}: {mime}, {} — binary, not shown]",
                        size_of_base64(str_of(res, "blob"))
                    ));
                }
            }
            "resource_link" => {
                let mut line = format!("[resource link: {}", str_of(block, "uri"));
                for key in ["name", "description", "mimeType"] {
                    if let Some(v) = block.get(key).and_then(Value::as_str) {
                        line.push_str(&format!(", {key}: {v}"));
                    }
                }
                line.push(']');
                parts.push(line);
            }
            other => parts.push(format!("[a content block of unknown type {other:?}]")),
        }
    }
    if let Some(structured) = result.get("structuredContent")
        && !has_text
    {
        parts.push(serde_json::to_string_pretty(structured).unwrap_or_default());
    }
    (parts.join("\n"), is_error)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The decoded size of base64 text, for people.
fn size_of_base64(data: &str) -> String {
    let padding = data.bytes().rev().take_while(|&b| b == b'=').count();
    let bytes = (data.len() / 4 * 3).saturating_sub(padding);
    if bytes >= 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_of_content_becomes_text() {
        let (text, err) = render(&json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
        ]}));
        assert!(!err);
        assert_eq!(
            text,
            "hello\n[image: image/png, 8 bytes — tool results reach the model as text only, \
             so it is not shown here]\n[resource file:///a.txt]\ninside\n[resource link: \
             file:///b, name: b]"
        );
        let (text, err) =
            render(&json!({"content": [], "structuredContent": {"sum": 3}, "isError": true}));
        assert!(err);
        assert_eq!(text, "{\n  \"sum\": 3\n}");
        // Structured content that a text block already carries is not repeated.
        let (text, _) = render(
            &json!({"content": [{"type": "text", "text": "{\"sum\":3}"}], "structuredContent": {"sum": 3}}),
        );
        assert_eq!(text, "{\"sum\":3}");
    }
}
