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
//!   first takes the timer over when its own is none or later: the one that left, or the
//!   end of what that one was granted if sooner, while still ahead (the event it was timed
//!   to may let the new first in now), else an ask at once, which times it to what is ahead
//!   of it now.
//!
//! So 700 waiters of one process behind one holder ask about once a lapse window in all,
//! not 700 times; a hand-off between two of them costs no ask; and none waits for ever.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One process's waiters in one primitive's line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cover {
    /// By ticket, then id: when each waiter asks again by itself (`None`: only when told).
    /// A ticket is not unique here: the line's counter starts again at 1 when the line
    /// empties, while a waiter granted just then may not have left its seat yet.
    line: BTreeMap<(u64, String), Option<Instant>>,
    /// Each waiter's ticket.
    tickets: BTreeMap<String, u64>,
    /// The soonest end of a hold granted to a waiter of the process, and the latest moment
    /// the process learned of one: an ask sent before then may have been answered before
    /// the grant (the server left it untimed behind that sibling, a waiter then), so it
    /// asks again by that end. Only the soonest: an ask sent after it is timed by the server
    /// to every holder's expiry. At worst one ask too many.
    held: Option<(Instant, Instant)>,
}

/// A waiter that takes the first one's timer over, and when it must ask by.
pub type HandedOver = Option<(String, Instant)>;

impl Cover {
    /// Waiter `id` asked at `now` and waits with `ticket`, asking again at `until` by itself
    /// (`None`: only when told), its ask sent at `sent`. Returns when it must ask again:
    /// `until`, capped at `lapse` from now when it is its process's first waiter in line,
    /// and at the end of a hold granted to a sibling since `sent`, if sooner (the server may
    /// have left it untimed behind that sibling, a waiter then, whose grant's end may let it
    /// in; at once if that end has passed). And, if it was the first
    /// and is no longer (it joined the line again, behind a sibling: its entry had gone, by
    /// a reset or a lapse), the waiter that takes its timer over, as when one leaves.
    pub fn waits(
        &mut self,
        id: &str,
        ticket: u64,
        until: Option<Instant>,
        sent: Instant,
        now: Instant,
        lapse: Duration,
    ) -> (Option<Instant>, HandedOver) {
        let old = (self.tickets.insert(id.to_owned(), ticket)).map(|old| (old, id.to_owned()));
        let was_first = old.is_some() && self.line.keys().next() == old.as_ref();
        let old_until = old.and_then(|old| self.line.remove(&old)).flatten();
        let first = self.line.keys().next().is_none_or(|(t, _)| ticket < *t);
        let until = if first {
            let ends = self.held.filter(|&(_, learned)| learned >= sent);
            let cap = ends.map_or(now + lapse, |(end, _)| end.max(now).min(now + lapse));
            Some(until.map_or(cap, |until| until.min(cap)))
        } else {
            until
        };
        self.line.insert((ticket, id.to_owned()), until);
        let handed = (was_first && !first)
            .then(|| self.hand_over(old_until, now))
            .flatten();
        (until, handed)
    }

    /// Waiter `id` is out of the line at `now`, holding until `held_until` unless it renews
    /// (`None`: it holds nothing, or with no expiry): the waiter that takes the timer over,
    /// if any, and its new timer. The end of a hold may let the process's first waiter in: a
    /// holder that stops (a crash, a pause) before it renews frees the units then, and no
    /// script wakes a waiter behind one of its own process. So the first waiter's timer
    /// comes no later than that end, whoever was granted (the cover may not even know the
    /// grantee: the reply of its ask that found it waiting was lost).
    #[must_use]
    pub fn left(&mut self, id: &str, held_until: Option<Instant>, now: Instant) -> HandedOver {
        if let Some(end) = held_until {
            let soonest = self.held.map_or(end, |(known, _)| known.min(end));
            self.held = Some((soonest, now));
        }
        let key = self
            .tickets
            .remove(id)
            .map(|ticket| (ticket, id.to_owned()));
        let was_first = key.is_some() && self.line.keys().next() == key.as_ref();
        let left_until = key.and_then(|key| self.line.remove(&key)).flatten();
        if was_first {
            self.hand_over(left_until.into_iter().chain(held_until).min(), now)
        } else {
            self.hand_over(Some(held_until?), now)
        }
    }

    /// The first waiter must ask by `ends` (at once if it has passed, or if nothing bounds
    /// it), unless its own timer comes sooner: the waiter that takes it, and when.
    fn hand_over(&mut self, ends: Option<Instant>, now: Instant) -> HandedOver {
        let ((_, next), until) = self.line.iter_mut().next()?;
        let taken = ends.filter(|&at| at > now).unwrap_or(now);
        if until.is_some_and(|until| until <= taken) {
            return None;
        }
        *until = Some(taken);
        Some((next.clone(), taken))
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
        assert_eq!(cover.waits("a", 5, None, t0, t0, LAPSE).0, Some(t0 + LAPSE));
        assert_eq!(
            cover.waits("a", 5, Some(t0 + secs(1)), t0, t0, LAPSE).0,
            Some(t0 + secs(1))
        );
        assert_eq!(cover.waits("b", 7, None, t0, t0, LAPSE).0, None);
        assert_eq!(
            cover.waits("c", 9, Some(t0 + secs(60)), t0, t0, LAPSE).0,
            Some(t0 + secs(60))
        );
    }

