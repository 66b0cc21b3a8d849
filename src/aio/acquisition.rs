//! What the async queue primitives' handles share: the async twin of the blocking handles'
//! acquisitions. Each acquisition is a lease of its own, with an id of its own, taken on a
//! task of its own, so that a grant that lands after the caller's future is dropped is still
//! given back: the task's hold is dropped with its output, which releases it.

use std::sync::Arc;
use std::time::Instant;

use super::lock::Abandon;
use crate::acquisition::next_ask;
use crate::driver::tokio::{runtime, Tokio};
use crate::driver::Inner;
use crate::protocol::keys::{Primitive, QueueKeys};
use crate::protocol::lease::Wait;
use crate::protocol::queue::{self, Ask, QueueState};
use crate::settings::Settings;
use crate::transport::aio::{finish, AsyncTransport};
use crate::transport::send::send_repeatable;
use crate::transport::Transport;
use crate::{CancelToken, Error};

/// An async queue primitive's handle, as its acquisitions see it.
pub(crate) struct Shares {
    pub(crate) settings: Settings,
    transport: Arc<dyn AsyncTransport>,
    pub(crate) keys: QueueKeys,
    pub(crate) capacity: u64,
    /// How many acquisitions this handle has made: the last part of their ids.
    made: std::sync::atomic::AtomicU64,
}

/// One acquisition held: given back by [`Held::release`] or, unattended, when dropped.
pub(crate) struct Held {
    inner: Arc<Inner<Tokio>>,
    epoch: u64,
    ask: Ask,
    keys: QueueKeys,
    /// Whether dropping it gives it back: not once it has been released.
    armed: bool,
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
            transport: transport.to_async(),
            capacity,
            made: Default::default(),
        }
    }

    /// Takes `units` as `wait` allows: `None` when the wait ended first. Dropped before its
    /// end, the wait leaves the queue and gives back a grant that came meanwhile.
    pub(crate) async fn take(&self, units: u64, wait: Wait) -> Result<Option<Held>, Error> {
        let runtime = runtime()?;
        let (settings, ask) = next_ask(&self.settings, &self.made, units, self.capacity)?;
        let inner = Arc::new(Inner::queued(
            settings,
            Arc::clone(&self.transport),
            &self.keys,
            &ask,
        ));
        let cancel = CancelToken::new();
        let abandon = Abandon(cancel.clone());
        let keys = self.keys.clone();
        let acquiring = runtime.spawn(async move {
            let epoch = inner.acquire_queued(&keys, &ask, wait, &cancel).await?;
            Ok(epoch.map(|epoch| Held {
                inner,
                epoch,
                ask,
                keys,
                armed: true,
            }))
        });
        tokio::pin!(acquiring);
        // The handle's own token, if it was built with one, cancels the task's wait.
        let outcome = tokio::select! {
            outcome = &mut acquiring => outcome,
            () = self.settings.cancel.cancelled() => {
                abandon.0.cancel();
                acquiring.await
            }
        };
        drop(abandon);
        outcome.unwrap_or_else(|e| {
            log::error!("{:?}: the acquiring task failed: {e}", self.settings.name);
            Err(Error::Cancelled {
                name: self.settings.name.clone(),
            })
        })
    }

    /// The holders and waiters as the server sees them now.
    pub(crate) async fn state(&self) -> Result<QueueState, Error> {
        let deadline = Instant::now() + self.settings.io_timeout;
        let request = queue::state(&self.keys);
        let mut answered = send_repeatable(&*self.transport, &request, deadline).await?;
        queue::parse_state(&self.keys, &answered.replies.swap_remove(0))
    }
}

impl Held {
    pub(crate) fn lost(&self) -> bool {
        self.inner.lost_since(self.epoch)
    }

    pub(crate) async fn when_lost(&self) {
        self.inner.when_lost(self.epoch).await;
    }

    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    /// Keeps `units` of what it holds and gives back the rest (a write lock downgraded to a
    /// read lock). False if it no longer held anything.
    pub(crate) async fn shrink(&self, units: u64) -> Result<bool, Error> {
        let deadline = Instant::now() + self.inner.settings.io_timeout;
        let request = queue::shrink(&self.keys, &self.ask, units);
        let mut answered = send_repeatable(&*self.inner.transport, &request, deadline).await?;
        queue::parse_held(&self.keys, &answered.replies.swap_remove(0))
    }

    /// Gives it back, waking the waiters that can now proceed. Dropped before its end, the
    /// release is done again unattended.
    pub(crate) async fn release(mut self) -> Result<(), Error> {
        let released = self.inner.release(Some(self.epoch)).await;
        self.armed = false;
        released
    }
}

/// A hold dropped unreleased is given back from a task (or, its runtime ending, from the
/// dropping thread): a failure is logged, and the lease frees itself at its expiry.
impl Drop for Held {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (inner, epoch) = (Arc::clone(&self.inner), self.epoch);
        let again = Arc::clone(&inner);
        finish::spawn_or_block(logged(inner, epoch), move || logged(again, epoch));
    }
}

async fn logged(inner: Arc<Inner<Tokio>>, epoch: u64) {
    match inner.release(Some(epoch)).await {
        // Released already, by the attempt its runtime dropped.
        Ok(()) | Err(Error::NotAcquired { .. }) => {}
        Err(e) => log::error!("{:?}: release on drop failed: {e}", inner.name()),
    }
}
