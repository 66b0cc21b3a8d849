//! An election's watch at the hub, with no I/O and time passed in: when the hub reads the
//! leader, what each read or word of news means for the watchers, how long what they were
//! told is vouched for, and each watcher's own queue of changes. The hub's thread
//! (`driver/hub/watch.rs`) reads and tells; this decides.
//!
//! Whoever changes the leader pushes the news to every watching process's inbox; the hub
//! also reads the leader itself when it starts, when its connection failed, and when the
//! lease it last saw ends, or the watching handles' own lease from the last word, whichever
//! comes first: what nobody announces (a leader that crashed with nobody waiting to succeed
//! it) it finds then, and a server that went quiet it finds out too. A state older than one
//! seen (news popped after a read) is dropped. What the hub last heard vouches for itself
//! only until the next read is due and its answer by the I/O timeout: past that, with nothing
//! heard, a watcher reports that it does not know who leads, once.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::election::{Seen, Watched};

/// The soonest a failed read is tried again.
const READ_AGAIN_MIN: Duration = Duration::from_millis(10);

/// When the hub last heard from the server for a watch, and until when that vouches for what
/// it reported.
pub type Vouched = (Instant, Instant);

/// What every watcher of the election is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Word {
    /// The state now, vouched for until then (`None`: not at all).
    Tell(Watched, Option<Vouched>),
    /// Nothing changed, and what they know holds until then.
    Vouch(Vouched),
}

/// One election's watch by this process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Watch {
    /// When to read the leader (`None`: only when told).
    due: Option<Instant>,
    /// What the watchers were last told, once there was a read.
    last: Option<Watched>,
    /// Whether a read found nobody leading while someone was about to, and it is read again
    /// before that is reported.
    deferred: bool,
    /// Where the last state seen stands (see [`Seen::order`]); `None` before the first read,
    /// and after a read failed.
    order: Option<(u64, bool)>,
    /// The shortest lease of the watching handles: the longest the hub goes without reading
    /// the leader, whatever lease it read (none, when nobody leads).
    lease: Option<Duration>,
    /// How long a read's answer may take once it is due: the hub's I/O timeout and its grace.
    slack: Duration,
    /// What vouches for `last` (`None`: nothing, it is not known).
    vouched: Option<Vouched>,
}

impl Watch {
    /// A watcher joins at `now`, its handle's lease `lease`, through a hub whose reads answer
    /// within `slack` once due: what it starts from, what the others last heard, or `None`: a
    /// read is due now.
    pub fn joined(
        &mut self,
        lease: Option<Duration>,
        slack: Duration,
        now: Instant,
    ) -> Option<(Watched, Option<Vouched>)> {
        self.lease = self.lease.into_iter().chain(lease).min();
        self.slack = slack;
        match &self.last {
            Some(last) => Some((last.clone(), self.vouched)),
            None => {
                self.look_now(now);
                None
            }
        }
    }

    /// Reads the leader again at the hub's next turn.
    pub fn look_now(&mut self, now: Instant) {
        self.due = Some(now);
    }

    /// When the next read is due.
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    /// A read at `now` found `read` (or failed, why), in an election whose lapse window is
    /// `lapse`: what the watchers are told, if anything.
    pub fn read(
        &mut self,
        read: Result<Seen, String>,
        lapse: Duration,
        now: Instant,
    ) -> Option<Word> {
        match read {
            Ok(seen) if seen.handing_over && !self.deferred => self.defer(&seen, now),
            Ok(seen) => Some(self.seen(seen, now)),
            Err(why) => {
                self.due = Some(now + READ_AGAIN_MIN.max(lapse / 20));
                self.unknown(format!("a read of the leader failed: {why}"))
            }
        }
    }

    /// News popped at `now`, unless it is older than what was seen (or came before the first
    /// read: pushed while this process listened for another reason, it may be older than
    /// anything the read will find).
    pub fn news(&mut self, seen: Seen, now: Instant) -> Option<Word> {
        if self.order.is_none_or(|order| seen.order < order) {
            return None;
        }
        Some(self.seen(seen, now))
    }

    /// The state `seen` at `now`: each watcher hears of a state that changed, and the hub
    /// reads again when the lease it found ends (a leader may crash unannounced), or the
    /// watchers' lease from now, whichever comes first. A read is the server's state now,
    /// even if it looks older: a server that restarted empty counts its terms from 1 again.
    fn seen(&mut self, seen: Seen, now: Instant) -> Word {
        self.order = Some(seen.order);
        self.deferred = false;
        let next = seen.look_again.into_iter().chain(self.lease).min();
        self.due = next.and_then(|next| now.checked_add(next));
        let vouched = self.vouch_until(now, self.due);
        let change = Watched::from(seen.leader);
        self.last = Some(change.clone());
        Word::Tell(change, vouched)
    }

