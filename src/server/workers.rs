//! Serving on worker threads: one single-threaded tokio runtime per thread, all accepting from
//! the same listening socket, each connection served to its end by the thread that got it.
//!
//! On one work-stealing runtime, a request's read, its upstream round and its answer are each
//! picked up by whichever thread is free, and every hand-over is a cross-thread wake-up. Here a
//! connection, the upstream connections its requests use ([`crate::upstream::use_pool`]) and
//! the tasks its runs spawn all live on one thread.
//!
//! Connections are balanced when they are accepted: a thread that accepts one while another
//! thread serves fewer hands the socket to the least loaded thread. (`SO_REUSEPORT` would
//! balance in the kernel, but it lets any process of the same user, a command the model runs
//! included, bind the same port and receive a share of the connections and their tokens.)
//!
//! [`Workers::stop`] begins a graceful shutdown (no new connection, requests in flight
//! finish); [`Workers::run_until`] waits for it. The threads keep running their remaining
//! tasks (background jobs, detached runs) until [`Workers`] is dropped, so the server's
//! clean-up can still stop those in order.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The serving threads.
pub struct Workers {
    stop: CancellationToken,
    finish: CancellationToken,
    results: mpsc::UnboundedReceiver<io::Result<()>>,
    /// Threads whose accept loop has not ended yet.
    pending: usize,
    /// The first error a thread's accept loop ended with.
    error: Option<io::Error>,
}

/// Live connections per thread: what the balancing at accept reads, and `/metrics` shows.
#[derive(Clone)]
pub struct Connections(Arc<[AtomicUsize]>);

impl Connections {
    /// No connection yet on any of `threads` threads.
    pub fn new(threads: usize) -> Connections {
        Connections((0..threads.max(1)).map(|_| AtomicUsize::new(0)).collect())
    }

    /// The open connections of each thread.
    pub fn counts(&self) -> Vec<usize> {
        self.0.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }
}

/// A socket handed from the thread that accepted it to a less loaded one (already counted on
/// the receiving thread).
type Handed = (std::net::TcpStream, Live);

impl Workers {
    /// Starts one thread per entry of `connections`, serving `app` on `listener`. Everything
    /// that can fail (a runtime, a duplicate of the listening socket, a thread) fails here,
    /// before any request is served.
    pub fn start(
        listener: TcpListener,
        app: Router,
        connections: Connections,
    ) -> io::Result<Workers> {
        let count = connections.0.len();
        let listener = listener.into_std()?;
        let mut prepared = Vec::with_capacity(count);
        let mut inboxes = Vec::with_capacity(count);
        for _ in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let own = listener.try_clone()?;
            let own = {
                let _entered = runtime.enter();
                TcpListener::from_std(own)?
            };
            let (tx, rx) = mpsc::unbounded_channel::<Handed>();
            inboxes.push(tx);
            prepared.push((runtime, own, rx));
        }
        drop(listener);
        let inboxes: Arc<[mpsc::UnboundedSender<Handed>]> = inboxes.into();
        let (results_tx, results) = mpsc::unbounded_channel();
        let mut workers = Workers::reporting_to(results);
        for (me, (runtime, listener, inbox)) in prepared.into_iter().enumerate() {
            let accept = Balanced {
                listener,
                inbox,
                me,
                load: connections.clone(),
                inboxes: Arc::clone(&inboxes),
            };
            let app = app.clone();
            let stop = workers.stop.clone();
            let finish = workers.finish.clone();
            let mut report = Report(Some(results_tx.clone()));
            // A failed spawn returns here, and dropping `workers` ends the threads started.
            std::thread::Builder::new()
                .name(format!("http-worker-{me}"))
                .spawn(move || {
                    crate::upstream::use_pool(me);
                    runtime.block_on(async move {
                        let served = axum::serve(accept, app.into_make_service())
                            .with_graceful_shutdown(stop.clone().cancelled_owned())
                            .await;
                        if let Err(e) = &served {
                            tracing::error!(error = %e, "a serving thread stopped; stopping the others");
                            stop.cancel();
                        }
                        report.send(served);
                        // Jobs and detached runs started here go on until the server is done.
                        finish.cancelled().await;
                    });
                })?;
            workers.pending += 1;
        }
        Ok(workers)
    }

    /// No thread yet; the threads started will report on `results`.
    fn reporting_to(results: mpsc::UnboundedReceiver<io::Result<()>>) -> Workers {
        Workers {
            stop: CancellationToken::new(),
            finish: CancellationToken::new(),
            results,
            pending: 0,
            error: None,
        }
    }

    /// Stops accepting; the requests in flight finish.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Serves until `shutdown` resolves (or a thread fails), then until the requests in
    /// flight have finished. The threads' other tasks go on until `self` is dropped.
    pub async fn run_until(
        &mut self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> io::Result<()> {
        tokio::select! {
            _ = shutdown => self.stop(),
            () = self.served() => {}
        }
        self.served().await;
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Waits until every thread's accept loop has ended (cancel-safe).
    async fn served(&mut self) {
        while self.pending > 0 {
            match self.results.recv().await {
                Some(result) => {
                    self.pending -= 1;
                    if let Err(e) = result {
                        self.error.get_or_insert(e);
                    }
                }
                None => break,
            }
        }
    }
}

impl Drop for Workers {
    /// Ends the threads: connections still open are closed, tasks still running are dropped.
    fn drop(&mut self) {
        self.stop.cancel();
        self.finish.cancel();
    }
}

/// How a thread's accept loop ended, sent once: by the thread, or by the unwinding of a thread
/// that panicked (so that [`Workers::run_until`] never waits for a thread that is gone).
struct Report(Option<mpsc::UnboundedSender<io::Result<()>>>);

impl Report {
    fn send(&mut self, result: io::Result<()>) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(result);
        }
    }
}

