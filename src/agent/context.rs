//! Keeping a conversation within the model's context window.
//!
//! Tokens are estimated from bytes (about 3.5 bytes per token for code and JSON) and the
//! estimate is calibrated with the `prompt_tokens` the upstream reports for each round, so it
//! tracks the real tokenizer without shipping one. Before a round, [`fit`] shrinks the
//! conversation until the request fits: first the oldest tool results are replaced by a note
//! saying what was removed, then whole old rounds and turns are dropped (the first system
//! message says how many), and last the largest remaining tool results are cut. The system
//! messages, the first user message, the last user message and the latest two tool rounds
//! are kept whole as long as anything else can go.

use serde_json::Value;

/// Bytes per token before calibration: code and JSON tokenise denser than prose.
const BYTES_PER_TOKEN: f64 = 3.5;
/// Tokens a message costs beyond its text (role, separators).
const PER_MESSAGE: u64 = 6;
/// Tool rounds at the end of the conversation kept whole while anything older can go.
const KEEP_ROUNDS: usize = 2;
/// Tool results shorter than this are not worth replacing.
const MIN_SHRINK_BYTES: usize = 400;
const NOTE_MARK: &str = "[toolpilot: context note]";

/// Estimates tokens from bytes, calibrated against what the upstream reports.
#[derive(Debug, Clone)]
pub struct Estimator {
    ratio: f64,
}

impl Default for Estimator {
    fn default() -> Self {
        Estimator { ratio: 1.0 }
    }
}

impl Estimator {
    pub fn tokens(&self, bytes: usize) -> u64 {
        (bytes as f64 / BYTES_PER_TOKEN * self.ratio).ceil() as u64
    }

    /// The tokens of a message list (as sent) plus `extra_bytes` (the tool specs).
    pub fn request(&self, messages: &[Value], extra_bytes: usize) -> u64 {
        messages.iter().map(|m| self.message(m)).sum::<u64>() + self.tokens(extra_bytes)
    }

    pub fn message(&self, m: &Value) -> u64 {
        self.tokens(message_bytes(m)) + PER_MESSAGE
    }

    /// Learns from a round: `estimated` was our guess for the prompt, `actual` what the
    /// upstream counted.
    pub fn calibrate(&mut self, estimated: u64, actual: u64) {
        if estimated == 0 || actual == 0 {
            return;
        }
        let r = self.ratio * actual as f64 / estimated as f64;
        self.ratio = r.clamp(0.3, 4.0);
    }

    /// After an overflow the estimate was too low: be more careful from now on.
    pub fn distrust(&mut self) {
        self.ratio = (self.ratio * 1.25).min(4.0);
    }
}

/// The bytes of a message that become tokens: its text, its tool calls' names and arguments.
pub fn message_bytes(m: &Value) -> usize {
    let content = match m.get("content") {
        Some(Value::String(s)) => s.len(),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p.get("text").and_then(Value::as_str) {
                Some(t) => t.len(),
                // An image costs on the order of a thousand tokens.
                None => 3_000,
            })
            .sum(),
        _ => 0,
    };
    let calls: usize = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let f = &c["function"];
                    f["name"].as_str().map_or(0, str::len)
                        + match &f["arguments"] {
                            Value::String(s) => s.len(),
                            other => other.to_string().len(),
                        }
                        + 24
                })
                .sum()
        })
        .unwrap_or(0);
    content + calls
}

/// What [`fit`] removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Pruned {
    /// Tool results replaced by a note.
    pub results: usize,
    /// Messages dropped whole.
    pub messages: usize,
    /// Tool results cut short.
    pub cut: usize,
    /// Tokens before and after.
    pub before: u64,
    pub after: u64,
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

