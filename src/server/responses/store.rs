//! The conversations behind recent responses, for `previous_response_id`.
//!
//! A response made with `store` (the default) leaves its conversation here, as the client sees
//! it: the input messages (those of the response it continued included) and its answer as one
//! assistant message (text and the calls handed to the client), without the instructions,
//! which a continuation does not inherit. In memory only, bounded by count and by size (oldest
//! dropped first); a restart forgets them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;

/// The last this many responses are kept...
pub const MAX_ENTRIES: usize = 256;
/// ...as long as they hold no more than this many bytes of JSON together.
pub const MAX_BYTES: usize = 64 << 20;

struct Saved {
    messages: Arc<[Value]>,
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Saved>,
    /// Ids, oldest first.
    order: VecDeque<String>,
    bytes: usize,
}

pub struct Store {
    inner: Mutex<Inner>,
    max_entries: usize,
    max_bytes: usize,
}

impl Default for Store {
    fn default() -> Self {
        Store::new(MAX_ENTRIES, MAX_BYTES)
    }
}

impl Store {
    pub fn new(max_entries: usize, max_bytes: usize) -> Store {
        Store {
            inner: Mutex::default(),
            max_entries,
            max_bytes,
        }
    }

    /// Keeps the conversation of response `id`.
    pub fn put(&self, id: &str, messages: Vec<Value>) {
        let bytes: usize = messages.iter().map(approx_json_bytes).sum();
        if bytes > self.max_bytes {
            tracing::warn!(
                bytes,
                response = id,
                "conversation too large to keep for previous_response_id"
            );
            return;
        }
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        let saved = Saved {
            messages: messages.into(),
            bytes,
        };
        if let Some(old) = inner.by_id.insert(id.to_string(), saved) {
            inner.bytes -= old.bytes;
            inner.order.retain(|o| o != id);
        }
        inner.bytes += bytes;
        inner.order.push_back(id.to_string());
        while inner.order.len() > self.max_entries || inner.bytes > self.max_bytes {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(old) = inner.by_id.remove(&oldest) {
                inner.bytes -= old.bytes;
            }
        }
    }

    /// The conversation of response `id`, if it is still kept.
    pub fn get(&self, id: &str) -> Option<Arc<[Value]>> {
        let inner = self.inner.lock().ok()?;
        inner.by_id.get(id).map(|s| Arc::clone(&s.messages))
    }
}

/// About the size of `v` serialised, without serialising it.
fn approx_json_bytes(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 12,
        Value::String(s) => s.len() + 2,
        Value::Array(a) => 2 + a.iter().map(|x| approx_json_bytes(x) + 1).sum::<usize>(),
        Value::Object(o) => {
            2 + o
                .iter()
                .map(|(k, x)| k.len() + 4 + approx_json_bytes(x))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conv(text: &str) -> Vec<Value> {
        vec![
            json!({"role": "user", "content": text}),
            json!({"role": "assistant", "content": "ok"}),
        ]
    }

    #[test]
    fn keeps_the_latest_within_count_and_size() {
        let s = Store::new(2, 1 << 20);
        s.put("a", conv("1"));
        s.put("b", conv("2"));
        s.put("c", conv("3"));
        assert!(s.get("a").is_none());
        assert_eq!(s.get("b").unwrap()[0]["content"], "2");
        assert_eq!(s.get("c").unwrap().len(), 2);

        let one: usize = conv("x").iter().map(approx_json_bytes).sum();
        let s = Store::new(100, one * 2);
        s.put("a", conv("x"));
        s.put("b", conv("y"));
        s.put("c", conv("z"));
        assert!(s.get("a").is_none() && s.get("b").is_some() && s.get("c").is_some());
        // Larger than the whole budget: not kept, nothing else lost.
        s.put("big", conv(&"x".repeat(one * 3)));
        assert!(s.get("big").is_none() && s.get("c").is_some());
        // Replacing an id does not count it twice.
        s.put("c", conv("w"));
        assert_eq!(s.get("c").unwrap()[0]["content"], "w");
        assert!(s.get("b").is_some());
    }

    #[test]
    fn the_estimate_is_close_to_the_serialised_size() {
        let v = json!({"role": "assistant", "content": "hello world", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]});
        let real = v.to_string().len();
        let est = approx_json_bytes(&v);
        assert!(est >= real / 2 && est <= real * 2, "{est} vs {real}");
    }
}
