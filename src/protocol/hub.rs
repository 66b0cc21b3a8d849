//! The process hub's decisions, with no I/O and time passed in: which queue primitives the
//! process waits on, its waiters' seats there and the epoch they joined in, when each
//! primitive's heartbeat is due and what its answer means, what a pop of the inbox means for
//! whom, the grant's dating, and who times whom in line ([`Cover`]).
//!
//! The hub's thread (`driver/hub`) only pumps it, as quinn pumps quinn-proto: it tells the
//! machine what happened (a seat taken or left, an ask's answer, a heartbeat's reply, an
//! element popped, the connection lost) and carries out what comes out of [`Hub::poll`]
//! (tell a waiter's mailbox, read an election's leader now). The model checker
//! (`tests/model`) drives this same machine.
//!
//! A plain lock's waiters and an election's watchers keep their own bookkeeping in the
//! driver; the machine only counts the watchers, so that a primitive is not forgotten while
//! one watches it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use super::cover::{Cover, HandedOver};
use super::queue::{self, Mail};

/// The soonest a failed heartbeat is sent again: a server that refused it, or a connection
/// that failed, gets a short pause, not a spin.
const BEAT_AGAIN_MIN: Duration = Duration::from_millis(10);

/// What a waiter is told.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Told {
    /// Granted, with this token, held at least until then unless claimed, where the hub
    /// could date the grant's claim window.
    Granted(u64, Option<Instant>),
    /// Ask again: a wake (`reset_all`), the hub's connection failed (a grant may have been
    /// lost with it), or its process lapsed (the ask then leaves and joins again).
    AskAgain,
    /// The server refused the `BLPOP` for this waiter's key.
    Refused,
    /// Ask again by then at the latest: the timer its process's first waiter in line left
    /// to it ([`Cover::left`]).
    AskBy(Instant),
}

/// What the hub's thread must do, as the machine decided.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Event {
    /// Tell a waiter something.
    Tell {
        /// The inbox of its primitive.
        inbox: String,
        /// Its id.
        waiter: String,
        /// What it is told.
        told: Told,
    },
    /// An election's watchers read the leader now: what the hub last heard of it may be out
    /// of date (a heartbeat gone, a wake, a connection lost).
    Look {
        /// The election's inbox.
        inbox: String,
    },
    /// An election's news popped from its inbox, for its watchers.
    News {
        /// The election's inbox.
        inbox: String,
        /// The element popped.
        news: Vec<u8>,
    },
}

/// A heartbeat due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Beat<K> {
    /// The primitive's inbox.
    pub inbox: String,
    /// What the driver keeps with it: its keys.
    pub keys: K,
    /// Its lapse window.
    pub lapse: Duration,
}

/// One primitive the process waits on or watches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Name<K> {
    keys: K,
    /// The shortest lapse window of its waiters: a heartbeat every half of it.
    lapse: Duration,
    beat_due: Instant,
    /// Bumped when the process is found lapsed there: its waiters join again.
    epoch: u64,
    /// Whether the process has joined its queue in this epoch, so that a heartbeat found
    /// gone means it lapsed.
    joined: bool,
    /// Its waiters' ids.
    seats: BTreeSet<String>,
    /// Its waiters that left the line to join again (a new epoch), under the same id: a
    /// grant to them popped since may be one their leave gave back, so it is not taken on
    /// its word (undated, the waiter asks, which reads what its id holds).
    rejoined: BTreeSet<String>,
    /// Which of its waiters in line times the others.
    cover: Cover,
    /// How many watchers of an election read it through this hub.
    watchers: usize,
}

/// The hub's bookkeeping of one process on one server (or hash slot), with `K` kept for each
/// primitive (its keys, for the driver's requests).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hub<K> {
    /// The primitives waited on or watched, by inbox key.
    names: BTreeMap<String, Name<K>>,
    /// The last heartbeat that found the process live: when it was sent, and the server's
    /// time (ms) when it ran, which came after. A grant's claim expiry, in server ms, is then
    /// no earlier than the send plus its distance from that server time. Forgotten with the
    /// connection, which may come back to another server.
    clock: Option<(Instant, u64)>,
    events: VecDeque<Event>,
}

impl<K> Default for Hub<K> {
    fn default() -> Self {
        Hub {
            names: BTreeMap::new(),
            clock: None,
            events: VecDeque::new(),
        }
    }
}

