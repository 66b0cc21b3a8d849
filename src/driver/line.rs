//! The wait in the queue engine's line, written once for both runtimes: a thin loop of I/O
//! around [`QueueWait`](crate::protocol::queue::QueueWait), which decides every step.
//!
//! A waiter takes a seat at its process's [`Hub`] and asks (`queue_acquire.lua`); not
//! granted, it waits for its mailbox until its next event (a holder's expiry, the lapse of
//! another process's waiter just ahead) or its deadline, whichever is first, and then asks
//! again. Its seat bounds that wait as its process's
//! [`Cover`](crate::protocol::cover::Cover) says: never longer than a lapse window for the
//! process's first waiter in line, and until told for one behind it (docs/design.md, "The
//! wait rule"). A grant is pushed to the process's inbox, and the hub's one `BLPOP` hands it to the
//! waiter's mailbox; the hub also sends the heartbeat that keeps all the process's waiters in
//! line. At the deadline, or on a cancel, it leaves the line, giving back any grant that came
//! meanwhile. Every request it sends is safe to send twice, so a lost reply is sent again or
//! settled by the next ask, which reads what the id holds; so is a grant lost with the hub's
//! connection (the hub then has every waiter ask again). Its process found lapsed (it was
//! stopped), it leaves and joins again at the back.
//!
//! A wait that stops before its end (an async future dropped at an `.await`) leaves the line
//! unattended ([`Runtime::unattended`]), passing on a grant that came meanwhile: the next
//! waiter is served at once, not after this one's heartbeat lapses.

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use super::hub::{Hub, Seat, Told};
use super::Runtime;
use crate::cancel::CancelToken;
use crate::config::settings::grace;
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue::{self, Ask, Mode, Next, QueueWait};
use crate::protocol::request::Request;
use crate::transport::send::{longer, send_repeatable, FIRST_PAUSE};
use crate::Error;

/// How a wait in line came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineEnd {
    /// Granted with `token`, held until `valid_until` at the earliest unless extended
    /// (`None`: no expiry). A grant pushed by another's script lasts only until the waiter's
    /// entry would have lapsed: the holder claims it with an extend.
    Granted {
        token: u64,
        valid_until: Option<Instant>,
    },
    /// The deadline passed first; nothing is held, and the waiter left the line.
    TimedOut,
}

/// One primitive's line, as a waiter on runtime `R` reaches it.
pub(crate) struct Line<'a, R: Runtime> {
    pub(crate) transport: &'a Arc<R::Transport>,
    pub(crate) keys: &'a QueueKeys,
    /// The process's hub, which brings its grants and keeps it in line.
    pub(crate) hub: &'a Arc<Hub>,
    /// The primitive's name, for errors.
    pub(crate) name: &'a str,
    /// The bound of each request's round trip.
    pub(crate) io_timeout: Duration,
}

