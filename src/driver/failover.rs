//! After a failover: what a handle takes on the new primary is not handed to its caller until
//! the handle's `after_failover` has passed since its backend learned of the switch
//! ([`Handover`]). Until then a holder of the old primary may still believe it holds: its
//! last renewal there counted, and the promoted replica may never have seen it, nor even its
//! grant. Its lease, renewed nowhere else, has ended by then, and its `lost()` says so.

use std::sync::Arc;
use std::time::Instant;

use super::{Inner, Runtime, Taken};
use crate::protocol::lease::{Handover, Wait};
use crate::protocol::lock::Extended;
use crate::transport::send::AnyTransport;
use crate::{CancelToken, Error};

/// What became of an acquisition held back after a failover.
pub(super) enum Handed {
    /// The caller's now.
    Over(Taken),
    /// Given back: the caller's wait ended first.
    Nothing,
    /// Lost during the pause (a lease that does not renew, shorter than the pause): the
    /// acquire starts again.
    Again,
}

impl<R: Runtime> Inner<R> {
    /// When an acquisition made now, for a caller whose wait is `wait`, may be handed over.
    pub(super) fn handover(&self, wait: Wait) -> Handover {
        let switched = self.transport.blocking().switched_at(self.lease_slot());
        Handover::after(
            switched,
            self.settings.after_failover(),
            wait,
            Instant::now(),
        )
    }

    /// Hands `taken` to the caller, once no holder of a replaced primary can still believe
    /// it holds; meanwhile it is held, and renewed if it renews.
    pub(super) async fn hand_over(
        self: &Arc<Self>,
        taken: Taken,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Handed, Error> {
        let at = match self.handover(wait) {
            Handover::Now => return Ok(Handed::Over(taken)),
            Handover::TooLate => {
                self.release(Some(taken.epoch)).await?;
                return Ok(Handed::Nothing);
            }
            Handover::At(at) => at,
        };
        let left = at.saturating_duration_since(Instant::now());
        log::warn!(
            "lock {:?}: taken on a primary that replaced another; handed over in {left:?}, \
             when no holder of the old one can believe it holds (after_failover)",
            self.name()
        );
        if R::pause(left, cancel).await {
            self.release(Some(taken.epoch)).await?;
            return Err(self.error(|name| Error::Cancelled { name }));
        }
        // A lease that does not renew ran down meanwhile: the caller gets a whole one.
        if let (false, Some(ms)) = (self.settings.auto_renewal, self.settings.expire_ms)
            && self.extend_ms(ms).await? == Extended::NotOurs
        {
            self.mark_lost("its expiry passed while it was held back after a failover");
            return Ok(Handed::Again);
        }
        Ok(Handed::Over(taken))
    }
}