    /// Heard from the server at `now`, the next read due at `due`: what that vouches for.
    fn vouch_until(&mut self, now: Instant, due: Option<Instant>) -> Option<Vouched> {
        self.vouched = (due.and_then(|due| due.checked_add(self.slack))).map(|until| (now, until));
        self.vouched
    }

    /// A read found nobody leading while a successor is about to (`seen`): it takes over and
    /// announces itself, so "nobody" in between would only be noise, unless it still holds
    /// once the successor's requests have had their I/O timeout (it died, or its server went
    /// quiet), or its grant lapsed. A fixed grace does not do: a loaded machine takes longer
    /// than any round trip to wake a thread. What was reported holds until that read.
    fn defer(&mut self, seen: &Seen, now: Instant) -> Option<Word> {
        self.deferred = true;
        let wait = seen
            .look_again
            .map_or(self.slack, |left| left.min(self.slack));
        self.due = Some(now + wait);
        if !self.last.as_ref().is_some_and(Watched::is_known) {
            return None;
        }
        self.vouch_until(now, self.due).map(Word::Vouch)
    }

    /// A read failed: nobody here knows who leads until one gets through, which reports the
    /// leader again. Told once, however many fail.
    fn unknown(&mut self, reason: String) -> Option<Word> {
        self.order = None;
        self.deferred = false;
        self.vouched = None;
        if self.last.as_ref().is_some_and(|last| !last.is_known()) {
            return None;
        }
        let change = Watched::Unknown { reason };
        self.last = Some(change.clone());
        Some(Word::Tell(change, None))
    }
}

/// What one watcher has been told and not taken yet.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Heard {
    changes: VecDeque<Watched>,
    /// The last change queued, or the watcher's own "unknown": only a change from it is
    /// queued.
    last: Option<Watched>,
    /// What vouches for `last` (`None`: nothing yet, or it is not known). Past it, with no
    /// change queued, the watcher reports that it does not know.
    vouched: Option<Vouched>,
}

/// Whether `a` and `b` are the same state: every "unknown" is the same one.
fn same(a: &Watched, b: &Watched) -> bool {
    match (a, b) {
        (Watched::Unknown { .. }, Watched::Unknown { .. }) => true,
        _ => a == b,
    }
}

impl Heard {
    /// The hub's word: `change` is the state now, vouched for by `vouched`; queued unless it
    /// is the one told last. Whether it was queued.
    pub fn tell(&mut self, change: &Watched, vouched: Option<Vouched>) -> bool {
        self.vouched = vouched.filter(|_| change.is_known());
        if self.last.as_ref().is_some_and(|last| same(last, change)) {
            return false;
        }
        self.last = Some(change.clone());
        self.changes.push_back(change.clone());
        true
    }

    /// The hub heard from the server, and nothing changed: what the watcher knows, if it
    /// knows it, holds until `vouched`.
    pub fn vouch(&mut self, vouched: Vouched) {
        if self.last.as_ref().is_some_and(Watched::is_known) {
            self.vouched = Some(vouched);
        }
    }

    /// What the watcher has reported last, once it took every change queued: the last
    /// change queued, or its own "unknown". The model checker's: the driver only takes
    /// changes.
    #[cfg(feature = "model")]
    pub fn last(&self) -> Option<&Watched> {
        self.last.as_ref()
    }

