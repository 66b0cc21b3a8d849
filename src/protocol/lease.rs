//! What a handle knows about its lock, and when to wait how long: plain code, time passed in.

use std::time::{Duration, Instant};

use super::lock::Pttl;

/// How long a caller waits for the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Wait {
    /// One try.
    Never,
    /// Until then.
    Until(Instant),
    /// Until it holds.
    Forever,
}

impl Wait {
    /// A wait of `timeout` from `now`; zero is a single try.
    pub fn timeout(now: Instant, timeout: Duration) -> Wait {
        if timeout.is_zero() {
            return Wait::Never;
        }
        match now.checked_add(timeout) {
            Some(deadline) => Wait::Until(deadline),
            None => Wait::Forever,
        }
    }

    /// The wait of a call whose server has not answered since `since`: one with a deadline
    /// keeps it; one without (a single try, an untimed wait) ends `io_timeout` after `since`,
    /// the bound a server that does not answer puts on such a call.
    pub fn away_since(self, since: Instant, io_timeout: Duration) -> Wait {
        match self {
            Wait::Until(deadline) => Wait::Until(deadline),
            Wait::Never | Wait::Forever => since.checked_add(io_timeout).map_or(self, Wait::Until),
        }
    }
}

/// When an acquisition made at `now` may be handed to its caller, whose wait is `wait`, by
/// a handle that waits `pause` after a failover, its backend having learned of the last
/// one at `switched` (if ever). Until then a holder of the old primary may still believe it
/// holds, even one whose grant or renewals the new primary never saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Handover {
    /// Now: no failover is that recent.
    Now,
    /// At that instant, which the caller's wait reaches.
    At(Instant),
    /// Not before the caller's wait ends: nothing is to be held.
    TooLate,
}

impl Handover {
    pub fn after(switched: Option<Instant>, pause: Duration, wait: Wait, now: Instant) -> Self {
        let Some(at) = switched.and_then(|switched| switched.checked_add(pause)) else {
            return Handover::Now;
        };
        if at <= now {
            return Handover::Now;
        }
        match wait {
            Wait::Forever => Handover::At(at),
            Wait::Until(deadline) if at <= deadline => Handover::At(at),
            Wait::Until(_) | Wait::Never => Handover::TooLate,
        }
    }
}

/// The share of the expiry (one part in this many) that a woken grant of a holder that does
/// not renew may lose to its wait before the grant is confirmed: a 10 s lock is confirmed after
/// a wait of more than 500 ms.
pub(crate) const LOOSE: u32 = 20;

/// When the next renewal of a lease valid until `valid_until` is due, as a wait from `now`:
/// when a third of `expire` is left by what the handle believes, so that a lease counted
/// conservatively (from a wait's start) is renewed before it would be taken for lost, and
/// one counted from a recent extend is renewed two thirds of the way through.
pub fn renewal_due(now: Instant, valid_until: Instant, expire: Duration) -> Duration {
    valid_until
        .checked_sub(expire / 3)
        .map_or(Duration::ZERO, |due| due.saturating_duration_since(now))
}

/// What the renewal due at `now` of a lease held since `since` extends it by: the expiry, or
/// with a `max_hold`, no further than `since + max_hold`, whole milliseconds rounded down so
/// that the server's expiry never passes that point. `None`: nothing is left to extend by.
/// A span shorter than `expire` is the last renewal: the hold then ends within `max_hold`.
pub(crate) fn renewal_span(
    now: Instant,
    since: Instant,
    expire: Duration,
    max_hold: Option<Duration>,
) -> Option<Duration> {
    let Some(max_hold) = max_hold else {
        return Some(expire);
    };
    let left = since
        .checked_add(max_hold)
        .map_or(expire, |end| end.saturating_duration_since(now));
    let left = Duration::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
    match left {
        left if left >= expire => Some(expire),
        left if left.is_zero() => None,
        left => Some(left),
    }
}

/// One acquisition in progress: when the request that may take the lock was sent, and whether
/// it followed a wait.
#[derive(Clone, Copy, Debug)]
pub struct Attempting {
    sent: Instant,
    woken: bool,
}

impl Attempting {
    /// A try sent at `sent`, straight away (`woken` false) or behind a `BLPOP`.
    pub fn new(sent: Instant, woken: bool) -> Self {
        Attempting { sent, woken }
    }

    /// When a key this try set with `expire` expires at the earliest: it was set no earlier
    /// than the request was sent, so the count starts there, never at the reply.
    pub fn valid_until(&self, expire: Option<Duration>) -> Option<Instant> {
        expire.and_then(|e| self.sent.checked_add(e))
    }

