//! The acquire path of the queue primitives (a semaphore's permits, a fair lock, a read-write
//! lock's holds): a place in the primitive's queue instead of the lock's try-and-wait. What
//! follows a grant (the lease, its renewal, release, `lost()`) is the lock's, through
//! [`QueueLeasing`](crate::protocol::leasing::QueueLeasing).

use std::sync::Arc;
use std::time::Instant;

use super::line::LineEnd;
use super::{Inner, Place, Runtime, Taken};
use crate::observe;
use crate::protocol::lease::{Wait, LOOSE};
use crate::{CancelToken, Error};

impl<R: Runtime> Inner<R> {
    /// Waits in line as `wait` allows; returns the acquisition, or `None` when the
    /// wait ended first (nothing is then held, and the waiter has left the queue).
    pub(crate) async fn acquire_in_line(
        self: &Arc<Self>,
        place: &Place,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Taken>, Error> {
        let settings = &self.settings;
        let waiting = async {
            loop {
                if cancel.is_cancelled() {
                    return Err(self.error(|name| Error::Cancelled { name }));
                }
                // A handle that holds already (a fair lock's) must not be granted twice.
                if let Some(taken) = self.before_acquire(wait, cancel).await? {
                    return Ok(Some(taken));
                }
                let (line, ask) = (self.line(place), &place.ask);
                let end = match wait {
                    Wait::Never => line.try_once(ask).await?,
                    Wait::Until(deadline) => line.wait(ask, Some(deadline), cancel).await?,
                    Wait::Forever => line.wait(ask, None, cancel).await?,
                };
                let LineEnd::Granted { token, valid_until } = end else {
                    return Ok(None);
                };
                let valid_until = self.less_drift(valid_until);
                // A grant asked to reach replicas is confirmed by an extend carrying the `WAIT`:
                // the script that granted it had none.
                let replicated = self.settings.replicas.is_some();
                let confirming = (self.settings.expire_ms)
                    .filter(|_| replicated || self.must_claim(valid_until));
                let confirmed = self.confirm_taken(wait, confirming, valid_until, Ok(None));
                // `None`: its lease ran out between the grant and now (the waiter was stopped):
                // it holds nothing, and asks anew.
                let Some(valid_until) = confirmed.await? else {
                    continue;
                };
                if wait != Wait::Never {
                    observe::handoff(&self.settings.label);
                }
                return self.acquired(valid_until, Some(token)).map(Some);
            }
        };
        observe::acquiring(&settings.label, &settings.name, &settings.id, waiting).await
    }

    /// Whether a grant believed valid until `valid_until` is extended before it is handed
    /// over. A grant pushed to a waiter lasts only its claim window (the waiter's lapse):
    /// a renewing holder's renewal, due at once, claims it in the background, unless too
    /// little is left for that; a holder that will not renew claims it now, as it does when
    /// less than half its expiry is left, or when its `lost()` would turn true well before the
    /// lease could really end.
    fn must_claim(&self, valid_until: Option<Instant>) -> bool {
        let (Some(until), Some(expire)) = (valid_until, self.settings.expire()) else {
            return false;
        };
        let left = until.saturating_duration_since(Instant::now());
        if self.settings.auto_renewal {
            return left < self.settings.grace();
        }
        left < expire / 2 || expire.saturating_sub(left) > expire / LOOSE
    }
}