impl Drop for Report {
    fn drop(&mut self) {
        self.send(Err(io::Error::other("a serving thread panicked")));
    }
}

/// One thread's accept loop: its own registration of the shared listening socket, and the
/// sockets other threads hand it.
struct Balanced {
    listener: TcpListener,
    inbox: mpsc::UnboundedReceiver<Handed>,
    me: usize,
    load: Connections,
    inboxes: Arc<[mpsc::UnboundedSender<Handed>]>,
}

impl Balanced {
    /// The thread with the fewest live connections, this one on a tie.
    fn least_loaded(&self) -> usize {
        let load = &self.load.0;
        let mut best = (self.me, load[self.me].load(Ordering::Relaxed));
        for (i, n) in load.iter().enumerate() {
            let n = n.load(Ordering::Relaxed);
            if n < best.1 {
                best = (i, n);
            }
        }
        best.0
    }

    /// The next connection this thread serves.
    async fn next(&mut self) -> (TcpStream, Live) {
        loop {
            tokio::select! {
                biased;
                Some((tcp, live)) = self.inbox.recv() => match TcpStream::from_std(tcp) {
                    Ok(tcp) => return (tcp, live),
                    Err(e) => tracing::warn!(error = %e, "cannot take over a handed connection"),
                },
                accepted = self.listener.accept() => {
                    let tcp = match accepted {
                        Ok((tcp, _)) => tcp,
                        Err(e) => {
                            accept_error(e).await;
                            continue;
                        }
                    };
                    let to = self.least_loaded();
                    let live = Live::new(&self.load, to);
                    if to == self.me {
                        return (tcp, live);
                    }
                    // The socket leaves this thread's event loop for the other's.
                    match tcp.into_std() {
                        Ok(std) => {
                            if let Err(mpsc::error::SendError((std, _))) =
                                self.inboxes[to].send((std, live))
                            {
                                // That thread has stopped: serve it here.
                                if let Ok(tcp) = TcpStream::from_std(std) {
                                    return (tcp, Live::new(&self.load, self.me));
                                }
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot hand a connection over"),
                    }
                }
            }
        }
    }
}

impl axum::serve::Listener for Balanced {
    type Io = Counted;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Counted, SocketAddr) {
        let (tcp, live) = self.next().await;
        // Small SSE writes must leave at once: no Nagle delay.
        let _ = tcp.set_nodelay(true);
        let peer = tcp
            .peer_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        (Counted { tcp, _live: live }, peer)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// What to do after a failed `accept`: a connection reset before it was taken is nothing; a
/// lack of file descriptors or memory is logged and waited out (as a busy loop would not help).
async fn accept_error(e: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    tracing::error!(error = %e, "cannot accept a connection; retrying in 1 s");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// One live connection on a thread, counted until dropped.
struct Live {
    load: Connections,
    thread: usize,
}

impl Live {
    fn new(load: &Connections, thread: usize) -> Live {
        load.0[thread].fetch_add(1, Ordering::Relaxed);
        Live {
            load: load.clone(),
            thread,
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.load.0[self.thread].fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection's socket, counted on its thread while it is open.
pub struct Counted {
    tcp: TcpStream,
    _live: Live,
}

impl AsyncRead for Counted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Two threads' accept loops: the first listens at the address returned, the second on a
    /// socket no one connects to (so only the first accepts).
    async fn pair() -> (Balanced, Balanced, SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let idle = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let load = Connections::new(2);
        let (tx0, rx0) = mpsc::unbounded_channel();
        let (tx1, rx1) = mpsc::unbounded_channel();
        let inboxes: Arc<[mpsc::UnboundedSender<Handed>]> = vec![tx0, tx1].into();
        let make = |listener, inbox, me| Balanced {
            listener,
            inbox,
            me,
            load: load.clone(),
            inboxes: Arc::clone(&inboxes),
        };
        (make(listener, rx0, 0), make(idle, rx1, 1), addr)
    }

    #[tokio::test]
    async fn a_thread_that_has_more_connections_hands_the_next_one_over() {
        let (mut busy, mut other, addr) = pair().await;
        let mut a = TcpStream::connect(addr).await.unwrap();
        let (served_a, _live_a) = busy.next().await;
        assert_eq!(busy.load.counts(), [1, 0]);
        // The busy thread accepts the second connection too, and hands it to the other.
        let mut b = TcpStream::connect(addr).await.unwrap();
        let (served_b, _live_b) = tokio::select! {
            _ = busy.next() => panic!("the busy thread kept a connection it should hand over"),
            got = other.next() => got,
        };
        assert_eq!(busy.load.counts(), [1, 1]);
        // Both sockets are the clients' own, and work in both directions.
        for (client, mut served) in [(&mut a, served_a), (&mut b, served_b)] {
            client.write_all(b"ping").await.unwrap();
            let mut buf = [0u8; 4];
            served.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"ping");
            served.write_all(b"pong").await.unwrap();
            client.read_exact(&mut buf).await.unwrap();
            assert_eq!(&buf, b"pong");
        }
    }

    #[tokio::test]
    async fn a_thread_that_ends_without_reporting_is_not_waited_for() {
        let (tx, results) = mpsc::unbounded_channel();
        let mut workers = Workers::reporting_to(results);
        workers.pending = 2;
        let mut fine = Report(Some(tx.clone()));
        let gone = Report(Some(tx));
        fine.send(Ok(()));
        // A thread that panicked: its report is dropped unsent.
        std::thread::spawn(move || {
            let _report = gone;
            panic!("the serving thread fails");
        })
        .join()
        .unwrap_err();
        let ended = workers.run_until(std::future::pending()).await;
        assert_eq!(ended.unwrap_err().to_string(), "a serving thread panicked");
    }

    #[tokio::test]
    async fn a_connection_is_uncounted_when_it_closes() {
        let (mut busy, _other, addr) = pair().await;
        let _client = TcpStream::connect(addr).await.unwrap();
        let (tcp, live) = busy.next().await;
        let counted = Counted { tcp, _live: live };
        assert_eq!(busy.load.counts(), [1, 0]);
        drop(counted);
        assert_eq!(busy.load.counts(), [0, 0]);
    }
}
