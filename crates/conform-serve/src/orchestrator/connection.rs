//! A connection's clock: how long it may stay silent, and how long a request head may
//! take once it has started.
//!
//! hyper's own `header_read_timeout` starts when the connection goes idle, so it cannot
//! tell a keep-alive connection that is quiet from a client that sends its headers a
//! byte at a time, and it closes without an answer. Here the two are separate: a
//! connection that sends nothing for the idle timeout is closed quietly (nothing was
//! asked); one that started a request and has not finished its headers within the
//! header timeout gets a 408 problem and is closed. The body is the application's to
//! time (see `intake`), and nothing here runs while a request is being handled.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Request, StatusCode};
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use super::problem::Problem;

/// Where a connection stands.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Between requests (or before the first), since `since`; `head` is when the first
    /// byte of the next request arrived.
    Waiting {
        since: Instant,
        head: Option<Instant>,
    },
    /// This many requests are being handled.
    Busy(usize),
}

/// Why a connection's time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    Idle,
    Head,
}

/// Shared by a connection's I/O (which sees bytes arrive) and its service (which sees
/// requests start and end).
#[derive(Debug)]
pub(crate) struct Clock {
    idle: Duration,
    head: Duration,
    phase: Mutex<Phase>,
}

impl Clock {
    pub(crate) fn new(idle: Duration, head: Duration) -> Arc<Clock> {
        Arc::new(Clock {
            idle,
            head,
            phase: Mutex::new(Phase::Waiting {
                since: Instant::now(),
                head: None,
            }),
        })
    }

    fn phase(&self) -> MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bytes_arrived(&self) {
        if let Phase::Waiting {
            head: head @ None, ..
        } = &mut *self.phase()
        {
            *head = Some(Instant::now());
        }
    }

    fn request_started(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Waiting { .. } => Phase::Busy(1),
        };
    }

    fn request_ended(&self) {
        let mut phase = self.phase();
        *phase = match *phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Waiting {
                since: Instant::now(),
                head: None,
            },
        };
    }

    fn deadline(&self) -> Option<(Instant, Stall)> {
        match *self.phase() {
            Phase::Busy(_) => None,
            Phase::Waiting { since, head: None } => Some((since + self.idle, Stall::Idle)),
            Phase::Waiting {
                head: Some(first), ..
            } => Some((first + self.head, Stall::Head)),
        }
    }
}

/// A connection's I/O, closed when its clock runs out.
pub(crate) struct Clocked<IO> {
    io: IO,
    clock: Arc<Clock>,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl<IO> Clocked<IO> {
    pub(crate) fn new(io: IO, clock: Arc<Clock>) -> Clocked<IO> {
        Clocked {
            io,
            clock,
            sleep: None,
        }
    }
}

/// The answer to a head that did not arrive in time; written straight to the socket,
/// since there is no request for the application to answer.
fn head_timeout_answer() -> Vec<u8> {
    Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        "request_timeout",
        "the request's headers did not arrive in time",
    )
    .http1_bytes()
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Clocked<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.clock.bytes_arrived();
                }
                return Poll::Ready(Ok(()));
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
            Poll::Pending => {}
        }
        let Some((deadline, stall)) = this.clock.deadline() else {
            this.sleep = None;
            return Poll::Pending;
        };
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.deadline() != deadline {
            sleep.as_mut().reset(deadline);
        }
        if sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.sleep = None;
        match stall {
            // End of stream: hyper closes a connection that went quiet between requests
            // without an error.
            Stall::Idle => Poll::Ready(Ok(())),
            Stall::Head => {
                // Best effort, once: a few hundred bytes into an empty send buffer.
                let _ = Pin::new(&mut this.io).poll_write(cx, &head_timeout_answer());
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the request's headers did not arrive in time",
                )))
            }
        }
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Clocked<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A service that tells the clock when each request starts and when its answer is
/// ready (or the request is abandoned).
#[derive(Clone)]
pub(crate) struct Tracked<S> {
    inner: S,
    clock: Arc<Clock>,
}

impl<S> Tracked<S> {
    pub(crate) fn new(inner: S, clock: Arc<Clock>) -> Tracked<S> {
        Tracked { inner, clock }
    }
}

/// Ends the request on the clock however its future ends.
struct Ended(Arc<Clock>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

impl<S, B> tower::Service<Request<B>> for Tracked<S>
where
    S: tower::Service<Request<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.clock.request_started();
        let ended = Ended(Arc::clone(&self.clock));
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(ended);
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(clock: &Clock) -> (Duration, Stall) {
        let (at, stall) = clock.deadline().unwrap();
        (at.saturating_duration_since(Instant::now()), stall)
    }

    fn about(d: Duration, secs: u64) -> bool {
        d <= Duration::from_secs(secs) && d > Duration::from_secs(secs) - Duration::from_millis(500)
    }

    #[tokio::test]
    async fn idle_then_head_then_busy_then_idle() {
        let clock = Clock::new(Duration::from_secs(10), Duration::from_secs(5));
        let (d, stall) = left(&clock);
        assert!(stall == Stall::Idle && about(d, 10), "{d:?} {stall:?}");
        clock.bytes_arrived();
        let (first, stall) = clock.deadline().unwrap();
        assert_eq!(stall, Stall::Head);
        assert!(about(first.saturating_duration_since(Instant::now()), 5));
        // More bytes do not move the head's deadline: a head sent a byte at a time gets
        // no more time than one sent at once.
        tokio::time::sleep(Duration::from_millis(20)).await;
        clock.bytes_arrived();
        assert_eq!(clock.deadline().unwrap().0, first);
        clock.request_started();
        assert!(
            clock.deadline().is_none(),
            "no clock while a request is handled"
        );
        clock.request_started();
        clock.request_ended();
        assert!(
            clock.deadline().is_none(),
            "one of two requests still handled"
        );
        clock.request_ended();
        let (d, stall) = left(&clock);
        assert!(stall == Stall::Idle && about(d, 10), "{d:?} {stall:?}");
    }
}
