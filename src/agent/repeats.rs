//! Repeated calls: the pointer to an earlier identical result, and the loop guard.
//!
//! A model that is stuck calls the same tool with the same arguments again and again, or
//! retries a call that fails the same way each time. The first is answered with a pointer to
//! the earlier result while nothing has changed (`agent.detect_repeats`); the loop guard
//! (`agent.repeat_limit`, default 3) ends the run when the same call comes that many times in
//! a row, or the same call fails the same way that many times (other calls between), with an
//! answer that says what repeated. Without it such a model would use every round the run has.

use std::collections::HashMap;

use crate::tools::registry::Status;

/// What a run remembers about the calls it has seen.
#[derive(Default)]
pub(super) struct Repeats {
    /// Calls already run, by tool and canonical arguments, with their call id: an identical
    /// call is answered with a pointer to the earlier result until something changes.
    pub(super) seen: HashMap<(String, String), String>,
    /// The last call (tool, canonical arguments) and how many times in a row it came.
    last: Option<(String, String)>,
    streak: u32,
    /// How often each failure (tool, canonical arguments, result text) happened in this run.
    failures: HashMap<(String, String, String), u32>,
    /// Why the guard stopped the run, once it has.
    tripped: Option<String>,
}

/// Most distinct failures remembered: a run's calls are bounded by its rounds, but the guard
/// does not need more than this to see a loop.
const MAX_FAILURES: usize = 256;

impl Repeats {
    /// Notes one call that was answered (run, refused, or pointed to an earlier result), in
    /// the model's order. `limit` 0 turns the guard off.
    pub(super) fn note(
        &mut self,
        limit: u32,
        name: &str,
        canonical: &str,
        content: &str,
        status: Status,
    ) {
        if limit == 0 || self.tripped.is_some() {
            return;
        }
        let key = (name.to_string(), canonical.to_string());
        if self.last.as_ref() == Some(&key) {
            self.streak += 1;
        } else {
            self.last = Some(key);
            self.streak = 1;
        }
        if self.streak >= limit {
            self.tripped = Some(format!(
                "the model called {name} with the same arguments ({}) {limit} times in a row",
                crate::text::preview(canonical, 200)
            ));
            return;
        }
        if status == Status::Ok {
            return;
        }
        let failure = (name.to_string(), canonical.to_string(), content.to_string());
        if !self.failures.contains_key(&failure) && self.failures.len() >= MAX_FAILURES {
            return;
        }
        let n = self.failures.entry(failure).or_insert(0);
        *n += 1;
        if *n >= limit {
            self.tripped = Some(format!(
                "{name} failed the same way {limit} times: {}",
                crate::text::preview(content, 300)
            ));
        }
    }

    /// The answer that ends a run the guard stopped.
    pub(super) fn verdict(&self) -> Option<String> {
        self.tripped.as_ref().map(|why| {
            format!(
                "toolpilot stopped this run because it was repeating itself: {why}. The calls \
                 were not getting anywhere (the loop guard, agent.repeat_limit). Ask again, \
                 perhaps with more detail or another approach."
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_third_identical_call_in_a_row_trips_the_guard() {
        let mut r = Repeats::default();
        r.note(3, "read_file", "{\"filepath\":\"a\"}", "A", Status::Ok);
        r.note(3, "read_file", "{\"filepath\":\"a\"}", "A", Status::Ok);
        assert!(r.verdict().is_none());
        r.note(3, "read_file", "{\"filepath\":\"a\"}", "A", Status::Ok);
        let v = r.verdict().unwrap();
        assert!(
            v.contains("called read_file with the same arguments ({\"filepath\":\"a\"}) 3 times"),
            "{v}"
        );
    }

    #[test]
    fn another_call_in_between_resets_the_streak() {
        let mut r = Repeats::default();
        for _ in 0..5 {
            r.note(3, "ls", "{}", "x", Status::Ok);
            r.note(3, "read_file", "{}", "y", Status::Ok);
        }
        assert!(r.verdict().is_none());
    }

    #[test]
    fn the_third_identical_failure_trips_it_whatever_came_between() {
        let mut r = Repeats::default();
        r.note(3, "edit", "{\"a\":1}", "no match", Status::Error);
        r.note(3, "ls", "{}", "x", Status::Ok);
        r.note(3, "edit", "{\"a\":1}", "no match", Status::Error);
        r.note(3, "ls", "{}", "x", Status::Ok);
        // Another call failing the same way is not a repeat of this one.
        r.note(3, "edit", "{\"a\":2}", "no match", Status::Error);
        assert!(r.verdict().is_none());
        r.note(3, "edit", "{\"a\":1}", "no match", Status::Error);
        assert!(
            r.verdict()
                .unwrap()
                .contains("edit failed the same way 3 times: no match")
        );
    }

    #[test]
    fn limit_zero_is_off() {
        let mut r = Repeats::default();
        for _ in 0..10 {
            r.note(0, "edit", "{}", "no match", Status::Error);
        }
        assert!(r.verdict().is_none());
    }
}
