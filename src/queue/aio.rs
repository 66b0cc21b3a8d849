//! The async wait of the fair queue engine: the blocking wait's twin ([`super`]) over the
//! async transport, driven by the same [`Queued`]. Each waiting task blocks in `BLPOP` on its
//! own signal list, on a connection of its own (a waiter waits for its own grant, not for a
//! name, so tasks share nothing but the transport), until its next event or its deadline; a
//! timer then ends the `BLPOP` with `CLIENT UNBLOCK`, as a cancel does.
//!
//! A future dropped at any `.await` leaves the queue from a task (or, its runtime ending, from
//! the dropping thread: see [`finish`]), passing on a grant that came meanwhile: the next
//! waiter is served at once, not after this one's heartbeat lapses.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::{due, pop_request, token, tried, Backoff, By, Line, Waited};
use crate::cancel::CancelToken;
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue::{self, Ask, Mode, Queued, Step};
use crate::protocol::request::Request;
use crate::transport::admin::closed_by_end;
use crate::transport::aio::{finish, AsyncTransport, AsyncWaiter};
use crate::transport::send::send_repeatable;
use crate::transport::{Admin, ConnId, Fault};
use crate::Error;

impl Line<'_, dyn AsyncTransport> {
    /// Waits in line for `ask` until `deadline` (`None`: no limit) or a cancel, as the
    /// blocking wait does; on a server that does not answer, it still ends by the deadline
    /// and the grace. Dropped before its end, it leaves the queue unattended.
    pub(crate) async fn wait(
        &self,
        ask: &Ask,
        deadline: Option<Instant>,
        cancel: &CancelToken,
    ) -> Result<Waited, Error> {
        let mut backoff = Backoff::new(self.io_timeout, deadline);
        let in_line = self.in_line(ask);
        let mut queued = Queued::new(ask, deadline);
        let mut conn = None;
        let mut step = Step::Ask;
        loop {
            let by = backoff.by();
            let due = due(step);
            let outcome = match step {
                Step::Ask => self
                    .ask(ask, by.now())
                    .await
                    .map(|(sent, asked)| queued.asked(sent, asked, Instant::now())),
                Step::Block { until } => self
                    .pop(&mut conn, ask, until, by, cancel)
                    .await
                    .map(|token| queued.popped(token, Instant::now())),
                Step::Leave => {
                    in_line.leave(by.now()).await?;
                    self.rest(conn);
                    return Ok(Waited::TimedOut);
                }
                Step::Granted { token, valid_until } => {
                    in_line.granted();
                    self.rest(conn);
                    return Ok(Waited::Granted { token, valid_until });
                }
            };
            if cancel.is_cancelled() {
                in_line.leave_quietly(by.now(), "a cancel").await;
                return Err(Error::Cancelled {
                    name: self.name.into(),
                });
            }
            step = match backoff.after(outcome, due, self.name) {
                Ok((next, pause)) => {
                    if let Some(pause) = pause {
                        tokio::select! {
                            () = tokio::time::sleep(pause) => {}
                            () = cancel.cancelled() => {}
                        }
                    }
                    next
                }
                Err(e) if backoff.reached => {
                    in_line
                        .leave_quietly(backoff.by().now(), &e.to_string())
                        .await;
                    return Err(e);
                }
                // Refused before anything was sent: not in line.
                Err(e) => {
                    in_line.granted();
                    return Err(e);
                }
            };
        }
    }

    /// One try that does not queue (`Mode::Try`): granted when nobody waits and the units fit.
    /// Dropped before its reply, it gives back what it may have been granted, unattended; so
    /// does a try whose giving back does not end within the grace after its I/O timeout.
    pub(crate) async fn try_once(&self, ask: &Ask) -> Result<Waited, Error> {
        let in_line = self.in_line(ask);
        let sent = Instant::now();
        let by = By::new(self.io_timeout, Some(sent + self.io_timeout));
        let request = queue::acquire(self.keys, ask, Mode::Try);
        let answered = send(self.transport, &request, by.now()).await;
        match answered.and_then(|answered| tried(self.keys, sent, &answered)) {
            Ok(waited) => {
                in_line.granted();
                Ok(waited)
            }
            Err(e) => {
                in_line.leave(by.now()).await?;
                Err(e)
            }
        }
    }

    /// This waiter, in line until it is granted or leaves.
    fn in_line(&self, ask: &Ask) -> InLine {
        InLine(Some(Leaving {
            transport: Arc::clone(self.transport),
            keys: self.keys.clone(),
            ask: ask.clone(),
            io_timeout: self.io_timeout,
            name: self.name.into(),
        }))
    }

    /// An acquire (`Mode::Wait`), and when it was first sent: a grant it finds came after.
    async fn ask(&self, ask: &Ask, by: Instant) -> Result<(Instant, queue::Asked), Error> {
        let sent = Instant::now();
        let request = queue::acquire(self.keys, ask, Mode::Wait);
        let answered = send(self.transport, &request, by).await?;
        Ok((sent, queue::parse_acquire(self.keys, &answered)?))
    }

    /// Blocks in `BLPOP` on the waiter's list until `until`: the token of a grant, or none.
    /// A connection that failed is dropped, and the next ask settles what happened.
    async fn pop(
        &self,
        conn: &mut Option<Box<dyn AsyncWaiter>>,
        ask: &Ask,
        until: Instant,
        by: By,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        let waiter = match conn {
            Some(waiter) => waiter,
            None => {
                let waiter = self.transport.waiter(self.keys.slot, by.now()).await;
                conn.insert(waiter.map_err(Fault::into_error)?)
            }
        };
        let popped = self.blpop(waiter.as_mut(), ask, until, by, cancel).await;
        if !matches!(popped, Ok(Some(_))) {
            *conn = None;
        }
        match popped.map_err(Fault::into_error)? {
            Some(reply) => token(&reply),
            // As a timed-out pop, which the next ask settles (a token popped and lost is a
            // grant that ask finds).
            None => Ok(None),
        }
    }

    /// The reply of a `BLPOP` on `ask`'s list until `until`; `None` when it was ended by
    /// closing its connection (where `CLIENT UNBLOCK` is not safe).
    async fn blpop(
        &self,
        waiter: &mut dyn AsyncWaiter,
        ask: &Ask,
        until: Instant,
        by: By,
        cancel: &CancelToken,
    ) -> Result<Option<Value>, Fault> {
        waiter.ready(by.now()).await?;
        let id = waiter.id();
        let request = pop_request(self.keys, ask, until);
        let waiting = waiter.wait(&request, by.after(until));
        tokio::pin!(waiting);
        let alarm = tokio::time::sleep_until(until.into());
        tokio::pin!(alarm);
        let mut ended = false;
        let replies = loop {
            // The wait is polled first: it goes out before anything may end it.
            tokio::select! {
                biased;
                replies = &mut waiting => break replies,
                () = &mut alarm, if !ended => {
                    ended = true;
                    self.end(id, by.now(), false).await;
                }
                () = cancel.cancelled(), if !ended => {
                    ended = true;
                    self.end(id, by.now(), true).await;
                }
            }
        };
        match replies {
            Err(Fault::Lost { error, .. }) if ended && closed_by_end(id, &error) => Ok(None),
            replies => Ok(Some(replies?.into_iter().next().unwrap_or(Value::Nil))),
        }
    }

    /// Ends the `BLPOP` of connection `id` as if it had timed out, by `deadline`. Without the
    /// right to (an ACL) it ends at the server's own timer, a little later. On a cancel
    /// (`at_once`), a `BLPOP` not blocked yet (the `UNBLOCK` overtook it) is cut off by
    /// closing the connection instead.
    async fn end(&self, id: Option<ConnId>, deadline: Instant, at_once: bool) {
        let Some(id) = id else { return };
        if let Ok(Admin::Nothing) = self.transport.unblock(id, deadline).await
            && at_once
        {
            let _ = self.transport.kill(id, deadline).await;
        }
    }

    /// Lends the connection of waits that went well to the transport again.
    fn rest(&self, conn: Option<Box<dyn AsyncWaiter>>) {
        if let Some(conn) = conn {
            self.transport.rest(conn);
        }
    }
}

