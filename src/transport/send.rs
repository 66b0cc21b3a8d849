//! Sending, and the outcome rules of a send, for either transport: a `NOSCRIPT` answered by
//! the script's text, a repeatable request sent again once when its reply was lost, and the
//! backoff while a server is away. The driver's settling of an unsure outcome builds on these.

use std::future::{ready, Future};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use redis::Value;

use super::{Admin, ConnId, Fault, Primary, Transport};
use crate::protocol::request::Request;
use crate::Error;

/// Either transport, as futures: what the driver, written once for both APIs, sends through.
/// A blocking [`Transport`]'s futures are ready when first polled.
pub(crate) trait AnyTransport: Send + Sync {
    /// [`Transport::call`]: sends `request` and returns its replies, all by `deadline`.
    fn exchange(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Value>, Fault>> + Send;

    /// [`Transport::kill`]: closes connection `conn` at its server.
    fn close(
        &self,
        conn: ConnId,
        deadline: Instant,
    ) -> impl Future<Output = Result<Admin, Fault>> + Send;

    /// The blocking transport to the same servers, which says what they are (hash tags, the
    /// settings they refuse, their clocks' drift).
    fn blocking(&self) -> &dyn Transport;

    /// [`Transport::primaries`], each a transport of this kind, listed by `deadline`: for what
    /// must reach every primary (the operator's views, `reset_all`).
    fn list_primaries(
        &self,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Primary<Arc<Self>>>, Error>> + Send;
}

impl AnyTransport for dyn Transport {
    fn exchange(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Value>, Fault>> + Send {
        ready(self.call(request, deadline))
    }

    fn close(
        &self,
        conn: ConnId,
        deadline: Instant,
    ) -> impl Future<Output = Result<Admin, Fault>> + Send {
        ready(self.kill(conn, deadline))
    }

    fn blocking(&self) -> &dyn Transport {
        self
    }

    fn list_primaries(
        &self,
        deadline: Instant,
    ) -> impl Future<Output = Result<Vec<Primary<Arc<Self>>>, Error>> + Send {
        ready(self.primaries(deadline))
    }
}

/// The replies of a repeatable request.
pub(crate) struct Answered {
    pub(crate) replies: Vec<Value>,
    /// When the send that was answered went out.
    pub(crate) sent: Instant,
    /// Whether an earlier send lost its reply, and so may have run too.
    pub(crate) lost_before: bool,
}

impl Answered {
    /// The first reply (`nil` if, against the protocol, there was none).
    pub(crate) fn first(&self) -> &Value {
        self.replies.first().unwrap_or(&Value::Nil)
    }
}

/// The first pause of the backoff while a server is away (a restart, a failover); each
/// failure doubles it, up to [`MAX_PAUSE`]. Never a way of waiting for the lock.
pub(crate) const FIRST_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// The pause after `pause`, in the backoff while a server is away.
pub(crate) fn longer(pause: Duration) -> Duration {
    (pause * 2).min(MAX_PAUSE)
}

/// Logs a refusal of `CLIENT KILL` once per process.
static KILL_REFUSED: AtomicBool = AtomicBool::new(false);

pub(crate) fn log_kill_refused_once() {
    if !KILL_REFUSED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "the server refuses CLIENT KILL: lost replies are settled by reading state only; \
             see the ACL rule in the crate docs"
        );
    }
}

/// Sends `request`, and its script's text in a second round trip if the server answered
/// `NOSCRIPT` (the refused call ran nothing).
pub(crate) async fn send<T: AnyTransport + ?Sized>(
    transport: &T,
    request: &Request,
    deadline: Instant,
) -> Result<Vec<Value>, Fault> {
    let mut replies = transport.exchange(request, deadline).await?;
    if let Some((at, retry)) = request.noscript_retry(&replies) {
        let retried = transport.exchange(&retry, deadline).await?;
        request.patch(&mut replies, at, retried);
    }
    Ok(replies)
}

/// Sends a repeatable request, once more on a new connection if the first reply was lost:
/// running it twice does no more than running it once.
pub(crate) async fn send_repeatable<T: AnyTransport + ?Sized>(
    transport: &T,
    request: &Request,
    deadline: Instant,
) -> Result<Answered, redis::RedisError> {
    debug_assert!(request.repeatable);
    let mut lost_before = false;
    loop {
        let sent = Instant::now();
        match send(transport, request, deadline).await {
            Ok(replies) => {
                return Ok(Answered {
                    replies,
                    sent,
                    lost_before,
                })
            }
            Err(Fault::Lost { error, .. }) if !lost_before && Instant::now() < deadline => {
                log::debug!("reply lost ({error}); sending again");
                lost_before = true;
            }
            // Not sent again, but the first send may have run: not a plain refusal.
            Err(Fault::NotSent(e)) if lost_before => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "reply lost, and sending again failed",
                    e.to_string(),
                )))
            }
            Err(fault) => return Err(fault.into_error()),
        }
    }
}

/// Runs a future over a blocking transport to its end on this thread. Such a future is ready
/// when first polled; should one ever not be, the thread parks until woken.
pub(crate) fn now<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::task::Poll;

    use super::now;

    #[test]
    fn now_runs_a_ready_future_to_its_output() {
        assert_eq!(now(async { 7 }), 7);
    }

    #[test]
    fn now_parks_until_a_pending_future_is_woken_from_another_thread() {
        let mut polls = 0;
        let output = now(poll_fn(|context| {
            polls += 1;
            if polls == 1 {
                let waker = context.waker().clone();
                std::thread::spawn(move || waker.wake());
                return Poll::Pending;
            }
            Poll::Ready(polls)
        }));
        assert!(output >= 2);
    }
}