    /// After a wait the count from the send has used up the time waited, though the key was
    /// most likely set just now (or long ago, if the reply was held up): only an extend can
    /// say which. It is sent before the lock is handed over when less than half the expiry is
    /// left at `now` (a renewal could not be scheduled in time), and, for a holder that will
    /// not renew (`renewing` false), whenever the wait used more than [`LOOSE`] of it: such a
    /// holder's `lost()` would turn true that much before the key could really expire.
    pub(crate) fn needs_confirming(
        &self,
        now: Instant,
        expire: Option<Duration>,
        renewing: bool,
    ) -> bool {
        let (true, Some(until), Some(expire)) = (self.woken, self.valid_until(expire), expire)
        else {
            return false;
        };
        let left = until.saturating_duration_since(now);
        left < expire / 2 || (!renewing && expire.saturating_sub(left) > expire / LOOSE)
    }
}

/// When a lock found holding our id by a read sent at `sent` expires at the earliest. Used
/// when the reply of the request that took it was lost.
pub fn valid_from_read(sent: Instant, pttl: Pttl) -> Option<Instant> {
    match pttl {
        Pttl::Left(left) => sent.checked_add(left),
        // `Gone` cannot hold our id; it reads as already expired.
        Pttl::Gone => Some(sent),
        Pttl::Forever => None,
    }
}

/// A lock this handle acquired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Lease {
    /// Which acquisition of this handle it is: a guard releases only its own.
    pub epoch: u64,
    /// When the handle became its holder: what `max_hold` counts from.
    pub since: Instant,
    /// When the key expires at the earliest, as far as this process can tell.
    pub valid_until: Option<Instant>,
    /// Its fencing token, if it has one.
    pub token: Option<u64>,
    /// Once lost, always lost: after the deadline passed someone else may have held the
    /// lock, even if the key is ours again now.
    lost: bool,
}

impl Lease {
    /// Acquisition `epoch`, held since `since`, valid until `valid_until`.
    pub fn new(
        epoch: u64,
        since: Instant,
        valid_until: Option<Instant>,
        token: Option<u64>,
    ) -> Self {
        Lease {
            epoch,
            since,
            valid_until,
            token,
            lost: false,
        }
    }

    /// Whether it is lost by `now`: marked so, or past its validity.
    pub fn is_lost(&self, now: Instant) -> bool {
        self.lost || self.valid_until.is_some_and(|t| now >= t)
    }

    /// It is lost for good (a renewal found another owner).
    pub fn mark_lost(&mut self) {
        self.lost = true;
    }

    /// An extend of `expire` sent at `sent` succeeded.
    pub fn extended(&mut self, sent: Instant, expire: Duration) {
        if self.is_lost(sent) {
            self.lost = true;
        } else {
            self.valid_until = sent.checked_add(expire);
        }
    }
}

/// What a handle believes about its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Belief {
    /// Not held by this handle.
    Free,
    Held(Lease),
    /// A request that may have taken or released the lock lost its reply and could not be
    /// settled in time: Redis must be asked before anything is assumed.
    Unsure(Unsure),
}

