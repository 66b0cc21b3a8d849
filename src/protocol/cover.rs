//! Who times a process's waiters in one line: the rule that no waiter sleeps without a bound.
//!
//! The server times a waiter to the earliest event that could let it in (a holder's expiry,
//! the lapse of another process's waiter just ahead), and answers "no timer" for one behind a
//! waiter of its own process: that one will ask first, and both lapse together. This is the
//! process's side of that answer, with no I/O and time passed in, as the hub keeps it:
//!
//! - the process's first waiter in line (the lowest ticket) is covered by nobody, so its
//!   timer is capped at one lapse window: a wake that is lost costs it at most that;
//! - a waiter behind it keeps the server's timer, or none: the first one covers it;
//! - when the first one leaves the line (granted, timed out, cancelled, stopped), the new
//!   first takes the timer over: told to ask again when its own timer is none or later than
//!   a lapse window, so that it times itself to what is ahead of it now.
//!
//! So 700 waiters of one process behind one holder ask about once a lapse window in all,
//! not 700 times, and none of them waits for ever.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One process's waiters in one primitive's line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cover {
    /// By ticket: the waiter, and when it asks again by itself (`None`: only when told).
    line: BTreeMap<u64, (String, Option<Instant>)>,
    /// Each waiter's ticket.
    tickets: BTreeMap<String, u64>,
}

impl Cover {
    /// Waiter `id` asked at `now` and waits with `ticket`, asking again at `until` by itself
    /// (`None`: only when told). Returns when it must ask again: `until`, capped at `lapse`
    /// from now when it is its process's first waiter in line.
    pub fn waits(
        &mut self,
        id: &str,
        ticket: u64,
        until: Option<Instant>,
        now: Instant,
        lapse: Duration,
    ) -> Option<Instant> {
        if let Some(old) = self.tickets.insert(id.to_owned(), ticket) {
            self.line.remove(&old);
        }
        let first = self.line.keys().next().is_none_or(|&t| ticket < t);
        let until = if first {
            let cap = now + lapse;
            Some(until.map_or(cap, |until| until.min(cap)))
        } else {
            until
        };
        self.line.insert(ticket, (id.to_owned(), until));
        until
    }

    /// Waiter `id` is out of the line at `now`: the waiter that must ask again to take the
    /// timer over, if any (the new first, when its timer breaks the cap of `lapse`).
    #[must_use]
    pub fn left(&mut self, id: &str, now: Instant, lapse: Duration) -> Option<String> {
        let ticket = self.tickets.remove(id)?;
        let was_first = self.line.keys().next() == Some(&ticket);
        self.line.remove(&ticket);
        if !was_first {
            return None;
        }
        let (next, until) = self.line.values_mut().next()?;
        if until.is_some_and(|until| until <= now + lapse) {
            return None;
        }
        // Told, it asks again: until then it counts as asking now.
        *until = Some(now);
        Some(next.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAPSE: Duration = Duration::from_secs(2);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn the_first_waiter_of_the_process_asks_within_a_lapse_window_and_those_behind_wait_for_it() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        assert_eq!(cover.waits("a", 5, None, t0, LAPSE), Some(t0 + LAPSE));
        assert_eq!(
            cover.waits("a", 5, Some(t0 + secs(1)), t0, LAPSE),
            Some(t0 + secs(1))
        );
        assert_eq!(cover.waits("b", 7, None, t0, LAPSE), None);
        assert_eq!(
            cover.waits("c", 9, Some(t0 + secs(60)), t0, LAPSE),
            Some(t0 + secs(60))
        );
    }

    #[test]
    fn the_first_leaving_hands_the_timer_to_the_next_untimed_waiter() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        cover.waits("a", 5, None, t0, LAPSE);
        cover.waits("b", 7, None, t0, LAPSE);
        cover.waits("c", 9, None, t0, LAPSE);
        // Not the first: nobody's timer changes.
        assert_eq!(cover.left("b", t0, LAPSE), None);
        assert_eq!(cover.left("a", t0, LAPSE), Some("c".to_owned()));
        // Told already, it is not told twice before it asks.
        assert_eq!(cover.waits("d", 11, None, t0, LAPSE), None);
        assert_eq!(cover.left("c", t0, LAPSE), Some("d".to_owned()));
        assert_eq!(cover.left("d", t0, LAPSE), None);
        assert_eq!(cover, Cover::default());
    }

    #[test]
    fn a_next_waiter_timed_within_the_cap_keeps_its_own_timer() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        cover.waits("a", 1, None, t0, LAPSE);
        cover.waits("b", 2, Some(t0 + secs(1)), t0, LAPSE);
        cover.waits("c", 3, Some(t0 + secs(30)), t0, LAPSE);
        assert_eq!(cover.left("a", t0, LAPSE), None);
        // Now b is first; when it leaves, c's timer is past the cap.
        assert_eq!(cover.left("b", t0, LAPSE), Some("c".to_owned()));
    }

    #[test]
    fn a_waiter_that_joins_again_moves_to_its_new_ticket() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        cover.waits("a", 1, None, t0, LAPSE);
        cover.waits("b", 2, None, t0, LAPSE);
        // Its process lapsed: a joins again at the back, and b is first.
        assert_eq!(cover.waits("a", 3, None, t0, LAPSE), None);
        assert_eq!(cover.waits("b", 2, None, t0, LAPSE), Some(t0 + LAPSE));
        assert_eq!(cover.left("x", t0, LAPSE), None);
    }
}
