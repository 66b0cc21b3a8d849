//! What the queue primitives' handles share: a [`Semaphore`](crate::Semaphore) or
//! [`RwLock`](crate::RwLock) hands out any number of holds at once (from many threads), so
//! each acquisition is a lease of its own, with an id of its own (the handle's id and a
//! count), on the lock's hold machinery (renewal, release, `lost()`, fencing).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::driver::blocking::Blocking;
use crate::driver::Inner;
use crate::protocol::keys::{Primitive, QueueKeys};
use crate::protocol::lease::Wait;
use crate::protocol::queue::{self, Ask, QueueState};
use crate::settings::Settings;
use crate::transport::send::{now, send_repeatable};
use crate::transport::Transport;
use crate::Error;

/// A queue primitive's handle, as its acquisitions see it.
pub(crate) struct Shares {
    pub(crate) settings: Settings,
    transport: Arc<dyn Transport>,
    pub(crate) keys: QueueKeys,
    pub(crate) capacity: u64,
    /// How many acquisitions this handle has made: the last part of their ids.
    made: AtomicU64,
}

/// One acquisition held: given back by [`Held::release`] or when dropped.
pub(crate) struct Held {
    inner: Arc<Inner<Blocking>>,
    epoch: u64,
    ask: Ask,
    keys: QueueKeys,
    released: bool,
}

impl Shares {
    pub(crate) fn new(
        kind: Primitive,
        settings: Settings,
        transport: Arc<dyn Transport>,
        capacity: u64,
    ) -> Shares {
        Shares {
            keys: QueueKeys::new(kind, &settings.name),
            settings,
            transport,
            capacity,
            made: AtomicU64::new(0),
        }
    }

    /// Takes `units` as `wait` allows: `None` when the wait ended first.
    pub(crate) fn take(&self, units: u64, wait: Wait) -> Result<Option<Held>, Error> {
        let (settings, ask) = next_ask(&self.settings, &self.made, units, self.capacity)?;
        let cancel = settings.cancel.clone();
        let inner = Arc::new(Inner::queued(
            settings,
            Arc::clone(&self.transport),
            &self.keys,
            &ask,
        ));
        Ok(
            now(inner.acquire_queued(&self.keys, &ask, wait, &cancel))?.map(|epoch| Held {
                inner,
                epoch,
                ask,
                keys: self.keys.clone(),
                released: false,
            }),
        )
    }

    /// The holders and waiters as the server sees them now.
    pub(crate) fn state(&self) -> Result<QueueState, Error> {
        let deadline = std::time::Instant::now() + self.settings.io_timeout;
        let mut answered = now(send_repeatable(
            &*self.transport,
            &queue::state(&self.keys),
            deadline,
        ))?;
        queue::parse_state(&self.keys, &answered.replies.swap_remove(0))
    }
}

/// The settings and ask of a new acquisition of `units` of `capacity` by the handle with
/// `settings`, which has made `made` before: an id of its own, the handle's and a count.
pub(crate) fn next_ask(
    settings: &Settings,
    made: &AtomicU64,
    units: u64,
    capacity: u64,
) -> Result<(Settings, Ask), Error> {
    let n = made.fetch_add(1, Ordering::Relaxed);
    let mut settings = settings.clone();
    settings.id = format!("{}:{n}", settings.id);
    let ask = Ask::new(
        &settings.id,
        units,
        capacity,
        settings.expire(),
        settings.lapse(),
    )?;
    Ok((settings, ask))
}

impl Held {
    pub(crate) fn lost(&self) -> bool {
        self.inner.lost_since(self.epoch)
    }

    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    /// Gives it back, waking the waiters that can now proceed.
    pub(crate) fn release(mut self) -> Result<(), Error> {
        self.released = true;
        now(self.inner.release(Some(self.epoch)))
    }

    /// Keeps `units` of what it holds and gives back the rest (a write lock downgraded to a
    /// read lock). False if it no longer held anything.
    pub(crate) fn shrink(&self, units: u64) -> Result<bool, Error> {
        let deadline = std::time::Instant::now() + self.inner.settings.io_timeout;
        let request = queue::shrink(&self.keys, &self.ask, units);
        let mut answered = now(send_repeatable(&*self.inner.transport, &request, deadline))?;
        queue::parse_held(&self.keys, &answered.replies.swap_remove(0))
    }
}

/// A hold dropped unreleased is given back: a failure is logged, and the lease frees itself
/// at its expiry.
impl Drop for Held {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        match now(self.inner.release(Some(self.epoch))) {
            Ok(()) => {}
            Err(e @ Error::NotAcquired { .. }) => {
                log::warn!("{:?}: on drop: {e}", self.inner.name());
            }
            Err(e) => log::error!("{:?}: release on drop failed: {e}", self.inner.name()),
        }
    }
}