    /// The next change at `now`, or when the watcher stops knowing by itself (`None`: never
    /// before the hub tells it something).
    pub fn next(&mut self, now: Instant) -> Result<Watched, Option<Instant>> {
        if let Some(change) = self.changes.pop_front() {
            return Ok(change);
        }
        match self.vouched {
            Some((heard, until)) if until <= now => {
                let silent = now.saturating_duration_since(heard);
                let unknown = Watched::Unknown {
                    reason: format!(
                        "nothing heard from the server for {:.1} s",
                        silent.as_secs_f64()
                    ),
                };
                self.last = Some(unknown.clone());
                self.vouched = None;
                Ok(unknown)
            }
            vouched => Err(vouched.map(|(_, until)| until)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::election::Leader;

    fn leader(term: u64) -> Watched {
        Watched::Leader(Leader {
            id: format!("w:{term}"),
            info: String::new(),
            term,
            since: std::time::UNIX_EPOCH,
        })
    }

    fn unknown(reason: &str) -> Watched {
        Watched::Unknown {
            reason: reason.into(),
        }
    }

    fn taken(heard: &mut Heard, now: Instant) -> Vec<Watched> {
        std::iter::from_fn(|| heard.next(now).ok()).collect()
    }

    #[test]
    fn a_watcher_is_told_each_state_once_and_every_unknown_is_one() {
        let t0 = Instant::now();
        let long = Some((t0, t0 + Duration::from_secs(60)));
        let mut heard = Heard::default();
        heard.tell(&leader(1), long);
        heard.tell(&leader(1), long);
        heard.tell(&unknown("a read failed"), None);
        heard.tell(&unknown("another read failed"), None);
        heard.tell(&leader(1), long);
        let told = taken(&mut heard, t0);
        assert_eq!(told, [leader(1), unknown("a read failed"), leader(1)]);
    }

    #[test]
    fn a_watcher_stops_knowing_by_itself_once_what_it_was_told_is_no_longer_vouched_for() {
        let t0 = Instant::now();
        let mut heard = Heard::default();
        let end = t0 + Duration::from_millis(20);
        heard.tell(&Watched::Nobody, Some((t0, end)));
        assert_eq!(heard.next(t0), Ok(Watched::Nobody));
        assert_eq!(heard.next(t0), Err(Some(end)));
        let stale = heard.next(end);
        assert!(matches!(stale, Ok(Watched::Unknown { .. })), "{stale:?}");
        // Once: nothing vouches for it any more, and the hub's "unknown" is the same one.
        heard.tell(&unknown("a read failed"), None);
        heard.vouch((end, end));
        assert_eq!(heard.next(end + Duration::from_secs(1)), Err(None));
        // The next read that gets through tells it again, though nothing changed.
        heard.tell(&Watched::Nobody, Some((end, end + Duration::from_secs(60))));
        assert_eq!(heard.next(end), Ok(Watched::Nobody));
    }

    #[test]
    fn a_failed_read_makes_every_watcher_unknown_once_and_the_next_read_tells_them_again() {
        let t0 = Instant::now();
        let lapse = Duration::from_secs(2);
        let mut watch = Watch::default();
        // The first watcher: a read is due at once.
        let lease = Some(Duration::from_secs(10));
        assert_eq!(watch.joined(lease, Duration::from_secs(1), t0), None);
        assert_eq!(watch.due(), Some(t0));
        let nobody = Seen {
            leader: None,
            look_again: None,
            handing_over: false,
            order: (3, true),
        };
        let vouched = Some((t0, t0 + Duration::from_secs(11)));
        let told = |word: Option<Word>| match word {
            Some(Word::Tell(change, _)) => Some(change),
            _ => None,
        };
        assert_eq!(
            watch.read(Ok(nobody.clone()), lapse, t0),
            Some(Word::Tell(Watched::Nobody, vouched))
        );
        // Nobody leads, and still the hub reads again within the lease.
        assert_eq!(watch.due(), Some(t0 + Duration::from_secs(10)));
        // A later watcher starts from what the others heard.
        let second = watch.joined(None, Duration::from_secs(1), t0);
        assert_eq!(second, Some((Watched::Nobody, vouched)));
        let failed = watch.read(Err("refused".into()), lapse, t0);
        let reason = "a read of the leader failed: refused";
        assert_eq!(told(failed), Some(unknown(reason)));
        assert_eq!(watch.due(), Some(t0 + lapse / 20));
        assert_eq!(watch.read(Err("again".into()), lapse, t0), None);
        // News is not a read: it does not end the spell.
        assert_eq!(watch.news(nobody.clone(), t0), None);
        assert_eq!(
            told(watch.read(Ok(nobody), lapse, t0)),
            Some(Watched::Nobody)
        );
    }

    #[test]
    fn a_read_that_finds_a_successor_about_to_lead_waits_before_it_says_nobody() {
        let t0 = Instant::now();
        let lapse = Duration::from_secs(2);
        let mut watch = Watch::default();
        let _ = watch.joined(None, Duration::from_secs(1), t0);
        let led = Seen {
            leader: leader(4).into_leader(),
            look_again: Some(Duration::from_secs(5)),
            handing_over: false,
            order: (4, false),
        };
        let _ = watch.read(Ok(led), lapse, t0);
        let handing_over = Seen {
            leader: None,
            look_again: None,
            handing_over: true,
            order: (4, true),
        };
        // What was reported holds until the read again, once the successor's requests had
        // their I/O timeout (the slack).
        let slack = Duration::from_secs(1);
        let again = t0 + slack;
        let word = watch.read(Ok(handing_over.clone()), lapse, t0);
        assert_eq!(word, Some(Word::Vouch((t0, again + slack))));
        assert_eq!(watch.due(), Some(again));
        // Still nobody then: now it says so.
        let word = watch.read(Ok(handing_over), lapse, again);
        assert!(
            matches!(word, Some(Word::Tell(Watched::Nobody, _))),
            "{word:?}"
        );
    }

    #[test]
    fn a_successor_whose_grant_lapses_first_is_read_again_at_its_end() {
        let t0 = Instant::now();
        let mut watch = Watch::default();
        let _ = watch.joined(None, Duration::from_secs(5), t0);
        let granted = Seen {
            leader: None,
            look_again: Some(Duration::from_millis(300)),
            handing_over: true,
            order: (4, true),
        };
        assert_eq!(watch.read(Ok(granted), Duration::from_secs(2), t0), None);
        assert_eq!(watch.due(), Some(t0 + Duration::from_millis(300)));
    }
}
