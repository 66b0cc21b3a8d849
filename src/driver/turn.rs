//! A handle's turns: its acquires and releases run one at a time, so that a call never meets
//! what one before it left in flight (a dropped acquire still giving its grant back, a dropped
//! guard's release on its way) and takes it for its own lock (`AlreadyAcquired`).

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{Mutex, OwnedMutexGuard};

use super::{Inner, Runtime};
use crate::transport::aio::finish;
use crate::Error;

/// The turns of one handle, shared with its guards.
#[derive(Clone, Default)]
pub(crate) struct Turns(Arc<Mutex<()>>);

/// A turn, held until dropped.
pub(crate) type Turn = OwnedMutexGuard<()>;

impl Turns {
    /// The turn, once the calls before have ended, by `until` (`None`: however long it
    /// takes); `None` if not by then.
    pub(crate) async fn take(&self, until: Option<Instant>) -> Option<Turn> {
        let taking = Arc::clone(&self.0).lock_owned();
        match until {
            None => Some(taking.await),
            Some(until) => tokio::time::timeout_at(until.into(), taking).await.ok(),
        }
    }

    /// The turn if no call has it now.
    pub(crate) fn take_now(&self) -> Option<Turn> {
        Arc::clone(&self.0).try_lock_owned().ok()
    }
}

/// Releases acquisition `epoch` of `inner` (any, when `None`) in a turn: `held`, or the next
/// one, waited for no longer than the grace (at most 250 ms), so that the release still ends
/// about by its I/O timeout; and a release does not wait for good on an acquire of the same
/// handle that waits for the lock (it is not held by the handle then).
///
/// Finishing a release its runtime dropped, it takes the turn only if it is free: what holds
/// it is being dropped with the runtime, and there is no timer left to wait by.
pub(crate) async fn release<R: Runtime>(
    inner: Arc<Inner<R>>,
    turns: Turns,
    held: Option<Turn>,
    epoch: Option<u64>,
) -> Result<(), Error> {
    let _turn = match held {
        Some(turn) => Some(turn),
        None if finish::blocking_here() => turns.take_now(),
        None => {
            turns
                .take(Some(Instant::now() + inner.settings.grace()))
                .await
        }
    };
    inner.release(epoch).await
}

/// Releases as [`release`] does, for a caller that is gone (a dropped guard, a dropped
/// release): from a task, or, should the runtime end first, from the thread that drops it; a
/// failure is logged.
pub(crate) fn release_unattended<R: Runtime>(
    inner: Arc<Inner<R>>,
    turns: Turns,
    held: Option<Turn>,
    epoch: Option<u64>,
) {
    let releasing = logged(Arc::clone(&inner), turns.clone(), held, epoch);
    finish::spawn_or_block(releasing, move || logged(inner, turns, None, epoch));
}

async fn logged<R: Runtime>(
    inner: Arc<Inner<R>>,
    turns: Turns,
    held: Option<Turn>,
    epoch: Option<u64>,
) {
    let name = inner.name().to_string();
    match release(inner, turns, held, epoch).await {
        // Released already: by the attempt its runtime dropped, or that acquisition is over.
        Ok(()) | Err(Error::NotAcquired { .. }) => {}
        Err(e) => log::error!("lock {name:?}: release on drop failed: {e}"),
    }
}
