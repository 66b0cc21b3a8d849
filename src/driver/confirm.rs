//! What a take is before it is handed over, on either acquire path: confirmed by an extend
//! when what the take knows of its lease is too little (a slow reply, a grant that lasts only
//! its claim window, a read that found the lock ours), acknowledged by the replicas when they
//! are asked for, and given back when either fails.

use std::time::Instant;

use super::{Inner, Runtime};
use crate::protocol::lease::{Attempting, Wait};
use crate::protocol::lock::Extended;
use crate::Error;

/// A lock just taken, confirmed by an extend.
struct Confirmed {
    valid_until: Option<Instant>,
    /// How many replicas acknowledged the extend, when that was asked.
    acks: Option<u64>,
}

impl<R: Runtime> Inner<R> {
    /// What was just taken, valid until `valid_until` as far as the take knows, with `acks`
    /// from the replicas: confirmed by an extend of `confirming` ms when that is given, then
    /// checked against the replicas asked for. `None` when the extend found it no longer
    /// ours (the taker was stopped past its lease): it holds nothing, and takes again. On an
    /// error, what was taken is given back rather than left.
    pub(super) async fn confirm_taken(
        &self,
        wait: Wait,
        confirming: Option<u64>,
        mut valid_until: Option<Instant>,
        mut acks: Result<Option<u64>, Error>,
    ) -> Result<Option<Option<Instant>>, Error> {
        if let Some(ms) = confirming {
            match self.confirm(wait, ms).await {
                Ok(Some(confirmed)) => {
                    valid_until = confirmed.valid_until;
                    if confirmed.acks.is_some() {
                        acks = Ok(confirmed.acks);
                    }
                }
                Ok(None) => return Ok(None),
                Err(e) => {
                    self.unlock_quietly().await;
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.replicated("acquire", acks) {
            // Not on enough replicas: a failover could hand it to someone else as well.
            self.unlock_quietly().await;
            return Err(e);
        }
        Ok(Some(valid_until))
    }

    /// Restarts the expiry of a lock just taken; `None` if it is not ours. Says until when it
    /// is valid, and how many replicas acknowledged it when that was asked.
    async fn confirm(&self, wait: Wait, ms: u64) -> Result<Option<Confirmed>, Error> {
        let request = self.leasing.extend(ms).replicated(self.settings.replicas);
        let mut answered = self.call_again(&request, self.io_deadline(wait)).await?;
        let acks = request.acks(&mut answered.replies)?;
        Ok(match self.leasing.extended(answered.first())? {
            Extended::NotOurs => None,
            Extended::Yes | Extended::NoExpiry => Some(Confirmed {
                valid_until: self.less_drift(
                    Attempting::new(answered.sent, false).valid_until(self.settings.expire()),
                ),
                acks,
            }),
        })
    }
}
