//! `RunHandle`: the events of one run, and the run itself, driven while its owner waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::DropGuard;

use super::{Engine, RunEvent};

/// A running conversation, driven by whoever waits for its events. Dropping it cancels the
/// run.
pub struct RunHandle {
    pub(super) events: mpsc::Receiver<RunEvent>,
    /// The run itself; `None` once it has finished (its remaining events are still queued).
    pub(super) driver: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    pub(super) span: tracing::Span,
    pub(super) engine: Arc<Engine>,
    pub(super) started: Instant,
    pub run_id: String,
    pub(super) _cancel: DropGuard,
}

impl RunHandle {
    /// The next event, or `None` after the last one. Makes the run progress while waiting.
    pub async fn recv(&mut self) -> Option<RunEvent> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// An event that is ready without waiting: the run is polled once, so whatever it can
    /// produce right now (say, the rest of an upstream read) is collected.
    pub fn try_recv(&mut self) -> Option<RunEvent> {
        let waker = std::task::Waker::noop();
        match self.poll_recv(&mut Context::from_waker(waker)) {
            Poll::Ready(ev) => ev,
            // The run registered a no-op waker; the owner's next `recv` polls it again with
            // a real one before waiting.
            Poll::Pending => None,
        }
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<RunEvent>> {
        loop {
            if let Poll::Ready(ev) = self.events.poll_recv(cx) {
                return Poll::Ready(ev);
            }
            let Some(driver) = self.driver.as_mut() else {
                // Finished: the sender is gone, so the channel has answered `None` above.
                return Poll::Pending;
            };
            match driver.as_mut().poll(cx) {
                // Its last events are queued; read them on the next turn.
                Poll::Ready(()) => self.driver = None,
                Poll::Pending => {
                    // Polling may have queued events (the channel does not wake its own
                    // receiver's current poll), so look once more before waiting.
                    return match self.events.poll_recv(cx) {
                        Poll::Ready(ev) => Poll::Ready(ev),
                        Poll::Pending => Poll::Pending,
                    };
                }
            }
        }
    }
}

impl Drop for RunHandle {
    fn drop(&mut self) {
        if self.driver.take().is_some() {
            self.span
                .in_scope(|| tracing::info!("run cancelled: the client went away"));
            self.engine.runs.end(
                &self.run_id,
                "cancelled",
                self.started.elapsed(),
                json!({"reason": "the client went away"}),
            );
        }
    }
}
