//! A lost reply's outcome, settled by reading state: the caller's own settle (close the
//! connection the request went out on, then read the owner), and when that cannot be done in
//! time, the belief is unsure and a background settle gives back whatever the handle's id
//! holds once the servers answer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::known::State;
use super::{Inner, Runtime};
use crate::observe;
use crate::protocol::lease::{Belief, Unsure, Wait};
use crate::protocol::lock::Observed;
use crate::protocol::request::Request;
use crate::transport::send::{
    log_kill_refused_once, longer, send_repeatable, AnyTransport, FIRST_PAUSE,
};
use crate::transport::{Admin, ConnId};
use crate::{CancelToken, Error};

/// How long the background settle of a lock without expiry goes on (one with an expiry: until
/// that has passed).
const SETTLE_WITHOUT_EXPIRY: Duration = Duration::from_secs(60);

impl<R: Runtime> Inner<R> {
    /// Closes `conn` at the server (where allowed) and reads the lock.
    /// Keeps trying while the server is away (a restart, a failover), until the caller's
    /// deadline plus the grace, or for the I/O timeout when there is none.
    pub(super) async fn settle(
        &self,
        conn: Option<ConnId>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<(Observed, Instant), Error> {
        // Past its time here, the settling goes on in the background (`unsure`).
        let settle_time = self
            .transport
            .blocking()
            .settle_time(self.settings.io_timeout);
        let give_up = self.give_up(wait).min(Instant::now() + settle_time);
        let mut pause = FIRST_PAUSE;
        loop {
            let deadline = (Instant::now() + self.settings.io_timeout).min(give_up);
            let settled = async {
                if let Some(conn) = conn {
                    match self.transport.close(conn, deadline).await {
                        Ok(Admin::Refused) => log_kill_refused_once(),
                        Ok(Admin::Done | Admin::Nothing) => {}
                        Err(fault) => return Err(fault.into_error().into()),
                    }
                }
                self.observe_by(deadline).await
            };
            match self.away(settled.await, give_up, &mut pause, cancel).await {
                Some(outcome) => return outcome,
                None => continue,
            }
        }
    }

    /// The belief becomes `unsure`. Redis is asked before the handle assumes anything, and
    /// meanwhile a background settle gives back whatever the handle's id holds as soon as the
    /// servers answer, so that a request whose reply was lost (perhaps still queued at a
    /// frozen server) does not hold the lock for nobody until the handle's next call. It runs
    /// until that is done, the belief changed, or the expiry has passed since.
    pub(super) fn unsure(&self, unsure: Unsure) {
        let span = self.settings.expire().unwrap_or(SETTLE_WITHOUT_EXPIRY);
        let now = Instant::now();
        let until = now.checked_add(span).unwrap_or(now);
        let start = {
            let mut state = self.known.lock();
            state.belief = Belief::Unsure(unsure);
            let start = state.settler.is_none();
            state.settler = Some(state.settler.map_or(until, |t| t.max(until)));
            start
        };
        if start {
            R::in_background(
                Settler::<R> {
                    state: Arc::clone(&self.known.state),
                    transport: Arc::clone(&self.transport),
                    unlock: self.leasing.release(),
                    io_timeout: self.settings.io_timeout,
                    name: self.settings.name.clone(),
                    label: self.settings.label.clone(),
                }
                .run(),
            );
        }
    }

    /// The settling of the unsure belief for a call of the handle, once a step of the
    /// background settle under way has ended (that takes a round trip once the servers
    /// answer; until then, pauses as while a server is away), by `give_up`. `None` when the
    /// belief is not unsure.
    pub(super) async fn claim(
        &self,
        operation: &'static str,
        give_up: Instant,
        cancel: &CancelToken,
    ) -> Result<Option<(Unsure, Claim<'_>)>, Error> {
        let mut pause = FIRST_PAUSE;
        loop {
            {
                let mut state = self.known.lock();
                match state.belief {
                    Belief::Unsure(unsure) if !state.settling => {
                        state.settling = true;
                        return Ok(Some((unsure, Claim(&self.known.state))));
                    }
                    Belief::Unsure(_) => {}
                    Belief::Free | Belief::Held(_) => return Ok(None),
                }
            }
            if Instant::now() + pause >= give_up {
                let busy = redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "the background settle of an earlier lost reply is under way",
                ));
                return Err(self.unknown(operation, busy));
            }
            if R::pause(pause, cancel).await {
                return Err(self.error(|name| Error::Cancelled { name }));
            }
            pause = longer(pause);
        }
    }

    /// When a step that keeps failing for want of a connection stops trying: the caller's
    /// deadline plus the grace, or the I/O timeout when there is none.
    pub(crate) fn give_up(&self, wait: Wait) -> Instant {
        match wait {
            Wait::Until(deadline) => deadline + self.settings.grace(),
            Wait::Never | Wait::Forever => Instant::now() + self.settings.io_timeout,
        }
    }

    /// A step's outcome, or `None` after a pause when it failed for want of a connection and
    /// there is time to try again before `give_up`. Backoff for a server that is away, never
    /// a way of waiting for the lock.
    pub(crate) async fn away<O>(
        &self,
        outcome: Result<O, Error>,
        give_up: Instant,
        pause: &mut Duration,
        cancel: &CancelToken,
    ) -> Option<Result<O, Error>> {
        let error = match outcome {
            Err(Error::Redis(e)) if e.is_io_error() || e.is_connection_refusal() => e,
            other => return Some(other),
        };
        let left = give_up.saturating_duration_since(Instant::now());
        if left <= *pause {
            return Some(Err(error.into()));
        }
        log::debug!(
            "lock {:?}: server away ({error}); trying again",
            self.name()
        );
        if R::pause(*pause, cancel).await {
            return Some(Err(self.error(|name| Error::Cancelled { name })));
        }
        *pause = longer(*pause);
        None
    }
}