/// Shrinks `messages` until they and `extra_tokens` (tool specs, the answer's reserve) fit in
/// `limit` tokens. Returns what was removed (`None`: it already fit). It may still not fit if
/// even the kept messages are too large; the caller sends it anyway and lets the upstream say.
pub fn fit(
    messages: &mut Vec<Value>,
    limit: u64,
    extra_tokens: u64,
    est: &Estimator,
) -> Option<Pruned> {
    let total = |ms: &[Value]| est.request(ms, 0) + extra_tokens;
    let before = total(messages);
    if before <= limit {
        return None;
    }
    let mut pruned = Pruned {
        before,
        ..Pruned::default()
    };
    let mut now = before;

    // 1. The oldest tool results outside the kept part become a note.
    let keep_from = kept_tail(messages);
    for m in messages.iter_mut().take(keep_from) {
        if now <= limit {
            break;
        }
        if role(m) != "tool" {
            continue;
        }
        let Some(text) = m.get("content").and_then(Value::as_str) else {
            continue;
        };
        if text.len() < MIN_SHRINK_BYTES || text.starts_with("[toolpilot: this tool result") {
            continue;
        }
        let old = est.message(m);
        let note = format!(
            "[toolpilot: this tool result ({} bytes) was removed to keep the conversation \
             within the model's context window. Call the tool again if you still need it.]",
            text.len()
        );
        m["content"] = Value::String(note);
        now = now - old + est.message(m);
        pruned.results += 1;
    }

    // 2. Whole old turns and tool rounds, oldest first (a call goes with its results).
    if now > limit {
        let first_user = messages.iter().position(|m| role(m) == "user");
        let keep_from = kept_tail(messages);
        let mut drop = vec![false; messages.len()];
        let mut i = 0;
        while i < keep_from && now > limit {
            let unit_end = unit_end(messages, i);
            let protected =
                role(&messages[i]) == "system" || Some(i) == first_user || unit_end > keep_from;
            if !protected {
                for (j, d) in drop.iter_mut().enumerate().take(unit_end).skip(i) {
                    now -= est.message(&messages[j]);
                    *d = true;
                }
            }
            i = unit_end;
        }
        let n = drop.iter().filter(|d| **d).count();
        if n > 0 {
            let mut k = 0;
            messages.retain(|_| {
                k += 1;
                !drop[k - 1]
            });
            pruned.messages += n;
        }
    }

    // 3. Cut the largest tool results, wherever they are.
    while now > limit {
        let Some((i, len)) = messages
            .iter()
            .enumerate()
            .filter(|(_, m)| role(m) == "tool")
            .filter_map(|(i, m)| {
                m.get("content")
                    .and_then(Value::as_str)
                    .map(|t| (i, t.len()))
            })
            .max_by_key(|(_, len)| *len)
        else {
            break;
        };
        if len < MIN_SHRINK_BYTES {
            break;
        }
        let over_bytes = ((now - limit) as f64 * BYTES_PER_TOKEN / est.ratio).ceil() as usize;
        let keep = len
            .saturating_sub(over_bytes + 200)
            .max(MIN_SHRINK_BYTES / 2);
        if keep >= len {
            break;
        }
        let old = est.message(&messages[i]);
        let text = messages[i]["content"].as_str().unwrap_or_default();
        let cut = crate::text::floor_char_boundary(text, keep);
        let shortened = format!(
            "{}\n[toolpilot: cut to fit the model's context window: showing the first {cut} of \
             {len} bytes of this result. Ask for a smaller part if you need the rest.]",
            &text[..cut]
        );
        messages[i]["content"] = Value::String(shortened);
        now = now - old + est.message(&messages[i]);
        pruned.cut += 1;
    }

    note_in_system(messages, &pruned);
    pruned.after = total(messages);
    Some(pruned)
}

/// Where the part kept whole starts: the second-to-last assistant message that made tool
/// calls, or the last user message if that is later.
fn kept_tail(messages: &[Value]) -> usize {
    let mut rounds = 0;
    let mut from = messages.len();
    for (i, m) in messages.iter().enumerate().rev() {
        if role(m) == "assistant" && m.get("tool_calls").is_some_and(|c| c.is_array()) {
            rounds += 1;
            from = i;
            if rounds == KEEP_ROUNDS {
                break;
            }
        }
    }
    let last_user = messages.iter().rposition(|m| role(m) == "user");
    match last_user {
        Some(u) if u > from || rounds == 0 => u.min(from),
        _ => from,
    }
}

/// The end (exclusive) of the unit that starts at `i`: an assistant message with its tool
/// results, or one message.
fn unit_end(messages: &[Value], i: usize) -> usize {
    let mut end = i + 1;
    if role(&messages[i]) == "assistant" && messages[i].get("tool_calls").is_some() {
        while end < messages.len() && role(&messages[end]) == "tool" {
            end += 1;
        }
    }
    end
}