impl<R: Runtime> Line<'_, R> {
    /// Waits in line for `ask` until `deadline` (`None`: no limit) or a cancel. While the
    /// server is away (a restart, a failover) it asks again after a backoff, as [`Backoff`]
    /// allows; on a server that does not answer it still ends by the deadline and the grace.
    /// On any other error, and on a cancel, the waiter leaves the line first (as far as the
    /// server can be reached), so it holds nothing it does not know about.
    pub(crate) async fn wait(
        &self,
        ask: &Ask,
        deadline: Option<Instant>,
        cancel: &CancelToken,
    ) -> Result<LineEnd, Error> {
        let mut backoff = Backoff::new(self.io_timeout, deadline);
        let in_line = self.in_line(ask);
        let mut seat = self.hub.seat(self.keys, ask.id(), ask.lapse());
        if let Some(wake) = seat.wake() {
            // Not heard, the inbox is listened on at the thread's next heartbeat.
            if let Err(e) = send(&**self.transport, &wake, backoff.by().now()).await {
                log::debug!("{:?}: the waiting connection was not woken: {e}", self.name);
            }
        }
        let mut wait = QueueWait::new(deadline);
        let mut next = Next::Ask;
        loop {
            let by = backoff.by();
            let due = due(next);
            let outcome = match next {
                Next::Ask => {
                    self.ask(ask, &mut seat, &in_line, by.now())
                        .await
                        .map(|(sent, asked)| {
                            let now = Instant::now();
                            seat.timed(&asked, wait.asked(sent, asked, now), sent, now)
                        })
                }
                Next::Block { until } => {
                    self.mail(&seat, until, cancel)
                        .await
                        .map(|told| match told {
                            Some(Told::Granted(token, dated)) => {
                                wait.popped(Some(token), dated, Instant::now())
                            }
                            Some(Told::AskBy(at)) => wait.retimed(at, Instant::now()),
                            Some(Told::AskAgain | Told::Refused) | None => {
                                wait.popped(None, None, Instant::now())
                            }
                        })
                }
                Next::Leave => {
                    in_line.leave(by.now()).await?;
                    return Ok(LineEnd::TimedOut);
                }
                Next::Granted { token, valid_until } => {
                    in_line.granted();
                    seat.granted(valid_until);
                    return Ok(LineEnd::Granted { token, valid_until });
                }
            };
            if cancel.is_cancelled() {
                in_line.leave_quietly(by.now(), "a cancel").await;
                return Err(Error::Cancelled {
                    name: self.name.into(),
                });
            }
            next = match backoff.after(outcome, due, self.name) {
                Ok((next, pause)) => {
                    if let Some(pause) = pause {
                        R::pause(pause, cancel).await;
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
    /// A try that fails gives back what it may have been granted, by the grace after its I/O
    /// timeout or else unattended; so does one stopped before its reply.
    pub(crate) async fn try_once(&self, ask: &Ask) -> Result<LineEnd, Error> {
        let in_line = self.in_line(ask);
        let sent = Instant::now();
        let by = By::new(self.io_timeout, Some(sent + self.io_timeout));
        let request = queue::acquire(self.keys, ask, Mode::Try);
        let answered = send(&**self.transport, &request, by.now()).await;
        match answered.and_then(|answered| tried(self.keys, sent, &answered)) {
            Ok(outcome) => {
                in_line.granted();
                Ok(outcome)
            }
            Err(e) => {
                in_line.leave(by.now()).await?;
                Err(e)
            }
        }
    }

    /// This waiter, in line until it is granted or leaves.
    fn in_line(&self, ask: &Ask) -> InLine<R> {
        InLine(Some(Leaving {
            transport: Arc::clone(self.transport),
            keys: self.keys.clone(),
            ask: ask.clone(),
            io_timeout: self.io_timeout,
            name: self.name.into(),
        }))
    }

    /// An acquire (`Mode::Wait`), and when it was first sent: a grant it finds came after.
    /// A waiter whose process lapsed since it joined leaves first, to join again at the back.
    async fn ask(
        &self,
        ask: &Ask,
        seat: &mut Seat,
        in_line: &InLine<R>,
        by: Instant,
    ) -> Result<(Instant, queue::Asked), Error> {
        if seat.stale() {
            in_line.leave_again(by).await?;
            seat.rejoin();
        }
        let sent = Instant::now();
        let request = queue::acquire(self.keys, ask, seat.mode());
        let answered = send(&**self.transport, &request, by).await?;
        let asked = queue::parse_acquire(self.keys, &answered)?;
        match asked {
            queue::Asked::Waiting { .. } => seat.joined(),
            queue::Asked::Lapsed => seat.lapsed(),
            _ => {}
        }
        Ok((sent, asked))
    }

    /// Waits for the seat's mail until `until`: what it was told, or none (its time came).
    async fn mail(
        &self,
        seat: &Seat,
        until: Option<Instant>,
        cancel: &CancelToken,
    ) -> Result<Option<Told>, Error> {
        seat.block().map_err(Error::Thread)?;
        Ok(R::mail(&seat.mailbox, until, cancel).await)
    }
}

/// Sends a script call, once more if its reply was lost (each is safe to run twice): its
/// reply.
async fn send<T: crate::transport::send::AnyTransport + ?Sized>(
    transport: &T,
    request: &Request,
    deadline: Instant,
) -> Result<Value, Error> {
    let mut answered = send_repeatable(transport, request, deadline).await?;
    Ok(answered.replies.swap_remove(0))
}

/// A waiter in the line, until it is granted or has left: stopped before either (its future
/// dropped), it leaves unattended.
struct InLine<R: Runtime>(Option<Leaving<R>>);

impl<R: Runtime> InLine<R> {
    /// Leaves the line by `deadline`, giving back a grant that came meanwhile. Should that
    /// fail, or the wait be stopped first, it leaves again unattended.
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
            log::debug!("{name:?}: leaving the line after {why}: {e}; leaving unattended");
        }
    }

    /// Leaves the line by `deadline` and stays ready to leave again: the waiter joins anew.
    async fn leave_again(&self, deadline: Instant) -> Result<(), Error> {
        match &self.0 {
            Some(leaving) => leaving.leave(deadline).await,
            None => Ok(()),
        }
    }

    /// Out of the line: the caller holds what it was granted, or it never joined.
    fn granted(mut self) {
        self.0 = None;
    }
}

impl<R: Runtime> Drop for InLine<R> {
    fn drop(&mut self) {
        if let Some(leaving) = self.0.take() {
            R::unattended(move || leaving.clone().unattended());
        }
    }
}

/// What leaving the line takes, apart from the wait.
struct Leaving<R: Runtime> {
    transport: Arc<R::Transport>,
    keys: QueueKeys,
    ask: Ask,
    io_timeout: Duration,
    name: String,
}

impl<R: Runtime> Clone for Leaving<R> {
    fn clone(&self) -> Self {
        Leaving {
            transport: Arc::clone(&self.transport),
            keys: self.keys.clone(),
            ask: self.ask.clone(),
            io_timeout: self.io_timeout,
            name: self.name.clone(),
        }
    }
}

impl<R: Runtime> Leaving<R> {
    async fn leave(&self, deadline: Instant) -> Result<(), Error> {
        let request = queue::leave(&self.keys, &self.ask);
        let reply = send(&*self.transport, &request, deadline).await?;
        queue::parse_held(&self.keys, &reply).map(drop)
    }

    async fn unattended(self) {
        if let Err(e) = self.leave(Instant::now() + self.io_timeout).await {
            log::warn!(
                "{:?}: a stopped waiter could not leave the line; its entry lapses: {e}",
                self.name
            );
        }
    }
}

/// By when each round trip of a wait must end: its I/O timeout, and for a wait with a
/// deadline, no later than the deadline and the grace.
#[derive(Clone, Copy)]
pub(crate) struct By {
    io_timeout: Duration,
    give_up: Option<Instant>,
}

impl By {
    pub(crate) fn new(io_timeout: Duration, deadline: Option<Instant>) -> By {
        By {
            io_timeout,
            give_up: deadline.map(|d| d + grace(io_timeout)),
        }
    }

    /// For a round trip started now.
    pub(crate) fn now(self) -> Instant {
        self.after(Instant::now())
    }

    /// For a round trip whose reply is due at `due`.
    pub(crate) fn after(self, due: Instant) -> Instant {
        let io = due + self.io_timeout;
        self.give_up.map_or(io, |give_up| io.min(give_up))
    }
}

/// What a try (`Mode::Try`) sent at `sent` came to, from its reply `answered`. A try never
/// queues: one that did (against the protocol) is an error, and must not stay in line.
fn tried(keys: &QueueKeys, sent: Instant, answered: &Value) -> Result<LineEnd, Error> {
    match queue::parse_acquire(keys, answered)? {
        queue::Asked::Granted { token, lease_left } => Ok(LineEnd::Granted {
            token,
            valid_until: lease_left.map(|left| sent + left),
        }),
        queue::Asked::Refused => Ok(LineEnd::TimedOut),
        queue::Asked::Waiting { .. } | queue::Asked::Lapsed => Err(Error::unexpected(answered)),
    }
}

/// A waiter's backoff while its server is away (a restart, a failover), and how long it rides
/// that out, as a lock's acquire does: a timed wait until its deadline; an untimed one for the
/// I/O timeout from when the server was found away. A refused connection before the server
/// was ever reached is the wait's error at once: nothing was sent, so nothing is left to undo.
struct Backoff {
    pause: Duration,
    io_timeout: Duration,
    deadline: Option<Instant>,
    /// Since when the server has been away, while it is.
    away_since: Option<Instant>,
    /// Whether any request of the wait may have reached the server.
    reached: bool,
}

impl Backoff {
    fn new(io_timeout: Duration, deadline: Option<Instant>) -> Backoff {
        Backoff {
            pause: FIRST_PAUSE,
            io_timeout,
            deadline,
            away_since: None,
            reached: false,
        }
    }

    /// When the wait stops asking a server that is away.
    fn give_up(&self) -> Option<Instant> {
        self.deadline
            .or_else(|| self.away_since.map(|since| since + self.io_timeout))
    }

    /// By when the next round trip must end: an untimed wait whose server is away ends by its
    /// give-up and the grace, as a timed one does by its deadline and the grace.
    fn by(&self) -> By {
        By::new(self.io_timeout, self.give_up())
    }

    /// The step after `outcome` of a step whose reply was due at `due`, and the pause to take
    /// first, if any: after an error that says the server is away, with time left before the
    /// wait gives up, a pause then an ask. Any other error is the wait's.
    fn after(
        &mut self,
        outcome: Result<Next, Error>,
        due: Instant,
        name: &str,
    ) -> Result<(Next, Option<Duration>), Error> {
        let e = match outcome {
            Ok(next) => {
                self.pause = FIRST_PAUSE;
                self.away_since = None;
                self.reached = true;
                return Ok((next, None));
            }
            Err(e) => e,
        };
        let refused = matches!(&e, Error::Redis(e) if e.is_connection_refusal());
        self.reached |= !refused;
        if !away(&e) || !self.reached {
            return Err(e);
        }
        let now = Instant::now();
        self.away_since.get_or_insert(due.min(now));
        if self.give_up().is_some_and(|end| now + self.pause >= end) {
            return Err(e);
        }
        log::debug!("{name:?}: server away ({e}); asking again");
        let pause = self.pause;
        self.pause = longer(pause);
        Ok((Next::Ask, Some(pause)))
    }
}

/// When the reply to `next` is due: a wait's at its end, an ask's at once.
fn due(next: Next) -> Instant {
    match next {
        Next::Block { until: Some(until) } => until,
        _ => Instant::now(),
    }
}

/// Whether `e` says the server cannot be reached now, rather than refusing the request.
fn away(e: &Error) -> bool {
    matches!(e, Error::Redis(e) if e.is_io_error() || e.is_connection_refusal())
}
