//! What a handle knows of its lock, apart from what it does about it: its belief (free, held,
//! unsure), the latest acquisition's epoch, notice and hold, its renewal, and the alarm that
//! tells a loss by time; the fencing tokens it was given. No I/O: [`Inner`](super::Inner)'s
//! paths change it, and a guard or a handle reads it (`lost()`, `fencing_token()`).

use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::tokens::TokensSeen;
use super::Renewing;
use crate::observe::Hold;
use crate::protocol::lease::Belief;
use crate::transport::timer::{self, Alarm};
use crate::CancelToken;

/// What a handle knows of its lock.
pub(crate) struct Known {
    /// Shared with the background settle, which may outlive the handle.
    pub(super) state: Arc<Mutex<State>>,
    /// The fencing tokens the handle was given: its own, or for a queue primitive's
    /// acquisition, its handle's ([`Place::tokens`](super::Place::tokens)).
    pub(super) tokens: Arc<TokensSeen>,
}

pub(super) struct State {
    pub(super) belief: Belief,
    /// The epoch of the latest acquisition.
    pub(super) epoch: u64,
    pub(super) renewal: Option<Box<dyn Renewing>>,
    /// Whether the unsure belief is being settled now, by a call of the handle or by the
    /// background settle: one at a time (see [`Claim`]).
    pub(super) settling: bool,
    /// Until when the background settle runs, while it does.
    pub(super) settler: Option<Instant>,
    /// The lock held, for its metrics and span, until released or its loss is noticed.
    pub(super) hold: Option<Hold>,
    /// The highest fencing token the handle had seen when the latest acquisition began:
    /// the one it takes must be above it.
    pub(super) token_floor: u64,
    /// The latest acquisition's loss notice: cancelled once it is lost, never by a release.
    pub(super) notice: CancelToken,
    /// Whether the latest acquisition's notice was handed out (`lost_token`): only then does
    /// an alarm watch its lease's end, so that an acquisition nobody watches costs the timer
    /// thread nothing.
    pub(super) watched: bool,
    /// While a watched lease with an expiry is held, the alarm at that expiry which tells its
    /// loss, and when it rings.
    pub(super) alarm: Option<(Instant, Alarm)>,
}

impl Known {
    /// Nothing known yet (the lock is free, as far as the handle can tell), with the fencing
    /// `tokens` it was given.
    pub(super) fn new(tokens: Arc<TokensSeen>) -> Self {
        Known {
            state: Arc::new(Mutex::new(State {
                belief: Belief::Free,
                epoch: 0,
                renewal: None,
                settling: false,
                settler: None,
                hold: None,
                token_floor: 0,
                notice: CancelToken::new(),
                watched: false,
                alarm: None,
            })),
            tokens,
        }
    }

    /// What it knows, locked: the driver's paths read and change it under this lock, never
    /// across an `.await`.
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Whether the acquisition held is past its validity.
    pub(super) fn expired(&self) -> bool {
        matches!(self.lock().belief, Belief::Held(lease) if lease.is_lost(Instant::now()))
    }

    /// Whether the lock this handle acquired has been lost since; see `Lock::lost`. A loss by
    /// time is told to its notice now, as in [`lost_since`](Self::lost_since).
    pub(crate) fn lost(&self) -> bool {
        let lost = match self.lock().belief {
            Belief::Held(lease) => lease.is_lost(Instant::now()),
            Belief::Free | Belief::Unsure(_) => false,
        };
        if lost {
            self.changed();
        }
        lost
    }

    /// The fencing token of the current acquisition.
    pub(crate) fn fencing_token(&self) -> Option<u64> {
        match self.lock().belief {
            Belief::Held(lease) => lease.token,
            Belief::Free | Belief::Unsure(_) => None,
        }
    }

    /// Whether acquisition `epoch` is over or lost. A loss by time is told to its notice
    /// now, so that what this says and the notice agree without waiting for the alarm.
    pub(crate) fn lost_since(&self, epoch: u64) -> bool {
        let over = self.valid_until(epoch).is_none();
        if over {
            self.changed();
        }
        over
    }

    /// Until when acquisition `epoch` is valid (`Some(None)`: no expiry), or `None` once it
    /// is over or lost.
    pub(crate) fn valid_until(&self, epoch: u64) -> Option<Option<Instant>> {
        match self.lock().belief {
            Belief::Held(lease) if lease.epoch == epoch && !lease.is_lost(Instant::now()) => {
                Some(lease.valid_until)
            }
            _ => None,
        }
    }

    /// Stops the renewal, if one runs.
    pub(super) fn stop_renewal(&self) {
        let renewal = self.lock().renewal.take();
        if let Some(renewal) = renewal {
            renewal.stop();
        }
    }

    /// The notice of acquisition `epoch` is handed out: from now on an alarm at its lease's
    /// end tells a loss by time, and one already past is told now.
    pub(crate) fn watched(&self, epoch: u64) {
        {
            let mut state = self.lock();
            if state.epoch == epoch {
                state.watched = true;
            }
        }
        self.changed();
    }

    /// The lock held, for its metrics and span, taken to be ended or counted lost.
    pub(super) fn take_hold(&self) -> Option<Hold> {
        self.lock().hold.take()
    }

    /// Keeps the notice of the acquisition held in step with its lease (see [`watch`]).
    pub(super) fn changed(&self) {
        watch(&self.state);
    }
}

/// Keeps the notice of the acquisition that `shared` holds in step with its lease: a lease
/// lost (by time, or marked) is marked lost for good and its notice cancelled; a watched one
/// with an expiry has an alarm at that expiry, moved when the expiry moves, which watches it
/// again then. The alarm holds only a `Weak`, so a dropped handle leaves nothing ringing.
/// Quick and without I/O: the alarm runs it on the timer thread.
fn watch(shared: &Arc<Mutex<State>>) {
    let now = Instant::now();
    let mut state = shared.lock();
    let watched = state.watched;
    let mut lost = false;
    let until = match &mut state.belief {
        Belief::Held(lease) if lease.is_lost(now) => {
            lease.mark_lost();
            lost = true;
            None
        }
        Belief::Held(lease) => lease.valid_until.filter(|_| watched),
        Belief::Free | Belief::Unsure(_) => None,
    };
    if lost {
        state.alarm = None;
        let notice = state.notice.clone();
        // Cancelled outside the state's lock: the token may wake waits of other locks built
        // with it.
        drop(state);
        notice.cancel();
        return;
    }
    match until {
        Some(until) if state.alarm.as_ref().is_some_and(|(at, _)| *at == until) => {}
        Some(until) => {
            let weak = Arc::downgrade(shared);
            let alarm = timer::call_at(until, move || {
                if let Some(shared) = weak.upgrade() {
                    // Rung: whatever watches next needs an alarm of its own.
                    shared.lock().alarm = None;
                    watch(&shared);
                }
            });
            state.alarm = Some((until, alarm));
        }
        None => state.alarm = None,
    }
}