impl<K: Clone> Hub<K> {
    /// The next thing to do, until there is none.
    pub fn poll(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether the process waits on or watches nothing here: the thread may stop.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The inboxes to listen on.
    pub fn inboxes(&self) -> impl Iterator<Item = &str> {
        self.names.keys().map(String::as_str)
    }

    /// Whether `inbox` is one.
    pub fn knows(&self, inbox: &str) -> bool {
        self.names.contains_key(inbox)
    }

    /// The keys and lapse window of the primitive of `inbox`.
    pub fn name(&self, inbox: &str) -> Option<(&K, Duration)> {
        (self.names.get(inbox)).map(|name| (&name.keys, name.lapse))
    }

    /// The entry of the primitive of `inbox` at `now`, made for `keys` if there is none; its
    /// lapse window the shortest of those asked for.
    fn name_of(&mut self, inbox: &str, keys: &K, lapse: Duration, now: Instant) -> &mut Name<K> {
        let name = (self.names.entry(inbox.to_owned())).or_insert_with(|| Name {
            keys: keys.clone(),
            lapse,
            beat_due: now + lapse / 2,
            epoch: 0,
            joined: false,
            seats: BTreeSet::new(),
            rejoined: BTreeSet::new(),
            cover: Cover::default(),
            watchers: 0,
        });
        name.lapse = name.lapse.min(lapse);
        name
    }

    /// Forgets the primitive of `inbox` once nobody of the process waits on or watches it.
    fn forget_if_empty(&mut self, inbox: &str) {
        if (self.names.get(inbox)).is_some_and(|n| n.seats.is_empty() && n.watchers == 0) {
            self.names.remove(inbox);
        }
    }

    /// Waiter `waiter` takes a seat in the line of `keys` (inbox `inbox`), whose entries
    /// lapse after `lapse` without a heartbeat: the epoch it joins in.
    pub fn seat(
        &mut self,
        inbox: &str,
        keys: &K,
        waiter: &str,
        lapse: Duration,
        now: Instant,
    ) -> u64 {
        let name = self.name_of(inbox, keys, lapse, now);
        name.seats.insert(waiter.to_owned());
        name.epoch
    }

    /// Waiter `waiter`'s wait is over at `now` (granted, left, stopped): it leaves its seat.
    /// Granted, it holds until `held_until` at the earliest unless it renews (`None`: not
    /// granted, or no expiry): the event that may let the process's next waiter in.
    pub fn unseat(&mut self, inbox: &str, waiter: &str, held_until: Option<Instant>, now: Instant) {
        let Some(name) = self.names.get_mut(inbox) else {
            return;
        };
        name.seats.remove(waiter);
        name.rejoined.remove(waiter);
        self.left(inbox, waiter, held_until, now);
        self.forget_if_empty(inbox);
    }

    /// Waiter `waiter` left the line to join again in the current epoch: the epoch it joins.
    pub fn rejoin(&mut self, inbox: &str, waiter: &str, now: Instant) -> Option<u64> {
        let name = self.names.get_mut(inbox)?;
        name.rejoined.insert(waiter.to_owned());
        let epoch = name.epoch;
        self.left(inbox, waiter, None, now);
        Some(epoch)
    }

    /// Waiter `waiter` left the line: the process's next waiter in line may have to take its
    /// timer over ([`Cover::left`]), or the end of what it was granted, if that comes first.
    fn left(&mut self, inbox: &str, waiter: &str, held_until: Option<Instant>, now: Instant) {
        let Some(name) = self.names.get_mut(inbox) else {
            return;
        };
        let handed = name.cover.left(waiter, held_until, now);
        self.hand_over(inbox, handed, now);
    }

    /// Tells the waiter that takes a timer over, if any, when to ask.
    fn hand_over(&mut self, inbox: &str, handed: HandedOver, now: Instant) {
        let Some((next, at)) = handed else {
            return;
        };
        if self
            .names
            .get(inbox)
            .is_some_and(|n| n.seats.contains(&next))
        {
            let told = if at > now {
                Told::AskBy(at)
            } else {
                Told::AskAgain
            };
            self.tell(inbox, next, told);
        }
    }

    fn tell(&mut self, inbox: &str, waiter: String, told: Told) {
        self.events.push_back(Event::Tell {
            inbox: inbox.to_owned(),
            waiter,
            told,
        });
    }

    /// Whether the next ask of a waiter seated in `epoch` finds its process known: joined in
    /// that epoch.
    pub fn known(&self, inbox: &str, epoch: u64) -> bool {
        (self.names.get(inbox)).is_some_and(|n| n.joined && n.epoch == epoch)
    }

    /// Whether the process lapsed since a waiter joined in `epoch`: it must leave and join
    /// again.
    pub fn stale(&self, inbox: &str, epoch: u64) -> bool {
        (self.names.get(inbox)).is_some_and(|n| n.epoch != epoch)
    }

    /// An ask of a waiter seated in `epoch` found it waiting at `now`: the process has
    /// joined. Until a heartbeat has read the server's clock, a grant comes undated and costs
    /// its waiter another ask ([`QueueWait::popped`]), so the first heartbeat is due now, not
    /// half a lapse window after the first seat.
    ///
    /// [`QueueWait::popped`]: crate::protocol::queue::QueueWait::popped
    pub fn joined(&mut self, inbox: &str, epoch: u64, now: Instant) {
        let undated = self.clock.is_none();
        if let Some(name) = self.names.get_mut(inbox).filter(|n| n.epoch == epoch) {
            name.joined = true;
            if undated {
                name.beat_due = name.beat_due.min(now);
            }
        }
    }

    /// An ask of a waiter seated in `epoch` found its process lapsed.
    pub fn found_lapsed(&mut self, inbox: &str, epoch: u64) {
        if self.names.get(inbox).is_some_and(|n| n.epoch == epoch) {
            self.lapsed(inbox);
        }
    }

    /// The process lapsed at `inbox`: a new epoch, whose waiters leave and join again.
    fn lapsed(&mut self, inbox: &str) {
        let Some(name) = self.names.get_mut(inbox) else {
            return;
        };
        name.epoch += 1;
        name.joined = false;
        self.ask_again(Some(inbox));
    }

    /// Waiter `waiter`, whose ask sent at `sent` was answered at `now`, waits with `ticket`
    /// until `until` by itself (`None`: until told): when it must ask again, as the
    /// process's [`Cover`] bounds it.
    pub fn timed(
        &mut self,
        inbox: &str,
        waiter: &str,
        ticket: u64,
        until: Option<Instant>,
        sent: Instant,
        now: Instant,
    ) -> Option<Instant> {
        let Some(name) = self.names.get_mut(inbox) else {
            return until;
        };
        let (until, handed) = name
            .cover
            .waits(waiter, ticket, until, sent, now, name.lapse);
        self.hand_over(inbox, handed, now);
        until
    }

    /// Every waiter of `inbox` (of every primitive, with `None`) asks again, and the
    /// watchers there read the leader.
    pub fn ask_again(&mut self, inbox: Option<&str>) {
        let mut events = Vec::new();
        for (key, name) in &self.names {
            if inbox.is_none_or(|i| i == key) {
                for waiter in &name.seats {
                    events.push(Event::Tell {
                        inbox: key.clone(),
                        waiter: waiter.clone(),
                        told: Told::AskAgain,
                    });
                }
                events.push(Event::Look { inbox: key.clone() });
            }
        }
        self.events.extend(events);
    }

    /// The connection failed or was closed: a grant or a word may have been lost with it, so
    /// every waiter asks again; and the next connection may reach another server (a
    /// failover), on another clock.
    pub fn lost(&mut self) {
        self.closed();
        self.ask_again(None);
    }

    /// The connection was closed: grants are no longer dated by its server's clock.
    pub fn closed(&mut self) {
        self.clock = None;
    }

    /// `element` was popped from `inbox`.
    pub fn popped(&mut self, inbox: &str, element: &[u8]) {
        if !self.names.contains_key(inbox) || element == b"hub" {
            return;
        }
        match queue::parse_mail(element) {
            Mail::Granted {
                token,
                expiry,
                waiter,
            } => {
                // A waiter no longer seated gave its grant back when it left; one that
                // joined again may have given this one back as it did.
                let name = &self.names[inbox];
                if name.seats.contains(&waiter) {
                    let given_back = name.rejoined.contains(&waiter);
                    let dated = self.date(expiry).filter(|_| !given_back);
                    self.tell(inbox, waiter, Told::Granted(token, dated));
                }
            }
            Mail::Wake => self.ask_again(Some(inbox)),
            Mail::Ask(waiter) => {
                if self.names[inbox].seats.contains(&waiter) {
                    self.tell(inbox, waiter, Told::AskAgain);
                }
            }
            Mail::Watch(news) => self.events.push_back(Event::News {
                inbox: inbox.to_owned(),
                news,
            }),
        }
    }

    /// The earliest instant a claim expiry of `expiry` (server ms) can be, by the last live
    /// heartbeat; `None` before the first.
    fn date(&self, expiry: u64) -> Option<Instant> {
        let (sent, server_ms) = self.clock?;
        let ahead = Duration::from_millis(expiry.checked_sub(server_ms)?);
        sent.checked_add(ahead)
    }

    /// When the next heartbeat is due.
    pub fn next_beat(&self) -> Option<Instant> {
        self.names.values().map(|n| n.beat_due).min()
    }

    /// The heartbeats due at `now`.
    pub fn beats_due(&self, now: Instant) -> Vec<Beat<K>> {
        (self.names.iter())
            .filter(|(_, n)| n.beat_due <= now)
            .map(|(inbox, n)| Beat {
                inbox: inbox.clone(),
                keys: n.keys.clone(),
                lapse: n.lapse,
            })
            .collect()
    }

    /// The heartbeat of `inbox` sent at `sent` came back at `now`: the server's time when it
    /// found the process live, `None` when it found it gone, or an error (`Err`). A process
    /// found gone after it joined has lapsed: a new epoch.
    pub fn beaten(
        &mut self,
        inbox: &str,
        sent: Instant,
        live: Result<Option<u64>, ()>,
        now: Instant,
    ) {
        if let Ok(Some(server_ms)) = live {
            self.clock = Some((sent, server_ms));
        }
        let Some(name) = self.names.get_mut(inbox) else {
            return;
        };
        match live {
            Ok(Some(_)) => name.beat_due = now + name.lapse / 2,
            // Never joined in this epoch: nothing to prove yet, but a watcher's read makes
            // its heartbeat again.
            Ok(None) if !name.joined => {
                name.beat_due = now + name.lapse / 2;
                self.events.push_back(Event::Look {
                    inbox: inbox.to_owned(),
                });
            }
            Ok(None) => {
                name.beat_due = now + name.lapse / 2;
                self.lapsed(inbox);
            }
            Err(()) => name.beat_due = now + BEAT_AGAIN_MIN.max(name.lapse / 20),
        }
    }

    /// A watcher of the election of `keys` (inbox `inbox`) reads through this hub.
    pub fn watch(&mut self, inbox: &str, keys: &K, lapse: Duration, now: Instant) {
        self.name_of(inbox, keys, lapse, now).watchers += 1;
    }

    /// A watcher of `inbox` is gone.
    pub fn unwatch(&mut self, inbox: &str) {
        if let Some(name) = self.names.get_mut(inbox) {
            name.watchers = name.watchers.saturating_sub(1);
        }
        self.forget_if_empty(inbox);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAPSE: Duration = Duration::from_secs(2);

    fn told(hub: &mut Hub<()>) -> Vec<(String, Told)> {
        std::iter::from_fn(|| hub.poll())
            .filter_map(|event| match event {
                Event::Tell { waiter, told, .. } => Some((waiter, told)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_primitive_is_kept_while_a_waiter_or_a_watcher_is_there() {
        let t0 = Instant::now();
        let mut hub = Hub::default();
        hub.seat("q", &(), "a", LAPSE, t0);
        hub.watch("q", &(), LAPSE, t0);
        hub.unseat("q", "a", None, t0);
        assert!(hub.knows("q"));
        hub.unwatch("q");
        assert!(hub.is_empty());
        assert_eq!(hub, Hub::default());
    }

    #[test]
    fn a_heartbeat_that_finds_a_joined_process_gone_starts_a_new_epoch() {
        let t0 = Instant::now();
        let mut hub = Hub::default();
        let epoch = hub.seat("q", &(), "a", LAPSE, t0);
        assert_eq!(hub.next_beat(), Some(t0 + LAPSE / 2));
        assert!(hub.beats_due(t0).is_empty());
        // Not joined yet: a heartbeat found gone proves nothing.
        hub.beaten("q", t0, Ok(None), t0 + LAPSE / 2);
        assert!(!hub.stale("q", epoch) && told(&mut hub).is_empty());
        hub.joined("q", epoch, t0);
        assert!(hub.known("q", epoch));
        hub.beaten("q", t0, Ok(None), t0 + LAPSE);
        assert!(hub.stale("q", epoch) && !hub.known("q", epoch + 1));
        assert_eq!(told(&mut hub), [("a".to_owned(), Told::AskAgain)]);
        assert_eq!(hub.rejoin("q", "a", t0 + LAPSE), Some(epoch + 1));
    }

    #[test]
    fn the_first_heartbeat_is_due_once_the_process_joins_so_that_its_grants_are_dated() {
        let t0 = Instant::now();
        let mut hub = Hub::default();
        let epoch = hub.seat("q", &(), "a", LAPSE, t0);
        assert_eq!(hub.next_beat(), Some(t0 + LAPSE / 2));
        let t1 = t0 + Duration::from_millis(5);
        hub.joined("q", epoch, t1);
        assert_eq!(hub.next_beat(), Some(t1));
        // Once a heartbeat has read the server's clock, a join moves nothing.
        hub.beaten("q", t1, Ok(Some(1_000)), t1);
        hub.seat("q", &(), "b", LAPSE, t1);
        hub.joined("q", epoch, t1 + Duration::from_millis(1));
        assert_eq!(hub.next_beat(), Some(t1 + LAPSE / 2));
    }

    #[test]
    fn a_grant_is_dated_by_the_last_live_heartbeat_and_only_to_a_waiter_seated() {
        let t0 = Instant::now();
        let mut hub = Hub::default();
        hub.seat("q", &(), "a", LAPSE, t0);
        // Before any heartbeat, a grant cannot be dated.
        hub.popped("q", b"7:5000:a");
        assert_eq!(told(&mut hub), [("a".to_owned(), Told::Granted(7, None))]);
        // The server ran the heartbeat sent at t0 at its 1000 ms.
        hub.beaten("q", t0, Ok(Some(1_000)), t0);
        hub.popped("q", b"8:5000:a");
        hub.popped("q", b"9:5000:gone");
        let dated = t0 + Duration::from_secs(4);
        assert_eq!(
            told(&mut hub),
            [("a".to_owned(), Told::Granted(8, Some(dated)))]
        );
        // The connection closed: the next may reach another server, on another clock.
        hub.closed();
        hub.popped("q", b"10:5000:a");
        assert_eq!(told(&mut hub), [("a".to_owned(), Told::Granted(10, None))]);
    }

    #[test]
    fn a_grant_popped_after_its_waiter_joined_again_is_not_taken_on_its_word() {
        let t0 = Instant::now();
        let mut hub = Hub::default();
        hub.seat("q", &(), "a", LAPSE, t0);
        hub.beaten("q", t0, Ok(Some(1_000)), t0);
        hub.joined("q", 0, t0);
        // Its process lapsed; a grant to its stale entry was pushed before it left the line
        // (which gave the grant back) and joined again, under the same id.
        hub.beaten("q", t0, Ok(None), t0);
        let _ = told(&mut hub);
        assert_eq!(hub.rejoin("q", "a", t0), Some(1));
        hub.popped("q", b"2:5000:a");
        assert_eq!(told(&mut hub), [("a".to_owned(), Told::Granted(2, None))]);
    }

    #[test]
    fn a_first_waiter_granted_hands_the_end_of_its_grant_to_its_process_next_waiter() {
        let t0 = Instant::now();
        let mut hub = Hub::default();
        hub.seat("q", &(), "a", LAPSE, t0);
        hub.seat("q", &(), "b", LAPSE, t0);
        assert_eq!(hub.timed("q", "a", 1, None, t0, t0), Some(t0 + LAPSE));
        assert_eq!(hub.timed("q", "b", 2, None, t0, t0), None);
        let held_until = t0 + Duration::from_millis(300);
        hub.unseat("q", "a", Some(held_until), t0);
        assert_eq!(told(&mut hub), [("b".to_owned(), Told::AskBy(held_until))]);
    }

    #[test]
    fn a_lost_connection_makes_every_waiter_ask_again_and_every_watch_look() {
        let t0 = Instant::now();
        let mut hub = Hub::default();
        hub.seat("q", &(), "a", LAPSE, t0);
        hub.seat("r", &(), "b", LAPSE, t0);
        hub.lost();
        let events: Vec<Event> = std::iter::from_fn(|| hub.poll()).collect();
        let look = |inbox: &str| Event::Look {
            inbox: inbox.into(),
        };
        let ask = |inbox: &str, waiter: &str| Event::Tell {
            inbox: inbox.into(),
            waiter: waiter.into(),
            told: Told::AskAgain,
        };
        assert_eq!(events, [ask("q", "a"), look("q"), ask("r", "b"), look("r")]);
    }
}
