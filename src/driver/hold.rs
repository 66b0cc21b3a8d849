//! What a holder does: release, extend, renew and reset, and the hold's metrics; what it
//! knows (`lost()`, the fencing token) is [`Known`](super::known::Known)'s.

use std::time::{Duration, Instant};

use super::{Inner, Runtime};
use crate::config::settings::millis;
use crate::observe;
use crate::protocol::lease::{self, Belief, Unsure, Wait};
use crate::protocol::lock::Extended;
use crate::transport::send::AnyTransport;
use crate::{CancelToken, Error};

/// Who holds a lock, from [`Lock::holder`](crate::Lock::holder).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id in `lock:<name>` (converted lossily if it is not UTF-8).
    pub id: String,
    /// What is left of its expiry; `None` when it has none.
    pub ttl: Option<Duration>,
}

impl<R: Runtime> Inner<R> {
    /// Fails with [`Error::NotReplicated`] when fewer replicas than asked for acknowledged
    /// `operation` (`acks` is `None` when no `WAIT` ran), or with the `WAIT`'s own error.
    pub(super) fn replicated(
        &self,
        operation: &'static str,
        acks: Result<Option<u64>, Error>,
    ) -> Result<(), Error> {
        let acks = acks?;
        match self.settings.replicas {
            Some((wanted, _)) if acks.unwrap_or(0) < u64::from(wanted) => {
                Err(Error::NotReplicated {
                    name: self.settings.name.clone(),
                    operation,
                    acked: acks.unwrap_or(0),
                    wanted,
                })
            }
            _ => Ok(()),
        }
    }

    /// Releases the lock: any acquisition (`epoch` `None`), or only acquisition `epoch`, as a
    /// guard does.
    pub(crate) async fn release(&self, epoch: Option<u64>) -> Result<(), Error> {
        let deadline = self.io_deadline(Wait::Never);
        // Settling an unsure belief is this call's from here: no background give-back
        // crosses it.
        let never = CancelToken::new();
        let _claim = self.claim("release", deadline, &never).await?;
        let belief = {
            let state = self.known.lock();
            match (epoch, state.belief) {
                (Some(epoch), Belief::Held(lease)) if lease.epoch != epoch => {
                    return Err(self.error(|name| Error::NotAcquired { name }))
                }
                (Some(_), Belief::Free) => {
                    return Err(self.error(|name| Error::NotAcquired { name }))
                }
                (_, belief) => belief,
            }
        };
        log::debug!("lock {:?}: releasing", self.name());
        if matches!(belief, Belief::Held(lease) if lease.is_lost(Instant::now())) {
            // Its expiry passed without a renewal (a lock that does not renew, held too
            // long): `lost()` turned true, and it counts as lost.
            self.note_lost("expired while held");
            self.known.changed();
        }
        self.end_hold();
        self.known.stop_renewal();
        let mut unsure_release = false;
        if let Belief::Unsure(unsure) = belief {
            unsure_release = unsure.releasing;
            if let Some(conn) = unsure.conn
                && let Err(fault) = self.transport.close(conn, deadline).await
            {
                return Err(self.unknown("release", fault.into_error()));
            }
        }
        let request = self.leasing.release().replicated(self.settings.replicas);
        let outcome = match self.call_again(&request, deadline).await {
            Ok(mut answered) => {
                let acks = request.acks(&mut answered.replies);
                let released = self.leasing.released(answered.first())?;
                self.known.lock().belief = Belief::Free;
                if released || answered.lost_before || unsure_release {
                    self.replicated("release", acks)
                } else {
                    Err(self.error(|name| Error::NotAcquired { name }))
                }
            }
            Err(e) => {
                // It may have run: the next acquire asks Redis instead of trusting a belief.
                self.unsure(Unsure {
                    conn: None,
                    releasing: true,
                });
                match e {
                    // Refused before anything was sent (see `send_repeatable`): nothing ran.
                    Error::Redis(source) if source.is_connection_refusal() => {
                        Err(Error::Redis(source))
                    }
                    Error::Redis(source) => Err(self.unknown("release", source)),
                    other => Err(other),
                }
            }
        };
        self.known.changed();
        // Within the release's own deadline, not one more I/O timeout after it.
        self.unlisten(deadline).await;
        outcome
    }

    /// Gives back a lock no caller will hold; a failure is logged, and the lock frees itself
    /// at its expiry.
    pub(crate) async fn unlock_quietly(&self) {
        let request = self.leasing.release();
        let deadline = self.io_deadline(Wait::Never);
        if let Err(e) = self.call_again(&request, deadline).await {
            log::error!("lock {:?}: release failed: {e}", self.name());
        }
        self.unlisten(deadline).await;
    }