/// Sends a script call, once more if its reply was lost (each is safe to run twice): its
/// reply.
async fn send(
    transport: &Arc<dyn AsyncTransport>,
    request: &Request,
    deadline: Instant,
) -> Result<Value, Error> {
    let mut answered = send_repeatable(&**transport, request, deadline).await?;
    Ok(answered.replies.swap_remove(0))
}

/// A waiter in the queue, until it is granted or has left: dropped before either (its future
/// dropped), it leaves unattended.
struct InLine(Option<Leaving>);

impl InLine {
    /// Leaves the queue by `deadline`, giving back a grant that came meanwhile. Should that
    /// fail, or this future be dropped first, it leaves again unattended.
    async fn leave(mut self, deadline: Instant) -> Result<(), Error> {
        let Some(leaving) = &self.0 else {
            return Ok(());
        };
        let left = leaving.leave(deadline).await;
        if left.is_ok() {
            self.0 = None;
        }
        left
    }

    /// Leaves after `why`, by `deadline` or else unattended: an entry left behind lapses by
    /// itself, but a grant to it would be held until its lease ends.
    async fn leave_quietly(self, deadline: Instant, why: &str) {
        let name = self.0.as_ref().map(|l| l.name.clone()).unwrap_or_default();
        if let Err(e) = self.leave(deadline).await {
            log::debug!("{name:?}: leaving the queue after {why}: {e}; leaving unattended");
        }
    }