/// A request whose outcome is not known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unsure {
    /// The connection it went out on (its `CLIENT ID`), to close at the server before
    /// reading state, so that the request cannot run after the read.
    pub(crate) conn: Option<super::ConnId>,
    /// Whether it was a release (else a try): a release's own unlock may be why the lock is
    /// gone, so "not ours" afterwards is not `NotAcquired`.
    pub(crate) releasing: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn an_acquisition_within_a_pause_after_a_failover_waits_for_its_end_if_its_wait_reaches_it() {
        let now = Instant::now();
        let switched = Some(now - ms(1000));
        let end = now + ms(2000);
        let after = |wait| Handover::after(switched, ms(3000), wait, now);
        assert_eq!(after(Wait::Forever), Handover::At(end));
        assert_eq!(after(Wait::Until(end)), Handover::At(end));
        assert_eq!(after(Wait::Until(end - ms(1))), Handover::TooLate);
        assert_eq!(after(Wait::Never), Handover::TooLate);
    }

    #[test]
    fn an_acquisition_is_handed_over_at_once_without_a_recent_failover_or_a_pause() {
        let now = Instant::now();
        let then = Some(now - ms(3000));
        assert_eq!(
            Handover::after(None, ms(3000), Wait::Never, now),
            Handover::Now
        );
        assert_eq!(
            Handover::after(then, ms(3000), Wait::Never, now),
            Handover::Now
        );
        assert_eq!(
            Handover::after(Some(now), ms(0), Wait::Never, now),
            Handover::Now
        );
    }

    #[test]
    fn a_zero_timeout_is_a_single_try_and_a_huge_one_is_forever() {
        let now = Instant::now();
        assert_eq!(Wait::timeout(now, Duration::ZERO), Wait::Never);
        assert_eq!(Wait::timeout(now, Duration::MAX), Wait::Forever);
        assert_eq!(Wait::timeout(now, ms(5)), Wait::Until(now + ms(5)));
    }

    #[test]
    fn a_call_without_a_deadline_ends_an_io_timeout_after_its_server_stopped_answering() {
        let now = Instant::now();
        let io = ms(1000);
        assert_eq!(Wait::Never.away_since(now, io), Wait::Until(now + io));
        assert_eq!(Wait::Forever.away_since(now, io), Wait::Until(now + io));
        let deadline = Wait::Until(now + ms(5));
        assert_eq!(deadline.away_since(now, io), deadline);
    }

    #[test]
    fn validity_counts_from_the_send_not_the_reply() {
        let sent = Instant::now();
        let a = Attempting::new(sent, false);
        assert_eq!(a.valid_until(Some(ms(100))), Some(sent + ms(100)));
        assert_eq!(a.valid_until(None), None);
    }

    #[test]
    fn a_woken_try_with_most_of_its_expiry_gone_must_be_confirmed() {
        let sent = Instant::now();
        let woken = Attempting::new(sent, true);
        assert!(!woken.needs_confirming(sent + ms(400), Some(ms(1000)), true));
        assert!(woken.needs_confirming(sent + ms(600), Some(ms(1000)), true));
        let straight = Attempting::new(sent, false);
        assert!(!straight.needs_confirming(sent + ms(600), Some(ms(1000)), true));
        assert!(!woken.needs_confirming(sent + ms(600), None, true));
    }

    #[test]
    fn a_woken_try_of_a_holder_that_will_not_renew_is_confirmed_after_a_short_wait() {
        let sent = Instant::now();
        let woken = Attempting::new(sent, true);
        assert!(!woken.needs_confirming(sent + ms(40), Some(ms(1000)), false));
        assert!(woken.needs_confirming(sent + ms(60), Some(ms(1000)), false));
        assert!(!woken.needs_confirming(sent + ms(60), Some(ms(1000)), true));
    }

    #[test]
    fn a_renewal_is_due_when_a_third_of_the_believed_expiry_is_left() {
        let now = Instant::now();
        // Just taken: two thirds of the way through.
        assert_eq!(renewal_due(now, now + ms(3000), ms(3000)), ms(2000));
        // Counted from a wait that began 1.5 s ago: due in half a second, not in 2 s.
        assert_eq!(renewal_due(now, now + ms(1500), ms(3000)), ms(500));
        // Already past the point: at once.
        assert_eq!(renewal_due(now, now + ms(500), ms(3000)), Duration::ZERO);
    }

    #[test]
    fn without_max_hold_a_renewal_extends_by_the_expiry() {
        let now = Instant::now();
        assert_eq!(renewal_span(now, now, ms(3000), None), Some(ms(3000)));
    }

    #[test]
    fn a_renewal_that_would_pass_max_hold_extends_only_to_it() {
        let since = Instant::now();
        let expire = ms(3000);
        let max_hold = Some(ms(10_000));
        // Far from it: the whole expiry.
        assert_eq!(
            renewal_span(since + ms(2000), since, expire, max_hold),
            Some(expire)
        );
        // Just within: still the whole expiry, ending at max_hold exactly.
        assert_eq!(
            renewal_span(since + ms(7000), since, expire, max_hold),
            Some(expire)
        );
        // Past that: only what is left, rounded down.
        let left = renewal_span(
            since + ms(8000) + Duration::from_micros(600),
            since,
            expire,
            max_hold,
        );
        assert_eq!(left, Some(ms(1999)));
    }

    #[test]
    fn no_renewal_is_left_at_max_hold() {
        let since = Instant::now();
        let max_hold = Some(ms(10_000));
        assert_eq!(
            renewal_span(since + ms(10_000), since, ms(3000), max_hold),
            None
        );
        assert_eq!(
            renewal_span(since + ms(12_000), since, ms(3000), max_hold),
            None
        );
    }

    #[test]
    fn a_lock_settled_by_reading_counts_from_the_read() {
        let sent = Instant::now();
        assert_eq!(
            valid_from_read(sent, Pttl::Left(ms(80))),
            Some(sent + ms(80))
        );
        assert_eq!(valid_from_read(sent, Pttl::Forever), None);
    }

    #[test]
    fn a_lease_is_lost_at_its_deadline_and_stays_lost() {
        let t = Instant::now();
        let mut lease = Lease::new(1, t, Some(t + ms(100)), None);
        assert!(!lease.is_lost(t + ms(99)));
        assert!(lease.is_lost(t + ms(100)));
        lease.extended(t + ms(150), ms(100));
        assert!(
            lease.is_lost(t + ms(160)),
            "an extend after the deadline does not undo it"
        );
    }

    #[test]
    fn an_extend_in_time_moves_the_deadline_from_its_send() {
        let t = Instant::now();
        let mut lease = Lease::new(1, t, Some(t + ms(100)), None);
        lease.extended(t + ms(50), ms(100));
        assert_eq!(lease.valid_until, Some(t + ms(150)));
        assert!(!lease.is_lost(t + ms(149)));
    }

    #[test]
    fn a_lease_without_expiry_is_never_lost_by_time() {
        let lease = Lease::new(1, Instant::now(), None, None);
        assert!(!lease.is_lost(Instant::now() + Duration::from_secs(1 << 30)));
    }
}