    /// Gives the lock a new expiry: `expire`, or the configured one when `None`.
    pub(crate) async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        let ms = match expire {
            Some(d) => millis("expire", d)?,
            None => self.settings.expire_ms.ok_or_else(|| {
                Error::invalid("extend(None) needs an expire configured on the lock")
            })?,
        };
        match self.extend_ms(ms).await? {
            Extended::Yes => Ok(()),
            Extended::NotOurs => {
                // If this handle thought it held the lock, it has just learned otherwise.
                self.mark_lost("an extend found another owner");
                Err(self.error(|name| Error::NotAcquired { name }))
            }
            Extended::NoExpiry => Err(self.error(|name| Error::NotExpirable { name })),
        }
    }

    /// Sets a new expiry of `ms` if the lock is ours, and moves the known deadline with it.
    pub(super) async fn extend_ms(&self, ms: u64) -> Result<Extended, Error> {
        let request = self.leasing.extend(ms).replicated(self.settings.replicas);
        let mut answered = self
            .call_again(&request, self.io_deadline(Wait::Never))
            .await?;
        let acks = request.acks(&mut answered.replies);
        let extended = self.leasing.extended(answered.first())?;
        if extended == Extended::Yes {
            // Not replicated, the longer expiry may not survive a failover: the lease keeps
            // the old one.
            self.replicated("extend", acks)?;
            if let Belief::Held(lease) = &mut self.known.lock().belief {
                // The drift of this expiry, which need not be the configured one.
                let expire = Duration::from_millis(ms);
                let granted = expire.saturating_sub(self.transport.blocking().drift(expire));
                lease.extended(answered.sent, granted);
            }
            self.known.changed();
        }
        Ok(extended)
    }

    pub(crate) async fn reset(&self) -> Result<bool, Error> {
        let deadline = self.io_deadline(Wait::Never);
        let (observed, _) = self.observe_by(deadline).await?;
        let Some(owner) = observed.owner else {
            return Ok(false);
        };
        if self.is_ours(Some(&owner)) {
            self.forget();
        }
        let request = self.leasing.reset(&owner);
        let answered = self.call_again(&request, deadline).await?;
        // Deleted now, or released by its owner in between: either way that owner's lock is
        // gone, and no later one was touched.
        self.leasing.parse_reset(answered.first())?;
        log::info!("lock {:?} reset", self.name());
        Ok(true)
    }

    /// When the renewal of a lease valid until `valid_until` is due, from now: scheduled
    /// from the expiry the handle believes, not from when it got the lock, since a lease
    /// that followed a wait is counted from the wait's start.
    pub(super) fn renewal_due(&self, valid_until: Option<Instant>, expire: Duration) -> Duration {
        valid_until.map_or(expire * 2 / 3, |until| {
            lease::renewal_due(Instant::now(), until, expire)
        })
    }

    /// One renewal: the wait before the next, or `None` to stop.
    pub(crate) async fn renew(&self) -> Option<Duration> {
        let expire = self.settings.expire()?;
        let interval = expire * 2 / 3;
        let since = match self.known.lock().belief {
            Belief::Held(lease) => lease.since,
            // Released meanwhile: the release stops this renewal.
            Belief::Free | Belief::Unsure(_) => return None,
        };
        let max_hold = self.settings.max_hold;
        let Some(span) = lease::renewal_span(Instant::now(), since, expire, max_hold) else {
            log::warn!("lock {:?}: held for max_hold; not renewed", self.name());
            return None;
        };
        // Cut short by max_hold: the lease ends there, and the alarm at its end tells it.
        let last = span < expire;
        let ms = u64::try_from(span.as_millis()).ok()?;
        match self.extend_ms(ms).await {
            Ok(Extended::Yes) => {
                let lease = match self.known.lock().belief {
                    Belief::Held(lease) => lease,
                    // Released meanwhile: the release stops this renewal.
                    Belief::Free | Belief::Unsure(_) => return None,
                };
                if lease.is_lost(Instant::now()) {
                    // Renewed only after the expiry passed: someone else may have held it
                    // meanwhile, and a lost lease stays lost.
                    self.note_lost("renewed too late");
                    log::error!("lock {:?}: lost (renewed too late)", self.name());
                    return None;
                }
                if last {
                    log::warn!(
                        "lock {:?}: renewed for the last time, up to max_hold",
                        self.name()
                    );
                    return None;
                }
                log::debug!("lock {:?}: renewed", self.name());
                Some(self.renewal_due(lease.valid_until, expire))
            }
            Ok(Extended::NotOurs) => {
                self.mark_lost("a renewal found another owner");
                log::error!("lock {:?}: lost (it is no longer ours)", self.name());
                None
            }
            Ok(Extended::NoExpiry) => {
                log::warn!(
                    "lock {:?}: its expiry was removed; renewal not needed",
                    self.name()
                );
                None
            }
            Err(e) if self.known.expired() => {
                self.mark_lost("expired before a renewal got through");
                log::error!(
                    "lock {:?}: lost (expired before a renewal got through: {e})",
                    self.name()
                );
                None
            }
            Err(e) => {
                // Try again soon: the lock is lost if the expiry passes first.
                observe::renewal_failed(&self.settings.label, self.name(), &e);
                log::warn!("lock {:?}: renewal failed, retrying: {e}", self.name());
                Some((interval / 8).max(Duration::from_millis(1)))
            }
        }
    }

    /// The lease is lost, for `why`.
    pub(crate) fn mark_lost(&self, why: &str) {
        if let Belief::Held(lease) = &mut self.known.lock().belief {
            lease.mark_lost();
        }
        self.note_lost(why);
        self.known.changed();
    }

    /// `lost()` turned true, for `why`: counted once per acquisition, as its hold ends.
    pub(super) fn note_lost(&self, why: &str) {
        let hold = self.known.take_hold();
        if let Some(hold) = hold {
            hold.lost(&self.settings.label, self.name(), &self.settings.id, why);
        }
    }

    /// The hold is over, if it was not already (by a loss).
    pub(super) fn end_hold(&self) {
        let hold = self.known.take_hold();
        if let Some(hold) = hold {
            hold.end(&self.settings.label);
        }
    }

    /// Forgets the acquisition and stops its renewal; a loss by time is told first.
    pub(super) fn forget(&self) {
        self.known.changed();
        self.known.lock().belief = Belief::Free;
        self.end_hold();
        self.known.stop_renewal();
        self.known.changed();
    }
}