    #[test]
    fn the_first_leaving_hands_the_timer_to_the_next_untimed_waiter() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        let _ = cover.waits("a", 5, None, t0, t0, LAPSE);
        let _ = cover.waits("b", 7, None, t0, t0, LAPSE);
        let _ = cover.waits("c", 9, None, t0, t0, LAPSE);
        // Not the first: nobody's timer changes.
        assert_eq!(cover.left("b", None, t0), None);
        // The first's timer is still ahead: c takes it over, without an ask.
        assert_eq!(
            cover.left("a", None, t0),
            Some(("c".to_owned(), t0 + LAPSE))
        );
        // Timed now, it is not told twice.
        assert_eq!(cover.waits("d", 11, None, t0, t0, LAPSE).0, None);
        // Past the one that left (its deadline came, say): d asks at once.
        let later = t0 + LAPSE;
        assert_eq!(cover.left("c", None, later), Some(("d".to_owned(), later)));
        assert_eq!(cover.left("d", None, later), None);
        assert_eq!(cover, Cover::default());
    }

    #[test]
    fn a_next_waiter_timed_within_the_cap_keeps_its_own_timer() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        let _ = cover.waits("a", 1, None, t0, t0, LAPSE);
        let _ = cover.waits("b", 2, Some(t0 + secs(1)), t0, t0, LAPSE);
        let _ = cover.waits("c", 3, Some(t0 + secs(30)), t0, t0, LAPSE);
        assert_eq!(cover.left("a", None, t0), None);
        // Now b is first; when it leaves, c's timer is past the cap: it takes b's.
        assert_eq!(
            cover.left("b", None, t0),
            Some(("c".to_owned(), t0 + secs(1)))
        );
    }

    #[test]
    fn a_first_waiter_granted_hands_over_the_end_of_its_grant_when_that_comes_first() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        let _ = cover.waits("a", 1, None, t0, t0, LAPSE);
        let _ = cover.waits("b", 2, None, t0, t0, LAPSE);
        // a is granted until t0 + 1 s: should it stop before it renews, b may go in then.
        assert_eq!(
            cover.left("a", Some(t0 + secs(1)), t0),
            Some(("b".to_owned(), t0 + secs(1)))
        );
        let _ = cover.waits("c", 3, None, t0, t0, LAPSE);
        // A grant that outlasts b's timer changes nothing of it.
        assert_eq!(
            cover.left("b", Some(t0 + secs(60)), t0),
            Some(("c".to_owned(), t0 + secs(1)))
        );
    }

    #[test]
    fn a_sibling_granted_before_the_first_was_timed_bounds_it_by_its_end() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        // x was granted until t0 + 1 s before a's reply came (a's ask found x ahead of it,
        // and the server left it untimed).
        let sent = t0 - secs(1);
        assert_eq!(cover.left("x", Some(t0 + secs(1)), t0), None);
        assert_eq!(
            cover.waits("a", 2, None, sent, t0, LAPSE).0,
            Some(t0 + secs(1))
        );
        // Its end passed before the reply came: it asks at once.
        let later = t0 + secs(2);
        assert_eq!(cover.waits("a", 2, None, sent, later, LAPSE).0, Some(later));
        // An ask sent since is timed by the server: the cap again.
        assert_eq!(
            cover.waits("a", 2, None, later, later, LAPSE).0,
            Some(later + LAPSE)
        );
    }

    #[test]
    fn a_sibling_granted_behind_the_first_or_unknown_to_the_cover_bounds_the_first_by_its_end() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        let _ = cover.waits("a", 1, None, t0, t0, LAPSE);
        let _ = cover.waits("b", 2, None, t0, t0, LAPSE);
        assert_eq!(
            cover.left("b", Some(t0 + secs(1)), t0),
            Some(("a".to_owned(), t0 + secs(1)))
        );
        // One whose ask's reply never came (so never in the cover), granted until t0 + 500 ms.
        let soon = t0 + Duration::from_millis(500);
        assert_eq!(
            cover.left("x", Some(soon), t0),
            Some(("a".to_owned(), soon))
        );
        // A hold that ends after the first's timer changes nothing.
        assert_eq!(cover.left("y", Some(t0 + secs(60)), t0), None);
    }

    #[test]
    fn a_ticket_given_again_after_the_line_emptied_keeps_both_waiters() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        // a was granted, the line emptied, and b got ticket 1 again before a's seat went.
        let _ = cover.waits("a", 1, None, t0, t0, LAPSE);
        let _ = cover.waits("c", 2, None, t0, t0, LAPSE);
        assert_eq!(cover.waits("b", 1, None, t0, t0, LAPSE).0, None);
        assert_eq!(
            cover.left("a", None, t0),
            Some(("b".to_owned(), t0 + LAPSE))
        );
        // b's going still hands the timer to c.
        assert_eq!(
            cover.left("b", None, t0),
            Some(("c".to_owned(), t0 + LAPSE))
        );
    }

    #[test]
    fn a_waiter_that_joins_again_moves_to_its_new_ticket() {
        let t0 = Instant::now();
        let mut cover = Cover::default();
        let _ = cover.waits("a", 1, None, t0, t0, LAPSE);
        let _ = cover.waits("b", 2, None, t0, t0, LAPSE);
        // Its entry went (a reset, a lapse): a joins again at the back, and b, first now,
        // takes its timer over.
        assert_eq!(
            cover.waits("a", 3, None, t0, t0, LAPSE),
            (None, Some(("b".to_owned(), t0 + LAPSE)))
        );
        assert_eq!(
            cover.waits("b", 2, None, t0, t0, LAPSE),
            (Some(t0 + LAPSE), None)
        );
        assert_eq!(cover.left("x", None, t0), None);
    }
}