/// The settling of an unsure belief, taken by a call of the handle or by a step of the
/// background settle: one at a time, so that a give-back never lands on a lock the handle
/// has just found ours, and only one of them counts on what it did.
pub(super) struct Claim<'a>(&'a Mutex<State>);

impl Claim<'_> {
    /// Ends the claim, with `change` made under the same lock.
    pub(super) fn end(self, change: impl FnOnce(&mut State)) {
        let mut state = self.0.lock();
        change(&mut state);
        state.settling = false;
        drop(state);
        // The claim is over already; its drop would only take the lock again.
        std::mem::forget(self);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.lock().settling = false;
    }
}

/// The background settle of a handle's unsure belief: what it needs, the handle gone or not.
struct Settler<R: Runtime> {
    state: Arc<Mutex<State>>,
    transport: Arc<R::Transport>,
    /// The handle's own release, owner-checked: it gives back only what holds its id.
    unlock: Request,
    io_timeout: Duration,
    name: String,
    label: observe::Label,
}

impl<R: Runtime> Settler<R> {
    /// Gives back what the handle's id holds, again after pauses while the servers are away,
    /// until done, the belief is no longer unsure (the handle settled it), or its time is up.
    async fn run(self) {
        // Nobody cancels a give-back: it is what frees the lock for the others.
        let never = CancelToken::new();
        let mut pause = FIRST_PAUSE;
        loop {
            let claimed = {
                let mut state = self.state.lock();
                match (state.belief, state.settler) {
                    (Belief::Unsure(unsure), Some(until)) if Instant::now() < until => {
                        // A call of the handle settling it now: see again after a pause.
                        (!state.settling).then(|| {
                            state.settling = true;
                            (unsure, Claim(&self.state))
                        })
                    }
                    (belief, _) => {
                        state.settler = None;
                        if let Belief::Unsure(_) = belief {
                            // Its time is up and the outcome still unknown.
                            observe::settle(&self.label, &self.name, false);
                        }
                        return;
                    }
                }
            };
            if let Some((unsure, claim)) = claimed
                && self.give_back(unsure).await
            {
                log::info!(
                    "lock {:?}: a lost reply settled in the background",
                    self.name
                );
                observe::settle(&self.label, &self.name, true);
                claim.end(|state| {
                    // Unless something else changed it meanwhile (a reset).
                    if let Belief::Unsure(_) = state.belief {
                        state.belief = Belief::Free;
                    }
                    state.settler = None;
                });
                return;
            }
            R::pause(pause, &never).await;
            pause = longer(pause);
        }
    }

    /// Closes the connection the unsure request went out on, so that it cannot run later,
    /// then releases what holds the handle's id. True once the servers answered the release.
    async fn give_back(&self, unsure: Unsure) -> bool {
        let deadline = Instant::now() + self.io_timeout;
        if let Some(conn) = unsure.conn {
            match self.transport.close(conn, deadline).await {
                Ok(Admin::Refused) => log_kill_refused_once(),
                Ok(Admin::Done | Admin::Nothing) => {}
                Err(_) => return false,
            }
        }
        match send_repeatable(&*self.transport, &self.unlock, deadline).await {
            Ok(_) => true,
            Err(e) => {
                log::debug!("lock {:?}: background settle: {e}", self.name);
                false
            }
        }
    }
}