/// Says in the first system message what has been removed so far (replacing an earlier note).
fn note_in_system(messages: &mut Vec<Value>, pruned: &Pruned) {
    if pruned.messages == 0 {
        return;
    }
    let mut dropped = pruned.messages;
    let previous = messages.first().and_then(|m| {
        let t = m.get("content")?.as_str()?;
        let at = t.find(NOTE_MARK)?;
        Some((at, t[at..].to_string()))
    });
    if let Some((_, note)) = &previous {
        // Carry the earlier count forward.
        if let Some(n) = note
            .split_whitespace()
            .find_map(|w| w.parse::<usize>().ok())
        {
            dropped += n;
        }
    }
    let note = format!(
        "{NOTE_MARK} {dropped} earlier messages of this conversation were removed to keep it \
         within the model's context window; the first request, the latest messages and notes \
         on removed tool results remain. Call tools again for anything you need from before."
    );
    match messages.first_mut() {
        Some(m) if role(m) == "system" && m.get("content").is_some_and(Value::is_string) => {
            let text = m["content"].as_str().unwrap_or_default().to_string();
            let base = match previous {
                Some((at, _)) => text[..at].trim_end().to_string(),
                None => text,
            };
            m["content"] = Value::String(if base.is_empty() {
                note
            } else {
                format!("{base}\n\n{note}")
            });
        }
        _ => messages.insert(0, serde_json::json!({"role": "system", "content": note})),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round(id: &str, result: &str) -> Vec<Value> {
        vec![
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": id, "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": id, "content": result}),
        ]
    }

    fn convo(rounds: usize, size: usize) -> Vec<Value> {
        let mut m = vec![
            json!({"role": "system", "content": "sys"}),
            json!({"role": "user", "content": "first question"}),
        ];
        for r in 0..rounds {
            m.extend(round(&format!("c{r}"), &format!("{r}").repeat(size)));
        }
        m
    }

    #[test]
    fn a_conversation_that_fits_is_left_alone() {
        let mut m = convo(3, 100);
        let before = m.clone();
        assert_eq!(fit(&mut m, 10_000, 0, &Estimator::default()), None);
        assert_eq!(m, before);
    }

    #[test]
    fn oldest_tool_results_go_first_and_say_so() {
        let mut m = convo(6, 3_500);
        let est = Estimator::default();
        let total = est.request(&m, 0);
        // Room for about three results.
        let p = fit(&mut m, total - 2_500, 0, &est).unwrap();
        assert_eq!(p.results, 3);
        assert_eq!(p.messages, 0);
        assert!(p.after <= total - 2_500);
        let results: Vec<&str> = m
            .iter()
            .filter(|x| x["role"] == "tool")
            .map(|x| x["content"].as_str().unwrap())
            .collect();
        assert!(results[0].starts_with("[toolpilot: this tool result (3500 bytes) was removed"));
        assert!(results[2].starts_with("[toolpilot"));
        assert!(results[3].starts_with('3'));
        // The latest two rounds are whole.
        assert!(results[4].starts_with('4') && results[5].starts_with('5'));
        // Every call still has its result.
        assert_eq!(m.len(), 2 + 12);
    }

    #[test]
    fn then_whole_old_rounds_go_and_the_system_message_says_how_many() {
        let mut m = convo(8, 2_000);
        m.insert(
            2,
            json!({"role": "assistant", "content": "x".repeat(20_000)}),
        );
        m.insert(3, json!({"role": "user", "content": "and then?"}));
        let est = Estimator::default();
        let p = fit(&mut m, 3_000, 0, &est).unwrap();
        assert!(p.messages >= 1, "{p:?}");
        assert!(p.after <= 3_000, "{p:?}");
        assert_eq!(m[0]["role"], "system");
        let sys = m[0]["content"].as_str().unwrap();
        assert!(sys.starts_with("sys\n\n[toolpilot: context note]"), "{sys}");
        assert!(sys.contains(&format!("{} earlier messages", p.messages)));
        assert_eq!(m[1]["content"], "first question");
        // No tool message lost its call, no call lost its result.
        for (i, msg) in m.iter().enumerate() {
            if msg["role"] == "tool" {
                assert!(
                    m[..i]
                        .iter()
                        .any(|a| a["tool_calls"][0]["id"] == msg["tool_call_id"]),
                    "orphan result at {i}"
                );
            }
        }
        assert_eq!(m.last().unwrap()["content"], "7".repeat(2_000));
        // A second pass adds to the count instead of writing a second note.
        let again = fit(&mut m, 1_500, 0, &est).unwrap();
        let sys = m[0]["content"].as_str().unwrap();
        assert_eq!(sys.matches("[toolpilot: context note]").count(), 1);
        assert!(
            sys.contains(&format!("{} earlier", p.messages + again.messages)),
            "{sys}"
        );
    }

    #[test]
    fn a_huge_latest_result_is_cut_as_a_last_resort() {
        let mut m = convo(1, 200_000);
        let est = Estimator::default();
        let p = fit(&mut m, 10_000, 1_000, &est).unwrap();
        assert_eq!(p.cut, 1);
        assert!(p.after <= 10_000, "{p:?}");
        let r = m[3]["content"].as_str().unwrap();
        assert!(r.contains("[toolpilot: cut to fit the model's context window"));
    }

    #[test]
    fn calibration_follows_the_upstream() {
        let mut e = Estimator::default();
        assert_eq!(e.tokens(3_500), 1_000);
        e.calibrate(1_000, 1_500);
        assert_eq!(e.tokens(3_500), 1_500);
    }
}
