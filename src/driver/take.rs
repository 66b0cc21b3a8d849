//! The one acquire path of every primitive, [`Inner::take`]: what comes before an acquire
//! (a handle that holds may not take again; one unsure asks Redis first; `refuse_evicting`),
//! the primitive's own acquire ([`acquire`](super::acquire) for the lock,
//! [`acquire_line`](super::acquire_line) for the queue engine's), the hand-over held back
//! after a failover, and what every acquisition starts with ([`Inner::acquired`]: the lease,
//! its renewal, its notice).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::failover::Handed;
use super::settle::Claim;
use super::{Inner, Runtime, Taken};
use crate::observe;
use crate::observe::Hold;
use crate::protocol::eviction;
use crate::protocol::lease::{self, Belief, Handover, Lease, Unsure, Wait};
use crate::transport::send::{send, AnyTransport};
use crate::{CancelToken, Error};

impl<R: Runtime> Inner<R> {
    /// Takes the lock (or a hold on the queue engine) as `wait` allows: the acquisition, or
    /// `None` when the wait ended first. The acquire path of every primitive.
    pub(crate) async fn take(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        loop {
            // Nothing taken on a new primary could be handed over in time: nothing is taken.
            if self.handover(wait) == Handover::TooLate {
                return Ok(None);
            }
            self.known.lock().token_floor = self.known.tokens.floor();
            // Boxed: an acquire's future is large (debug builds most of all), and the blocking
            // API polls it on the caller's thread, whose stack may be small.
            let taken = match &self.place {
                Some(place) => Box::pin(self.acquire_in_line(place, wait, cancel)).await?,
                None => Box::pin(self.acquire(wait, cancel)).await?,
            };
            let Some(taken) = taken else {
                return Ok(None);
            };
            // Nearly always: no switch was seen, and the hand-over needs no future (boxed).
            if self.handover(wait) == Handover::Now {
                return Ok(Some(taken));
            }
            match Box::pin(self.hand_over(taken, wait, cancel)).await? {
                Handed::Over(taken) => return Ok(Some(taken)),
                Handed::Nothing => return Ok(None),
                Handed::Again => {}
            }
        }
    }

    /// Before a new acquisition: a handle that holds the lock may not take it again; one
    /// whose lock was lost may; one that is unsure asks Redis, and if the lock turns out to be
    /// ours it is acquired (and returned).
    pub(super) async fn before_acquire(
        self: &Arc<Self>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        self.refuse_evicting(wait).await?;
        if let Some((unsure, claim)) = self.claim("acquire", self.give_up(wait), cancel).await? {
            return self.ask_redis(unsure, claim, wait, cancel).await;
        }
        let belief = self.known.lock().belief;
        match belief {
            // Unsure again: made so meanwhile by a call on another thread, which settles it.
            Belief::Free | Belief::Unsure(_) => Ok(None),
            Belief::Held(lease) if !lease.is_lost(Instant::now()) => {
                Err(self.error(|name| Error::AlreadyAcquired { name }))
            }
            Belief::Held(_) => {
                self.forget();
                Ok(None)
            }
        }
    }

    /// With `refuse_evicting`, refuses the servers that can evict the lock's keys. A server's
    /// policy is read with the first request it gets; an `INFO memory` on the lock's slot,
    /// once per handle, makes sure that was before the handle's first acquisition.
    async fn refuse_evicting(&self, wait: Wait) -> Result<(), Error> {
        if !self.settings.refuse_evicting {
            return Ok(());
        }
        let deadline = self.io_deadline(wait);
        if !self.eviction_asked.load(Ordering::Relaxed) {
            let request = eviction::request().on_slot(self.keys.slot);
            // Unanswered, it is asked again before the next acquisition; this one fails on
            // the same server anyway.
            if send(&*self.transport, &request, deadline).await.is_ok() {
                self.eviction_asked.store(true, Ordering::Relaxed);
            }
        }
        let blocking = self.transport.blocking();
        let primaries = blocking.primaries(deadline)?;
        let evicting =
            (primaries.iter()).find_map(|primary| primary.server(blocking).eviction()?.evicting());
        match evicting {
            Some((server, policy)) => Err(Error::Unsupported(format!(
                "{}; refused, as refuse_evicting(true) asks",
                eviction::warning(&server, &policy)
            ))),
            None => Ok(()),
        }
    }

    /// The unsure belief settled by this call: reads whose id the key holds, after closing
    /// the connection that may still take it. Ours, it is acquired, its expiry counted from
    /// the read: the handle's own request took it, and a handle never takes its own id in the
    /// key for someone else's lock (`AlreadyAcquired`). Not settled in time, the background
    /// settle goes on.
    pub(super) async fn ask_redis(
        self: &Arc<Self>,
        unsure: Unsure,
        _claim: Claim<'_>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        let (observed, sent) = match self.settle(unsure.conn, wait, cancel).await {
            Ok(settled) => settled,
            Err(e) => {
                self.unsure(unsure);
                return Err(e);
            }
        };
        self.forget();
        if !self.is_ours(observed.owner.as_deref()) {
            return Ok(None);
        }
        if cancel.is_cancelled() {
            self.unlock_quietly().await;
            return Err(self.error(|name| Error::Cancelled { name }));
        }
        let valid_until = self.less_drift(lease::valid_from_read(sent, observed.pttl));
        self.acquired(valid_until, observed.fence).map(Some)
    }

    pub(super) fn acquired(
        self: &Arc<Self>,
        valid_until: Option<Instant>,
        token: Option<u64>,
    ) -> Result<Taken, Error> {
        let renewal = match self
            .settings
            .expire()
            .filter(|_| self.settings.auto_renewal)
        {
            Some(expire) => match R::renewal(self, self.renewal_due(valid_until, expire)) {
                Ok(renewal) => Some(renewal),
                Err(e) => {
                    // Without its renewal the lock would expire under the holder: give it back.
                    R::settle_dropped(
                        &self.transport,
                        None,
                        self.leasing.release(),
                        self.io_deadline(Wait::Never),
                    );
                    return Err(e);
                }
            },
            None => None,
        };
        // Made before the state is locked: a subscriber's code runs when a span is made.
        let hold = Hold::start(self.name(), &self.settings.id);
        let mut state = self.known.lock();
        state.epoch += 1;
        let lease = Lease::new(state.epoch, Instant::now(), valid_until, token);
        state.belief = Belief::Held(lease);
        state.renewal = renewal;
        state.hold = Some(hold);
        // A fresh notice: the last acquisition's stays as its end left it.
        state.notice = CancelToken::new();
        state.watched = false;
        let notice = state.notice.clone();
        let floor = state.token_floor;
        let epoch = state.epoch;
        drop(state);
        // A token that went back (the counter lost, and the server's clock behind the last
        // grant) is not kept silent: the store that checks tokens would refuse this holder, or
        // take a stale one.
        if let Some(token) = token
            && let Some(top) = self.known.tokens.given(token, floor)
        {
            observe::fence_went_back(&self.settings.label, self.name(), top, token);
        }
        self.known.changed();
        log::debug!("lock {:?}: acquired", self.name());
        Ok(Taken { epoch, notice })
    }
}