    /// Out of the queue: the caller holds what it was granted, or it never joined.
    fn granted(mut self) {
        self.0 = None;
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        if let Some(leaving) = self.0.take() {
            let again = leaving.clone();
            finish::spawn_or_block(leaving.unattended(), move || again.unattended());
        }
    }
}

/// What leaving the queue takes, apart from the wait.
#[derive(Clone)]
struct Leaving {
    transport: Arc<dyn AsyncTransport>,
    keys: QueueKeys,
    ask: Ask,
    io_timeout: Duration,
    name: String,
}

impl Leaving {
    async fn leave(&self, deadline: Instant) -> Result<(), Error> {
        let request = queue::leave(&self.keys, &self.ask);
        let reply = send(&self.transport, &request, deadline).await?;
        queue::parse_held(&self.keys, &reply).map(drop)
    }

    async fn unattended(self) {
        if let Err(e) = self.leave(Instant::now() + self.io_timeout).await {
            log::warn!(
                "{:?}: a dropped waiter could not leave the queue; its entry lapses: {e}",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::Fixture;
    use super::*;

    /// A waiter whose heartbeat lapses only after `lapse`: long enough that nothing in a test
    /// happens by a lapse.
    fn patient(id: &str, lapse: Duration) -> Ask {
        Ask::new(id, 1, 1, None, lapse).unwrap()
    }

    fn line<'a>(
        transport: &'a Arc<dyn AsyncTransport>,
        keys: &'a QueueKeys,
    ) -> Line<'a, dyn AsyncTransport> {
        Line {
            transport,
            keys,
            name: "db",
            io_timeout: Duration::from_secs(5),
        }
    }

    fn waiting(
        fixture: &Fixture,
        ask: Ask,
        deadline: Option<Instant>,
        cancel: CancelToken,
    ) -> tokio::task::JoinHandle<Result<Waited, Error>> {
        let transport = Arc::clone(&fixture.transport).to_async();
        let keys = fixture.keys.clone();
        tokio::spawn(async move {
            let line = line(&transport, &keys);
            line.wait(&ask, deadline, &cancel).await
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_wait_leaves_the_queue_and_the_waiter_behind_is_served_at_once() {
        let fixture = Fixture::new();
        let holder = fixture.hold("h");
        let lapse = Duration::from_secs(60);
        let first = waiting(&fixture, patient("a", lapse), None, CancelToken::new());
        fixture.until_waiters(1);
        let second = waiting(&fixture, patient("b", lapse), None, CancelToken::new());
        fixture.until_waiters(2);
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        let released = fixture.line().send(
            &queue::release(&fixture.keys, &holder),
            super::By::new(Duration::from_secs(5), None),
        );
        assert!(queue::parse_held(&fixture.keys, &released.unwrap()).unwrap());
        // Long before "a"'s lapse, "b" holds: "a" left when its future was dropped.
        let served = tokio::time::timeout(Duration::from_secs(20), second).await;
        assert!(matches!(served, Ok(Ok(Ok(Waited::Granted { .. })))));
        let state = fixture.state();
        assert_eq!(state.holders[0].id, b"b");
        assert!(state.waiters.is_empty(), "{state:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_dropped_with_a_grant_unseen_passes_it_on() {
        let fixture = Fixture::new();
        let holder = fixture.hold("h");
        let lapse = Duration::from_secs(60);
        let transport = Arc::clone(&fixture.transport).to_async();
        let line = line(&transport, &fixture.keys);
        let (first, cancel) = (patient("a", lapse), CancelToken::new());
        let mut dropped = Box::pin(line.wait(&first, None, &cancel));
        // Polled until it waits in line, then no more: it never sees its grant.
        let polled = tokio::time::timeout(Duration::from_millis(500), &mut dropped).await;
        assert!(polled.is_err());
        fixture.until_waiters(1);
        let second = waiting(&fixture, patient("b", lapse), None, CancelToken::new());
        fixture.until_waiters(2);
        let released = fixture.line().send(
            &queue::release(&fixture.keys, &holder),
            super::By::new(Duration::from_secs(5), None),
        );
        assert!(queue::parse_held(&fixture.keys, &released.unwrap()).unwrap());
        assert_eq!(fixture.state().holders[0].id, b"a");
        drop(dropped);
        // "a" holds without expiry: only its leave hands the grant on to "b".
        let served = tokio::time::timeout(Duration::from_secs(20), second).await;
        assert!(matches!(served, Ok(Ok(Ok(Waited::Granted { .. })))));
        assert_eq!(fixture.state().holders[0].id, b"b");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_wait_ends_its_blpop_at_once_and_leaves_the_queue() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let cancel = CancelToken::new();
        // Its heartbeat is a minute away: only the cancel ends its `BLPOP`.
        let ask = patient("w", Duration::from_secs(120));
        let waiter = waiting(&fixture, ask, None, cancel.clone());
        fixture.until_waiters(1);
        cancel.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(20), waiter).await;
        assert!(matches!(ended, Ok(Ok(Err(Error::Cancelled { .. })))));
        let state = fixture.state();
        assert!(state.waiters.is_empty(), "{state:?}");
        assert_eq!(state.holders.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_ends_by_its_deadline_having_left_the_queue() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let deadline = Instant::now() + Duration::from_millis(500);
        let ask = patient("w", Duration::from_secs(120));
        let waited = waiting(&fixture, ask, Some(deadline), CancelToken::new());
        assert_eq!(waited.await.unwrap().unwrap(), Waited::TimedOut);
        let ended = Instant::now();
        assert!(ended >= deadline);
        // At its deadline, not at its next heartbeat a minute on.
        assert!(ended < deadline + Duration::from_secs(5));
        assert!(fixture.state().waiters.is_empty());
    }

    #[test]
    fn a_runtime_that_ends_under_a_wait_leaves_the_queue_from_the_dropping_thread() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let ask = patient("w", Duration::from_secs(120));
        let entered = runtime.enter();
        let _waiter = waiting(&fixture, ask, None, CancelToken::new());
        drop(entered);
        fixture.until_waiters(1);
        drop(runtime);
        assert!(fixture.state().waiters.is_empty());
    }
}
