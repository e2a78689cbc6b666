//! Background jobs: commands started with `waitForCompletion: false`.
//!
//! A job keeps running after the answer; the model reads its output with
//! `check_background_job` and stops it with `stop_background_job`; `GET /v1/jobs` lists them.
//! The number of running jobs is capped, each has a time limit, and all are stopped (whole
//! process trees) when the server shuts down.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::exec::{Capture, Ended};

/// What a job is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "exit_code")]
pub enum JobState {
    Running,
    Exited(i32),
    Stopped,
    TimedOut,
}

/// One job.
pub struct Job {
    pub id: String,
    pub command: String,
    pub run_id: String,
    pub pid: u32,
    pub started: u64,
    pub capture: Arc<Mutex<Capture>>,
    pub state: Mutex<JobState>,
    /// What toolpilot did after the job ended (protected paths put back), for its report.
    pub note: Mutex<String>,
    stop: CancellationToken,
    /// Resolves when the job's task has finished (output complete, tree reaped).
    finished: tokio::sync::watch::Receiver<bool>,
}

/// A job as listed over HTTP.
#[derive(Debug, Clone, Serialize)]
pub struct JobInfo {
    pub id: String,
    pub command: String,
    pub run_id: String,
    pub pid: u32,
    pub started: u64,
    #[serde(flatten)]
    pub state: JobState,
    pub output_bytes: u64,
}

pub struct Jobs {
    max: usize,
    next: AtomicU64,
    table: Mutex<BTreeMap<String, Arc<Job>>>,
}

impl Job {
    pub fn state(&self) -> JobState {
        self.state.lock().map(|s| *s).unwrap_or(JobState::Stopped)
    }

    pub fn info(&self) -> JobInfo {
        JobInfo {
            id: self.id.clone(),
            command: self.command.clone(),
            run_id: self.run_id.clone(),
            pid: self.pid,
            started: self.started,
            state: self.state(),
            output_bytes: self.capture.lock().map(|c| c.total).unwrap_or(0),
        }
    }

    /// Asks the job to stop and waits until its tree is gone.
    pub async fn stop(&self) {
        self.stop.cancel();
        self.wait_finished().await;
    }

    /// Waits until the job's task is done (it ended or was stopped).
    pub async fn wait_finished(&self) {
        let mut rx = self.finished.clone();
        while !*rx.borrow() {
            if rx.changed().await.is_err() {
                break;
            }
        }
    }
}

impl Jobs {
    pub fn new(max: usize) -> Jobs {
        Jobs {
            max,
            next: AtomicU64::new(1),
            table: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn running(&self) -> usize {
        self.table
            .lock()
            .map(|t| {
                t.values()
                    .filter(|j| j.state() == JobState::Running)
                    .count()
            })
            .unwrap_or(0)
    }

    /// Whether another job may start; `Err` says why not.
    pub fn check_room(&self) -> Result<(), String> {
        if self.running() >= self.max {
            return Err(format!(
                "{} background jobs are already running (the limit is {}, terminal.max_jobs); \
                 stop one with stop_background_job first",
                self.running(),
                self.max
            ));
        }
        Ok(())
    }

    /// Registers a started command and supervises it in the background until it ends, times
    /// out or is stopped. `on_end` runs after the tree is gone (checkpoint recording).
    pub fn spawn(
        &self,
        command: &str,
        run_id: &str,
        mut running: super::exec::Running,
        limit: Duration,
        on_end: impl FnOnce() -> String + Send + 'static,
    ) -> Arc<Job> {
        let id = format!("job-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = tokio::sync::watch::channel(false);
        let job = Arc::new(Job {
            id: id.clone(),
            command: command.to_string(),
            run_id: run_id.to_string(),
            pid: running.pid(),
            started: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            capture: Arc::clone(&running.capture),
            state: Mutex::new(JobState::Running),
            note: Mutex::new(String::new()),
            stop: CancellationToken::new(),
            finished: rx,
        });
        let j = Arc::clone(&job);
        tokio::spawn(async move {
            // No idle limit for jobs: servers are quiet for long stretches.
            let ended = running
                .wait(limit, Duration::from_secs(10 * 365 * 24 * 3600), &j.stop)
                .await;
            let state = match ended {
                Ended::Exited(c) => JobState::Exited(c),
                Ended::TimedOut => JobState::TimedOut,
                Ended::Idle | Ended::Cancelled | Ended::Stopped => JobState::Stopped,
                Ended::SupervisorKilled { signal, leftovers } => {
                    tracing::warn!(
                        job = %j.id,
                        signal,
                        leftovers,
                        "a background job's supervisor was killed; its remaining processes were killed"
                    );
                    JobState::Exited(128 + signal)
                }
            };
            drop(running);
            // The job counts as ended once what follows it (protected paths put back, changes
            // recorded) is done, so its report is complete when it says so. That is file and
            // git work: on a blocking thread.
            let note = tokio::task::spawn_blocking(on_end)
                .await
                .unwrap_or_else(|e| format!("\n[The clean-up after the job failed: {e}]"));
            if let Ok(mut n) = j.note.lock() {
                *n = note;
            }
            if let Ok(mut s) = j.state.lock() {
                *s = state;
            }
            let _ = tx.send(true);
        });
        if let Ok(mut t) = self.table.lock() {
            t.insert(id, Arc::clone(&job));
        }
        job
    }

    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        self.table.lock().ok()?.get(id.trim()).cloned()
    }

    pub fn list(&self) -> Vec<JobInfo> {
        self.table
            .lock()
            .map(|t| t.values().map(|j| j.info()).collect())
            .unwrap_or_default()
    }

    /// Stops every running job (server shutdown).
    pub async fn shutdown(&self) {
        let jobs: Vec<Arc<Job>> = self
            .table
            .lock()
            .map(|t| t.values().cloned().collect())
            .unwrap_or_default();
        for j in jobs {
            if j.state() == JobState::Running {
                j.stop().await;
            }
        }
    }
}
