//! `server.record_requests`: what clients send, one JSON line per request (the path, the
//! headers that say which client it is, the body), and [`shape_of_requests`], which reduces
//! such a record to its shape (keys, value types, the `type`/`role` words and tool names) so
//! that two versions of a client can be compared (`tests/clients/update-pins`).
//!
//! A debugging aid, off by default: the file holds whole conversations. Writing is best-effort
//! (a failure is logged once per request, never answered to the client).

use std::collections::BTreeMap;
use std::io::Write;

use serde_json::{Map, Value, json};

/// The request headers worth keeping: they say which client and version sent it.
const KEPT_HEADERS: &[&str] = &[
    "user-agent",
    "originator",
    "x-stainless-lang",
    "x-stainless-package-version",
];

/// Appends one request to the record file.
pub fn append(path: &std::path::Path, route: &str, headers: &axum::http::HeaderMap, body: &[u8]) {
    let body: Value = serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(body).into_owned()));
    let mut kept = Map::new();
    for name in KEPT_HEADERS {
        if let Some(v) = headers.get(*name).and_then(|v| v.to_str().ok()) {
            kept.insert((*name).to_string(), Value::from(v));
        }
    }
    let line = json!({"path": route, "headers": kept, "body": body}).to_string();
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "server.record_requests: could not append the request");
    }
}

/// The shapes of recorded requests (the lines [`append`] writes), by path: each distinct
/// shape once, in a stable order.
pub fn shape_of_requests(records: &[Value]) -> Value {
    let mut by_path: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in records {
        let path = r["path"].as_str().unwrap_or("?").to_string();
        let shape = shape(&r["body"], None);
        let list = by_path.entry(path).or_default();
        if !list.contains(&shape) {
            list.push(shape);
        }
    }
    let mut out = Map::new();
    for (path, list) in by_path {
        out.insert(path, merge(list));
    }
    Value::Object(out)
}

/// One request's shape: every value becomes its type, except the words that say what a thing
/// is (`type`, `role`, `object`) and the names of tools, which are kept; an array becomes the
/// distinct shapes of its elements.
fn shape(v: &Value, key: Option<&str>) -> Value {
    match v {
        Value::Null => Value::from("null"),
        Value::Bool(_) => Value::from("bool"),
        Value::Number(_) => Value::from("number"),
        Value::String(s) => match key {
            Some("type" | "role" | "object" | "wire_api") => Value::from(s.as_str()),
            _ => Value::from("string"),
        },
        Value::Array(a) => {
            let tools = key == Some("tools");
            let shapes = a
                .iter()
                .map(|e| {
                    let mut s = shape(e, None);
                    // A tool's name says what the client offers; keep it.
                    if tools {
                        keep_names(e, &mut s);
                    }
                    s
                })
                .collect();
            merge(shapes)
        }
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| (k.clone(), shape(x, Some(k))))
                .collect(),
        ),
    }
}

/// Puts the `name`s of a tool (and of a namespace's tools) back into its shape.
fn keep_names(tool: &Value, s: &mut Value) {
    let name = tool
        .get("name")
        .or_else(|| tool.get("function").and_then(|f| f.get("name")));
    if let (Some(name), Some(o)) = (name, s.as_object_mut()) {
        if o.contains_key("function") {
            o["function"]["name"] = name.clone();
        } else {
            o.insert("name".into(), name.clone());
        }
    }
    if let (Some(members), Some(Value::Array(shapes))) = (
        tool.get("tools").and_then(Value::as_array),
        s.get_mut("tools"),
    ) {
        let named: Vec<Value> = members
            .iter()
            .map(|m| {
                let mut ms = shape(m, None);
                keep_names(m, &mut ms);
                ms
            })
            .collect();
        *shapes = named;
    }
}

/// Distinct shapes, sorted by their text, so that order and repetition do not show as change.
fn merge(shapes: Vec<Value>) -> Value {
    let mut texts: Vec<(String, Value)> = shapes.into_iter().map(|s| (s.to_string(), s)).collect();
    texts.sort_by(|a, b| a.0.cmp(&b.0));
    texts.dedup_by(|a, b| a.0 == b.0);
    Value::Array(texts.into_iter().map(|(_, s)| s).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shape_keeps_kinds_and_tool_names_and_drops_values() {
        let records = vec![
            json!({"path": "/v1/responses", "body": {"model": "m", "stream": true,
                "input": [{"type": "message", "role": "user", "content": "hi"},
                          {"type": "message", "role": "user", "content": "again"}],
                "tools": [{"type": "function", "name": "exec_command", "parameters": {}},
                          {"type": "namespace", "name": "agents",
                           "tools": [{"type": "function", "name": "spawn"}]}]}}),
            json!({"path": "/v1/responses", "body": {"model": "other", "stream": true,
                "input": [{"type": "message", "role": "user", "content": "x"}],
                "tools": [{"type": "function", "name": "exec_command", "parameters": {}},
                          {"type": "namespace", "name": "agents",
                           "tools": [{"type": "function", "name": "spawn"}]}]}}),
        ];
        let s = shape_of_requests(&records);
        let list = s["/v1/responses"].as_array().unwrap();
        // Two requests that differ only in their values have one shape.
        assert_eq!(list.len(), 1, "{s:#}");
        let first = &list[0];
        assert_eq!(first["model"], "string");
        assert_eq!(first["stream"], "bool");
        assert_eq!(
            first["input"],
            json!([{"type": "message", "role": "user", "content": "string"}])
        );
        assert_eq!(first["tools"][0]["name"], "agents");
        assert_eq!(first["tools"][0]["tools"][0]["name"], "spawn");
        assert_eq!(first["tools"][1]["name"], "exec_command");
    }
}
