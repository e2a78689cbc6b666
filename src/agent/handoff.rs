//! The server-side part of conversations handed back to the client.
//!
//! When a run returns tool calls to the client (the client's own tools, or calls that need the
//! user's approval and that the client declared), the client never saw the rounds toolpilot
//! ran itself: its next request carries only its own view (the text it was shown and its tool
//! calls). The run parks its full conversation here, keyed by the ids of the calls it handed
//! over; a request whose last assistant message carries exactly those calls gets the full
//! conversation back, so the model keeps its context. Bounded by age and total size (oldest
//! dropped first).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Parked {
    /// How many messages the client had when it made the request that handed off.
    client_len: usize,
    /// The whole conversation at the hand-off, ending with the assistant message that made
    /// the calls and the results of the calls toolpilot ran.
    full: Vec<Value>,
    /// The handed-over calls, sorted.
    ids: Vec<String>,
    bytes: usize,
    at: Instant,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, Arc<Parked>>,
    order: VecDeque<Arc<Parked>>,
    bytes: usize,
}

/// Parked conversations, shared by all runs of a server.
pub struct Handoffs {
    inner: Mutex<Inner>,
    max_age: Duration,
    max_bytes: usize,
}

fn call_ids(msg: &Value) -> Vec<String> {
    let mut ids: Vec<String> = msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

impl Handoffs {
    pub fn new(max_age: Duration, max_bytes: usize) -> Handoffs {
        Handoffs {
            inner: Mutex::default(),
            max_age,
            max_bytes,
        }
    }

    /// Parks the conversation of a run that hands `ids` to the client.
    pub fn park(&self, client_len: usize, full: &[Value], ids: &[String]) {
        if ids.is_empty() {
            return;
        }
        let bytes = full.iter().map(|m| m.to_string().len()).sum::<usize>();
        if bytes > self.max_bytes {
            tracing::warn!(
                bytes,
                "conversation too large to park for the client's tool results"
            );
            return;
        }
        let mut sorted = ids.to_vec();
        sorted.sort();
        let parked = Arc::new(Parked {
            client_len,
            full: full.to_vec(),
            ids: sorted,
            bytes,
            at: Instant::now(),
        });
        let Ok(mut inner) = self.inner.lock() else {
            return;
        };
        for id in ids {
            inner.by_id.insert(id.clone(), Arc::clone(&parked));
        }
        inner.bytes += bytes;
        inner.order.push_back(parked);
        self.evict(&mut inner);
    }

    fn evict(&self, inner: &mut Inner) {
        while inner
            .order
            .front()
            .is_some_and(|o| inner.bytes > self.max_bytes || o.at.elapsed() > self.max_age)
        {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            inner.bytes -= oldest.bytes;
            for id in &oldest.ids {
                if inner.by_id.get(id).is_some_and(|p| Arc::ptr_eq(p, &oldest)) {
                    inner.by_id.remove(id);
                }
            }
        }
    }

    /// The full conversation for a request that continues a handed-off run, or `None` when it
    /// does not (or the parked part has expired, or the client's history no longer lines up).
    pub fn restore(&self, messages: &[Value]) -> Option<Vec<Value>> {
        let idx = messages.iter().rposition(|m| {
            m.get("role").and_then(Value::as_str) == Some("assistant")
                && m.get("tool_calls")
                    .and_then(Value::as_array)
                    .is_some_and(|c| !c.is_empty())
        })?;
        let ids = call_ids(&messages[idx]);
        let parked = {
            let mut inner = self.inner.lock().ok()?;
            self.evict(&mut inner);
            Arc::clone(inner.by_id.get(ids.first()?)?)
        };
        if parked.ids != ids {
            tracing::info!(
                "the client's tool calls differ from the handed-off ones; history not restored"
            );
            return None;
        }
        if parked.client_len != idx {
            tracing::info!(
                expected = parked.client_len,
                found = idx,
                "the client's history changed since the hand-off; not restored"
            );
            return None;
        }
        let mut full = parked.full.clone();
        full.extend_from_slice(&messages[idx + 1..]);
        tracing::info!(
            restored = parked.full.len().saturating_sub(idx + 1),
            "restored the server-side rounds the client did not see"
        );
        Some(full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conv() -> (Vec<Value>, Vec<Value>) {
        let user = json!({"role": "user", "content": "go"});
        let full = vec![
            user.clone(),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "s1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "s1", "content": "a.txt"}),
            json!({"role": "assistant", "content": "now", "tool_calls": [
                {"id": "s2", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
                {"id": "c1", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "s2", "content": "hi"}),
        ];
        let client = vec![
            user,
            json!({"role": "assistant", "content": "now", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "deployed"}),
        ];
        (full, client)
    }

    #[test]
    fn restores_the_rounds_the_client_did_not_see() {
        let h = Handoffs::new(Duration::from_secs(60), 1 << 20);
        let (full, client) = conv();
        h.park(1, &full, &["c1".into()]);
        let restored = h.restore(&client).unwrap();
        assert_eq!(restored.len(), 6);
        assert_eq!(restored[..5], full[..]);
        assert_eq!(restored[5]["tool_call_id"], "c1");
        // Other histories are left alone.
        assert!(h.restore(&client[..1]).is_none());
        let mut other = client.clone();
        other[1]["tool_calls"][0]["id"] = json!("zz");
        assert!(h.restore(&other).is_none());
        let mut edited = client.clone();
        edited.insert(0, json!({"role": "system", "content": "x"}));
        assert!(h.restore(&edited).is_none());
    }

    #[test]
    fn bounded_by_size_and_age() {
        let (full, client) = conv();
        let tiny = Handoffs::new(Duration::from_secs(60), 10);
        tiny.park(1, &full, &["c1".into()]);
        assert!(tiny.restore(&client).is_none());
        let h = Handoffs::new(Duration::from_secs(60), 1 << 20);
        let size: usize = full.iter().map(|m| m.to_string().len()).sum();
        let two = Handoffs::new(Duration::from_secs(60), size * 2);
        two.park(1, &full, &["old".into()]);
        two.park(1, &full, &["mid".into()]);
        two.park(1, &full, &["c1".into()]);
        assert_eq!(two.inner.lock().unwrap().order.len(), 2);
        assert!(two.restore(&client).is_some());
        let expired = Handoffs::new(Duration::ZERO, 1 << 20);
        expired.park(1, &full, &["c1".into()]);
        std::thread::sleep(Duration::from_millis(2));
        assert!(expired.restore(&client).is_none());
        h.park(1, &full, &["c1".into()]);
        assert!(h.restore(&client).is_some());
    }
}
