//! Detached runs: a run the client asked to keep going without it (`x-toolpilot-detach`).
//!
//! The run is driven by a task of its own instead of by the request, and its events are kept
//! in a [`Replay`] that any number of readers go through from the start: the request that
//! started it, and later ones that re-attach by run id after losing their connection. The run
//! ends by itself, or when cancelled (`POST /v1/runs/{id}/cancel`). Finished replays are kept
//! for a while so a late re-attach still gets the whole answer.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::{RunEvent, RunHandle};

/// Most events kept per detached run; past this the run goes on, but re-attaching readers
/// get an error event instead of an incomplete answer.
const MAX_EVENTS: usize = 100_000;
/// Finished runs kept for re-attaching.
const KEEP_FINISHED: usize = 64;
/// Most detached runs going at once: each holds an upstream stream and maybe commands, and
/// nobody waits for it, so a client could otherwise start them without end.
pub const MAX_RUNNING: usize = 32;
const KEEP_FOR: Duration = Duration::from_secs(600);

#[derive(Default)]
struct State {
    events: Vec<RunEvent>,
    done: bool,
    overflow: bool,
    finished_at: Option<Instant>,
}

/// The events of one detached run, for any number of readers.
#[derive(Default)]
pub struct Replay {
    state: Mutex<State>,
    notify: Notify,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

/// One reader's position in a replay.
pub struct ReplayReader {
    replay: Arc<Replay>,
    pos: usize,
}

impl ReplayReader {
    /// The next event, or `None` after the last one.
    pub async fn recv(&mut self) -> Option<RunEvent> {
        loop {
            let replay = Arc::clone(&self.replay);
            let notified = replay.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.step() {
                Step::Event(ev) => return Some(ev),
                Step::End => return None,
                Step::Wait => notified.await,
            }
        }
    }

    /// An event that is ready now.
    pub fn try_recv(&mut self) -> Option<RunEvent> {
        match self.step() {
            Step::Event(ev) => Some(ev),
            _ => None,
        }
    }

    fn step(&mut self) -> Step {
        let Ok(s) = self.replay.state.lock() else {
            return Step::End;
        };
        if self.pos == usize::MAX {
            return Step::End;
        }
        if s.overflow {
            self.pos = usize::MAX;
            return Step::Event(RunEvent::Failed(crate::error::ApiError::internal(
                "this detached run produced more events than toolpilot keeps for re-attaching; \
                 its record is in GET /v1/runs/{id}",
            )));
        }
        if let Some(ev) = s.events.get(self.pos) {
            self.pos += 1;
            return Step::Event(ev.clone());
        }
        if s.done { Step::End } else { Step::Wait }
    }
}

enum Step {
    Event(RunEvent),
    Wait,
    End,
}

/// Replays by run id, and the ids in the order the runs started.
type Index = (HashMap<String, Arc<Replay>>, VecDeque<String>);

/// The detached runs of a server.
#[derive(Default)]
pub struct Detached {
    runs: Mutex<Index>,
}

impl Detached {
    /// Drives `handle` in a task of its own, recording its events; returns a reader from the
    /// start.
    pub fn spawn(&self, mut handle: RunHandle) -> ReplayReader {
        let replay = Arc::new(Replay::default());
        let id = handle.run_id.clone();
        let r = Arc::clone(&replay);
        let task = tokio::spawn(async move {
            while let Some(ev) = handle.recv().await {
                if let Ok(mut s) = r.state.lock() {
                    if s.events.len() < MAX_EVENTS {
                        s.events.push(ev);
                    } else {
                        s.overflow = true;
                    }
                }
                r.notify.notify_waiters();
            }
            if let Ok(mut s) = r.state.lock() {
                s.done = true;
                s.finished_at = Some(Instant::now());
            }
            r.notify.notify_waiters();
        });
        if let Ok(mut t) = replay.task.lock() {
            *t = Some(task.abort_handle());
        }
        if let Ok(mut runs) = self.runs.lock() {
            let (map, order) = &mut *runs;
            map.insert(id.clone(), Arc::clone(&replay));
            order.push_back(id);
            // Forget finished runs past the limits (running ones are always kept).
            let finished: Vec<String> = order
                .iter()
                .filter(|id| {
                    map.get(*id).is_some_and(|r| {
                        r.state
                            .lock()
                            .is_ok_and(|s| s.finished_at.is_some_and(|t| t.elapsed() > KEEP_FOR))
                    })
                })
                .cloned()
                .collect();
            for id in finished {
                map.remove(&id);
            }
            while map.len() > KEEP_FINISHED {
                let Some(oldest) = order
                    .iter()
                    .position(|id| map.get(id).is_some_and(|r| r.is_done()))
                else {
                    break;
                };
                if let Some(id) = order.remove(oldest) {
                    map.remove(&id);
                }
            }
            order.retain(|id| map.contains_key(id));
        }
        ReplayReader { replay, pos: 0 }
    }

    /// Whether another detached run may start (see [`MAX_RUNNING`]); the error says why not.
    pub fn room(&self) -> Result<(), String> {
        let running = self
            .runs
            .lock()
            .map_or(0, |r| r.0.values().filter(|r| !r.is_done()).count());
        if running >= MAX_RUNNING {
            return Err(format!(
                "{running} detached runs are still going, the most toolpilot keeps at once; \
                 wait for one to end, or cancel one with POST /v1/runs/{{id}}/cancel, and send \
                 the request again (or without x-toolpilot-detach)"
            ));
        }
        Ok(())
    }

    /// A reader from the start of a detached run's events.
    pub fn attach(&self, run_id: &str) -> Option<ReplayReader> {
        let runs = self.runs.lock().ok()?;
        let replay = Arc::clone(runs.0.get(run_id)?);
        Some(ReplayReader { replay, pos: 0 })
    }

    /// Cancels a detached run (its commands are killed as for a client that leaves). `false`
    /// when there is no such run running.
    pub fn cancel(&self, run_id: &str) -> bool {
        let Some(replay) = self.runs.lock().ok().and_then(|r| r.0.get(run_id).cloned()) else {
            return false;
        };
        if replay.is_done() {
            return false;
        }
        if let Some(t) = replay.task.lock().ok().and_then(|mut t| t.take()) {
            t.abort();
        }
        if let Ok(mut s) = replay.state.lock() {
            s.events
                .push(RunEvent::Failed(crate::error::ApiError::cancelled(
                    "the run was cancelled (POST /v1/runs/{id}/cancel)",
                )));
            s.done = true;
            s.finished_at = Some(Instant::now());
        }
        replay.notify.notify_waiters();
        true
    }
}

impl Replay {
    fn is_done(&self) -> bool {
        self.state.lock().map_or(true, |s| s.done)
    }
}
