//! The queue engine's server side, in Rust: the rules of `scripts/queue_head.lua`,
//! `queue_acquire_fast.lua`, `queue_engine.lua`, `queue_acquire.lua`, `queue_release_fast.lua`,
//! `queue_release.lua`, `queue_extend.lua`, `queue_shrink.lua`, `queue_beat.lua`,
//! `queue_reset.lua` and `queue_reset_all.lua`, step for step where a step shows in the keys
//! (which holder a purge removes, where the grant pass stops, what the kept count says), so
//! that the differential test can hold each script's reply and writes against these. And the
//! leader election's, for the differential test only: `election_announce.lua`,
//! `election_read.lua` and `election_vacate.lua` with their `election_watchers.lua` (the
//! leader's record, KEYS[10], a watching process's heartbeat, the watch news in the inboxes).
//!
//! Leases without expiry (`lease ms` 0: the holder's score is `+inf`, [`INF`] here) are
//! modelled, for the differential test (the explored model's leases all expire).
//! Left out, as the model's clients never send them: ids that are their own process (an older
//! version's, without `@<process>`), corrupt keys. `queue_reset_all` is here for the
//! differential test only (the explored model's operator resets with `queue_reset`). Of the
//! keys' own expiries, the inboxes' and the beats' are kept (a key is gone once the clock is
//! past its expiry, as Redis has it).

use std::fmt;

/// Server time, ms (the model checker's from 0; the differential test's the real server's).
pub type Ms = u64;

/// The expiry of a holder without one (`lease ms` 0: its score is `+inf`), and the lease
/// left that `queue_acquire` answers it with (`-1`).
pub const INF: Ms = Ms::MAX;

/// A lease's expiry from `now`: none ([`INF`]) for a lease of 0, as the scripts have it.
pub fn expiry_after(now: Ms, lease: Ms) -> Ms {
    if lease == 0 {
        INF
    } else {
        now + lease
    }
}

/// What a script answers as a lease's ms left at `now`: at least 1, [`INF`] (-1) for none.
fn lease_left(expiry: Ms, now: Ms) -> Ms {
    match expiry {
        INF => INF,
        expiry => (expiry - now).max(1),
    }
}

/// An acquisition id: acquisition `epoch` of client (handle) `client`, which waits in
/// `process` (`w<client>.<epoch>@<process>` on a real server, which sorts as these do: a
/// client is in one process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Id {
    pub client: u8,
    pub epoch: u8,
    pub process: u8,
}

impl Id {
    /// The process whose heartbeat keeps it in line, and whose inbox gets its grants.
    pub fn process(self) -> usize {
        usize::from(self.process)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "w{}.{}@{}", self.client, self.epoch, self.process)
    }
}

/// How a holder's entry came to be: the model's own bookkeeping (no key has it), for the
/// property that a grant nobody claims ends with its grantee's heartbeat.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum How {
    /// Granted in the reply to the holder's own ask: its whole lease.
    Replied,
    /// Pushed to its process's inbox by another's script: held until its claim expiry.
    Pushed,
    /// Pushed, then claimed by the holder's extend.
    Claimed,
}

/// An entry of the holders' ZSET (KEYS[1]) with its "<units>:<token>" (KEYS[2]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub id: Id,
    pub expiry: Ms,
    pub units: u64,
    pub token: u64,
    pub how: How,
}

/// An entry of the queue (KEYS[3], by ticket) with its wants "<units>:<lease ms>" (KEYS[5]):
/// the scripts write and remove the two together.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Waiter {
    pub id: Id,
    pub ticket: u64,
    pub units: u64,
    pub lease: Ms,
}

/// An element of a process's inbox (KEYS[8] and the process id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mail {
    /// "<token>:<claim expiry>:<waiter>"
    Granted { token: u64, expiry: Ms, waiter: Id },
    /// "ask:<waiter>"
    Ask(Id),
    /// "watch:...": an election's news to a watching process (the explored model sends no
    /// election script, so its hubs never pop one).
    Watch(News),
}

/// The leader's record (an election's KEYS[10], a HASH), written by its announcement. Its
/// `info` is one of the differential test's texts (`&'static`: mail stays `Copy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Record {
    pub term: u64,
    pub id: Id,
    pub since: Ms,
    pub info: &'static str,
}

/// What `election_watchers.lua` tells a watching process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum News {
    /// "watch:<term>:<since>:<lease ms left, -1: none ([`INF`])>:<id's length>:<id><info>"
    Leader { record: Record, left: Ms },
    /// "watch:<fencing counter>": nobody leads.
    Nobody(u64),
}

/// `election_read.lua`'s reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Lead {
    /// {1, id, term, since, info, lease ms left (-1: none, [`INF`])}: an announced leader
    /// whose lease lasts.
    Leader { record: Record, left: Ms },
    /// {0, ms, waiting, fence}: nobody leads; `left` is an unannounced holder's lease left
    /// ([`INF`] for -1: nobody holds, or without expiry), `waiting` that a holder is about to
    /// announce or candidates wait in line, `over` the last term that is over.
    Nobody { left: Ms, waiting: bool, over: u64 },
}

/// A process's inbox: `mail[0]` is the list's head, where `LPUSH` puts and `BLPOP` takes,
/// then `reset_all`'s wake ("reset") when `wake` (the list's tail: `queue_reset_all` empties
/// the list before it pushes the wake, and everything after it is pushed at the head); gone at
/// `expiry` (when it holds anything).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Inbox {
    pub mail: Vec<Mail>,
    pub wake: bool,
    pub expiry: Ms,
}

impl Inbox {
    /// Whether the list exists.
    pub fn exists(&self) -> bool {
        self.wake || !self.mail.is_empty()
    }
}

/// An element `LPOP` takes from an inbox: mail, or `reset_all`'s wake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Element {
    Mail(Mail),
    Wake,
}

/// The kept count (KEYS[9]) "<units>:<fencing counter>:<holders>". Signed: a broken rule may
/// write a negative count, which `kept` then refuses as the script's pattern would.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Count {
    pub units: i64,
    pub fence: u64,
    pub size: i64,
}

/// One primitive's keys.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    /// By id (a ZSET's order by expiry is computed where a script reads it).
    pub holders: Vec<Holder>,
    /// By ticket.
    pub queue: Vec<Waiter>,
    /// KEYS[4], by process: when its waiters lapse.
    pub beats: Vec<Option<Ms>>,
    /// When KEYS[4] itself expires (`outlive`: never before a heartbeat written to it would
    /// lapse); its entries, lapsed by then, go with it, unpurged.
    pub beats_expiry: Ms,
    /// By process.
    pub inboxes: Vec<Inbox>,
    /// KEYS[6]: 0 when the key is gone.
    pub tickets: u64,
    /// KEYS[7].
    pub fence: u64,
    /// KEYS[9].
    pub count: Option<Count>,
    /// An election's KEYS[10]: no engine script reads or writes it (`queue_reset_all` leaves
    /// it too).
    pub record: Option<Record>,
    /// The microsecond of the server's clock a script runs at, which its fencing tokens are
    /// made of, when the differential test has learned it; else the first of the ms.
    pub clock_us: Option<Ms>,
}

/// Rules broken on purpose, one at a time, for the `catches_*` tests: each must be found by
/// the property it breaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// `load` keeps the units of the expired holders it purges in the count.
    pub count_not_decremented_on_purge: bool,
    /// `apply` pushes no `head:<id>` after a grant whose lease ends before its grantee's lapse.
    pub no_head_wake: bool,
    /// `apply` pushes no `head:<id>` to the waiter behind one that leaves before it lapses
    /// (the engine before the model checker found it).
    pub no_wake_behind_a_leaver: bool,
    /// `queue_acquire` times a waiter to the heartbeat of the entry just ahead even when that
    /// one lapsed (its heartbeat purged): no event, so no timer at all (the engine before the
    /// model checker found it).
    pub next_from_a_dead_waiter_ahead: bool,
    /// `apply` wakes behind a leaver only the entry just behind it, and only when that one is
    /// live and of another process (the engine before issue 35: a waiter of the leaver's
    /// process had no timer, and one behind a lapsed entry slept until its own).
    pub wake_behind_a_leaver_only_next_of_another_process: bool,
    /// Not the server's: the process's hub ignores its `Cover` (the hub before issue 35): the
    /// first waiter of a process in line keeps the server's timer uncapped (none behind a
    /// waiter of its own process), and when it leaves the line nobody of its process is told
    /// to take its timer over.
    pub no_cover: bool,
    /// Not the server's: a waiter takes a grant it reads from its mailbox as lasting its
    /// claim window from the last ask that found it waiting, or its date if later
    /// (`QueueWait::popped` before the model checker found it wrong).
    pub grant_read_late_counts_from_the_last_ask: bool,
    /// A pushed grant is held for the grantee's whole lease, not cut to its heartbeat.
    pub claim_ignores_lapse: bool,
    /// The grant pass goes on past a waiter that does not fit, instead of stopping there.
    pub grant_pass_skips_a_waiter_that_does_not_fit: bool,
    /// `queue_release` takes an expired holder's entry for a held one: its units are freed
    /// twice, once by the purge and once by the release.
    pub release_frees_an_expired_holder: bool,
}

/// How an acquire is sent: `ARGV[6]` and `ARGV[7]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Try,
    Wait { known: bool },
}

/// What `queue_acquire` is called with.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    pub id: Id,
    pub units: u64,
    pub capacity: u64,
    /// 0: no expiry.
    pub lease: Ms,
    pub lapse: Ms,
    pub mode: Mode,
}

/// `queue_acquire`'s reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Acquired {
    /// {1, token, lease ms left ([`INF`] for -1: no expiry)}
    Granted { token: u64, left: Ms },
    /// {0, position, next ms (-1: none), ticket}
    Waiting {
        position: u64,
        next: Option<Ms>,
        ticket: u64,
    },
    /// {0, 0, 0}
    Refused,
    /// {-2}
    Lapsed,
}

impl fmt::Display for Acquired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Acquired::Granted { token, left: INF } => {
                write!(f, "Granted{{token {token}, no expiry}}")
            }
            Acquired::Granted { token, left } => write!(f, "Granted{{token {token}, {left} ms}}"),
            Acquired::Waiting { position, next, .. } => match next {
                Some(next) => write!(f, "Waiting{{position {position}, next {next} ms}}"),
                None => write!(f, "Waiting{{position {position}, no next}}"),
            },
            Acquired::Refused => f.write_str("Refused"),
            Acquired::Lapsed => f.write_str("Lapsed"),
        }
    }
}

/// What a step of the trace says the server did; only written when asked for (the checker
/// explores without it).
pub struct Notes(pub Option<Vec<String>>);

impl Notes {
    pub fn note(&mut self, what: impl FnOnce() -> String) {
        if let Some(notes) = &mut self.0 {
            notes.push(what());
        }
    }
}

/// Whether a script ran the grant pass (or a fast part that stands for one): the model checks
/// the pass's order and that it left no waiter that fits.
pub type Passed = bool;

/// A grant planned by the pass.
struct Grant {
    id: Id,
    units: u64,
    lease: Ms,
    /// The grantee's heartbeat (a waiter from the line; none for the caller joining).
    beat: Option<Ms>,
    queued: bool,
}

/// `load`'s plan: what the purge removes and the units in use after it.
struct Load {
    used: i64,
    expired: Vec<Id>,
    dropped: Vec<Id>,
    /// Lapsed processes (from the beats) and waiters forgotten (`s.lapsed` holds both).
    lapsed_processes: Vec<usize>,
    forgotten: Vec<Id>,
    fence: u64,
    size: i64,
    changed: bool,
    /// A live waiter leaving the line (`s.leaving`): the waiter behind it is woken.
    leaving: Option<Id>,
}

impl Load {
    fn gone(&self, id: Id) -> bool {
        self.forgotten.contains(&id) || self.lapsed_processes.contains(&id.process())
    }

    fn forget(&mut self, id: Id) {
        if !self.forgotten.contains(&id) {
            self.forgotten.push(id);
        }
    }
}

impl Server {
    pub fn new(processes: usize) -> Server {
        Server {
            holders: Vec::new(),
            queue: Vec::new(),
            beats: vec![None; processes],
            beats_expiry: 0,
            inboxes: vec![Inbox::default(); processes],
            tickets: 0,
            fence: 0,
            count: None,
            record: None,
            clock_us: None,
        }
    }

    pub fn holder(&self, id: Id) -> Option<&Holder> {
        self.holders.iter().find(|h| h.id == id)
    }

    fn remove_holder(&mut self, id: Id) {
        self.holders.retain(|h| h.id != id);
    }

    fn set_holder(&mut self, holder: Holder) {
        match self.holders.iter_mut().find(|h| h.id == holder.id) {
            Some(h) => *h = holder,
            None => {
                let at = self.holders.partition_point(|h| h.id < holder.id);
                self.holders.insert(at, holder);
            }
        }
    }

    /// The first holder to expire (`ZRANGE holders 0 0`), by score then id.
    fn first_holder(&self) -> Option<&Holder> {
        self.holders.iter().min_by_key(|h| (h.expiry, h.id))
    }

    /// The kept count when it is current (queue_head.lua's `kept`).
    pub fn kept(&self) -> Option<i64> {
        let count = self.count?;
        let size = self.holders.len() as i64;
        (count.units >= 0 && count.fence == self.fence && count.size == size && count.units >= size)
            .then_some(count.units)
    }

    /// The units of every entry in the holders' ZSET, expired ones too: what the kept count
    /// must say when it is current.
    pub fn recount(&self) -> i64 {
        self.holders.iter().map(|h| h.units as i64).sum()
    }

    /// The units of the holders whose lease lasts past `now`.
    pub fn live_units(&self, now: Ms) -> u64 {
        self.holders
            .iter()
            .filter(|h| h.expiry > now)
            .map(|h| h.units)
            .sum()
    }

    /// Whether process `p`'s heartbeat lasts past `now`.
    pub fn beats_past(&self, p: usize, now: Ms) -> bool {
        self.beats[p].is_some_and(|b| b > now)
    }

    fn push_mail(&mut self, p: usize, mail: Mail, expire_in: Ms, now: Ms) {
        let inbox = &mut self.inboxes[p];
        inbox.mail.insert(0, mail);
        inbox.expiry = now + expire_in.max(1);
    }

    // ---- queue_engine.lua ----

    fn load(&self, now: Ms, bugs: &Bugs) -> Load {
        let size = self.holders.len() as i64;
        let mut s = Load {
            used: 0,
            expired: Vec::new(),
            dropped: Vec::new(),
            lapsed_processes: Vec::new(),
            forgotten: Vec::new(),
            fence: self.fence,
            size,
            changed: false,
            leaving: None,
        };
        let mut used = None;
        if size == 0 {
            used = Some(0);
        } else {
            s.expired = (self.holders.iter())
                .filter(|h| h.expiry <= now)
                .map(|h| h.id)
                .collect();
            if let Some(count) = self.kept() {
                let gone: i64 = (self.holders.iter())
                    .filter(|h| h.expiry <= now)
                    .map(|h| h.units as i64)
                    .sum();
                if gone <= count {
                    used = Some(if bugs.count_not_decremented_on_purge {
                        count
                    } else {
                        count - gone
                    });
                }
            }
        }
        s.used = used.unwrap_or_else(|| {
            s.changed = true;
            self.live_units(now) as i64
        });
        s.lapsed_processes = (0..self.beats.len())
            .filter(|&p| self.beats[p].is_some_and(|b| b <= now))
            .collect();
        s
    }

    /// What holder `id` holds while its lease lasts (`holding`).
    fn holding(&self, id: Id, now: Ms) -> Option<&Holder> {
        self.holder(id).filter(|h| h.expiry > now)
    }

    fn live_beat(&self, s: &Load, id: Id, now: Ms) -> Option<Ms> {
        if s.gone(id) {
            return None;
        }
        self.beats[id.process()].filter(|&b| b > now)
    }

    /// The first waiter in line with a ticket of `from` or more whose heartbeat is live, and
    /// that heartbeat (`wake_behind` in queue_engine.lua).
    fn first_live(&self, s: &Load, from: u64, now: Ms) -> Option<(Id, Ms)> {
        (self.queue.iter())
            .filter(|w| w.ticket >= from)
            .find_map(|w| self.live_beat(s, w.id, now).map(|beat| (w.id, beat)))
    }

    fn plan(
        &self,
        s: &mut Load,
        capacity: u64,
        tail: Option<(Id, u64, Ms)>,
        now: Ms,
        bugs: &Bugs,
    ) -> Vec<Grant> {
        let mut grants = Vec::new();
        for w in &self.queue {
            // `s.gone[id]`: the waiter itself was forgotten (a waiter of a lapsed process is
            // not, yet: `live_beat` finds it and it is forgotten here).
            if s.forgotten.contains(&w.id) {
                continue;
            }
            match self.live_beat(s, w.id, now) {
                None => s.forget(w.id),
                Some(beat) => {
                    if s.used + w.units as i64 > capacity as i64 {
                        if bugs.grant_pass_skips_a_waiter_that_does_not_fit {
                            continue;
                        }
                        return grants;
                    }
                    s.used += w.units as i64;
                    grants.push(Grant {
                        id: w.id,
                        units: w.units,
                        lease: w.lease,
                        beat: Some(beat),
                        queued: true,
                    });
                }
            }
        }
        if let Some((id, units, lease)) = tail
            && s.used + units as i64 <= capacity as i64
        {
            s.used += units as i64;
            grants.push(Grant {
                id,
                units,
                lease,
                beat: None,
                queued: false,
            });
        }
        grants
    }

    fn keep(&mut self, s: &Load, grants: &[Grant]) {
        let size = s.size - s.expired.len() as i64 - s.dropped.len() as i64 + grants.len() as i64;
        self.count = (size != 0).then_some(Count {
            units: s.used,
            fence: s.fence,
            size,
        });
    }

    fn apply(
        &mut self,
        s: &mut Load,
        grants: &mut [Grant],
        me: Option<Id>,
        now: Ms,
        bugs: &Bugs,
        notes: &mut Notes,
    ) -> Vec<(Id, u64)> {
        // The leaver's ticket: the first live waiter after it is woken once the line is
        // as this call leaves it.
        let leaving = s.leaving.and_then(|leaving| {
            let at = self.queue.iter().position(|w| w.id == leaving)?;
            Some((
                leaving,
                self.queue[at].ticket,
                self.queue.get(at + 1).map(|w| w.id),
            ))
        });
        for id in &s.expired {
            notes.note(|| format!("purges expired holder {id}"));
        }
        for id in s.expired.iter().chain(&s.dropped) {
            self.remove_holder(*id);
        }
        for &p in &s.lapsed_processes {
            notes.note(|| format!("purges process {p}'s lapsed heartbeat"));
            self.beats[p] = None;
            self.inboxes[p] = Inbox::default();
        }
        if self.beats.iter().all(Option::is_none) {
            self.beats_expiry = 0;
        }
        for id in &s.forgotten {
            if self.queue.iter().any(|w| w.id == *id) {
                notes.note(|| format!("{id} leaves the line"));
            }
        }
        self.queue.retain(|w| !s.forgotten.contains(&w.id));
        let mut left_queue = !s.lapsed_processes.is_empty() || !s.forgotten.is_empty();
        let mut short = false;
        let mut tokens = Vec::new();
        for g in grants.iter_mut() {
            if g.queued {
                left_queue = true;
                short = short || (g.lease > 0 && g.beat.is_some_and(|beat| now + g.lease < beat));
                self.queue.retain(|w| w.id != g.id);
            }
            let token = self.next_token(now);
            s.fence = token;
            let mut expiry = expiry_after(now, g.lease);
            let pushed = Some(g.id) != me;
            if pushed {
                let beat = g.beat.expect("only the caller joins unqueued");
                // A grant without expiry is claimed until the grantee's lapse.
                if !bugs.claim_ignores_lapse {
                    expiry = beat.min(expiry);
                }
            }
            self.set_holder(Holder {
                id: g.id,
                expiry,
                units: g.units,
                token,
                how: if pushed { How::Pushed } else { How::Replied },
            });
            if pushed {
                let beat = g.beat.unwrap_or(now);
                let waiter = g.id;
                notes.note(|| {
                    format!("grants {waiter} token {token}, pushed, claim until t={expiry}")
                });
                let mail = Mail::Granted {
                    token,
                    expiry,
                    waiter,
                };
                self.push_mail(waiter.process(), mail, beat.saturating_sub(now), now);
            } else {
                notes.note(|| format!("grants {} token {token} in the reply", g.id));
            }
            tokens.push((g.id, token));
        }
        let mut woken = None;
        if short
            && !bugs.no_head_wake
            && let Some((head, beat)) = self.first_live(s, 0, now)
        {
            notes.note(|| format!("head wake to {head}: a grant's lease ends before its lapse"));
            self.push_mail(head.process(), Mail::Ask(head), beat - now, now);
            woken = Some(head);
        }
        // The first live waiter behind one that left while live, of any process, past
        // lapsed entries (still in line: not granted just now).
        if let Some((leaving, ticket, next)) = leaving
            && !bugs.no_wake_behind_a_leaver
        {
            let behind = if bugs.wake_behind_a_leaver_only_next_of_another_process {
                next.filter(|b| b.process() != leaving.process())
                    .filter(|b| self.queue.iter().any(|w| w.id == *b))
                    .and_then(|b| self.live_beat(s, b, now).map(|beat| (b, beat)))
            } else {
                self.first_live(s, ticket + 1, now)
            };
            if let Some((behind, beat)) = behind
                && woken != Some(behind)
            {
                notes.note(|| format!("head wake to {behind}: {leaving} ahead of it left"));
                self.push_mail(behind.process(), Mail::Ask(behind), beat - now, now);
            }
        }
        if left_queue && self.queue.is_empty() {
            self.tickets = 0;
        }
        if s.changed || !s.expired.is_empty() || !s.dropped.is_empty() || !grants.is_empty() {
            self.keep(s, grants);
        }
        tokens
    }

    fn settle(
        &mut self,
        s: &mut Load,
        capacity: u64,
        me: Option<(Id, Option<(u64, Ms)>)>,
        now: Ms,
        bugs: &Bugs,
        notes: &mut Notes,
    ) -> Vec<(Id, u64)> {
        let tail = me.and_then(|(id, tail)| tail.map(|(units, lease)| (id, units, lease)));
        let mut grants = self.plan(s, capacity, tail, now, bugs);
        self.apply(s, &mut grants, me.map(|me| me.0), now, bugs, notes)
    }

    /// The caller of `c` joins the back of the line, with the next ticket.
    fn join(&mut self, c: &Call) {
        self.tickets += 1;
        self.queue.push(Waiter {
            id: c.id,
            ticket: self.tickets,
            units: c.units,
            lease: c.lease,
        });
    }

    /// Process `p`'s heartbeat moves on to `lapse` from `now`, never back.
    fn beat_on(&mut self, p: usize, lapse: Ms, now: Ms) {
        let beat = now + lapse;
        self.beats[p] = Some(self.beats[p].map_or(beat, |b| b.max(beat)));
        self.outlive_beats(lapse, now);
    }

    // ---- queue_acquire_fast.lua, then queue_acquire.lua ----

    fn acquire_fast(&mut self, c: &Call, now: Ms, bugs: &Bugs) -> Option<Acquired> {
        let waiting = self.queue.len();
        let wait = matches!(c.mode, Mode::Wait { .. });
        let known = c.mode == (Mode::Wait { known: true });
        let p = c.id.process();
        // A known process that lapsed, or one that joins after its process lapsed: the
        // engine's.
        if (known || wait && waiting > 0) && self.beats[p].map_or(known, |b| b <= now) {
            return None;
        }
        let size = self.holders.len() as i64;
        let mut used = 0;
        if size > 0 {
            if self.holder(c.id).is_some() {
                return None;
            }
            used = self.kept()?;
        }
        let fits = used + c.units as i64 <= c.capacity as i64;
        if (!fits || waiting > 0) && size > 0 && self.holders.iter().any(|h| h.expiry <= now) {
            return None;
        }
        // What times a waiter that joins (`None`: its own process does): the tail's lapse
        // when the tail is of another process, or with nobody in line the first holder's
        // expiry.
        let event = if waiting > 0 {
            if self.queue.iter().any(|w| w.id == c.id) {
                return None;
            }
            let head = &self.queue[0];
            if !self.beats_past(head.id.process(), now)
                || used + head.units as i64 <= c.capacity as i64
            {
                return None;
            }
            if !wait {
                return Some(Acquired::Refused);
            }
            // A grant pass that passes a head that does not fit is the engine's (a mutation).
            if bugs.grant_pass_skips_a_waiter_that_does_not_fit {
                return None;
            }
            // A tail that lapsed is the engine's.
            let tail = self.queue[waiting - 1].id.process();
            let beat = self.beats[tail].filter(|&b| b > now)?;
            (tail != p).then_some(beat)
        } else if !fits {
            if !wait {
                return Some(Acquired::Refused);
            }
            // A process new to the line whose heartbeat lapsed is the engine's.
            if self.beats[p].is_some_and(|b| b <= now) {
                return None;
            }
            self.first_holder().map(|h| h.expiry).filter(|&e| e != INF)
        } else {
            None
        };
        if waiting > 0 || !fits {
            self.join(c);
            self.beat_on(p, c.lapse, now);
            return Some(Acquired::Waiting {
                position: waiting as u64 + 1,
                next: event.map(|e| (e - now).max(1)),
                ticket: self.tickets,
            });
        }
        let token = self.next_token(now);
        self.set_holder(Holder {
            id: c.id,
            expiry: expiry_after(now, c.lease),
            units: c.units,
            token,
            how: How::Replied,
        });
        self.count = Some(Count {
            units: used + c.units as i64,
            fence: token,
            size: size + 1,
        });
        Some(Acquired::Granted {
            token,
            left: if c.lease > 0 { c.lease } else { INF },
        })
    }

    pub fn acquire(
        &mut self,
        c: &Call,
        now: Ms,
        bugs: &Bugs,
        notes: &mut Notes,
    ) -> (Acquired, Passed) {
        assert!(c.units >= 1 && c.units <= c.capacity && c.lapse >= 2);
        if let Some(reply) = self.acquire_fast(c, now, bugs) {
            if let Acquired::Granted { token, .. } = reply {
                notes.note(|| format!("grants {} token {token} (fast part)", c.id));
            }
            return (reply, true);
        }
        let mut s = self.load(now, bugs);
        if let Some(held) = self.holding(c.id, now) {
            let left = lease_left(held.expiry, now);
            return (
                Acquired::Granted {
                    token: held.token,
                    left,
                },
                false,
            );
        }
        let p = c.id.process();
        let live = self.live_beat(&s, c.id, now);
        if c.mode == (Mode::Wait { known: true }) && live.is_none() {
            return (Acquired::Lapsed, false);
        }
        let queued = live.is_some() && self.queue.iter().any(|w| w.id == c.id);
        // Not in line, it joins as the tail (`me`, granted in the reply if it fits).
        let tail = (!queued).then_some((c.units, c.lease));
        let tokens = self.settle(&mut s, c.capacity, Some((c.id, tail)), now, bugs, notes);
        if let Some(&(_, token)) = tokens.iter().find(|(id, _)| *id == c.id) {
            let left = if c.lease > 0 { c.lease } else { INF };
            return (Acquired::Granted { token, left }, true);
        }
        if !queued {
            if c.mode == Mode::Try {
                return (Acquired::Refused, true);
            }
            // `ZADD` of an id still in line (lapsed, behind where the pass stopped) moves it
            // to the back.
            self.queue.retain(|w| w.id != c.id);
            self.join(c);
        }
        self.beat_on(p, c.lapse, now);
        let at = (self.queue.iter().position(|w| w.id == c.id)).expect("queued");
        // The nearest live waiter ahead, passing over those whose heartbeat is gone.
        let ahead = if bugs.next_from_a_dead_waiter_ahead {
            at.checked_sub(1)
                .map(|a| (a, self.beats[self.queue[a].id.process()]))
        } else {
            // A process's heartbeat is read once a script (`s.beats`): the caller's process's
            // as `live_beat` read it for the caller, before the join moved it on. A waiter of
            // its process left in line from before the process lapsed is passed over here,
            // though the join made it live again for the scripts that come after.
            (0..at).rev().find_map(|a| {
                let w = self.queue[a].id;
                let beat = if w.process() == p && !s.forgotten.contains(&w) {
                    live
                } else {
                    self.live_beat(&s, w, now)
                };
                beat.map(|b| (a, Some(b)))
            })
        };
        let event = match ahead {
            // The first to expire, unless it has no expiry (then none has).
            None => self.first_holder().map(|h| h.expiry).filter(|&e| e != INF),
            Some((a, beat)) if self.queue[a].id.process() != p => beat,
            Some(_) => None,
        };
        let next = event.map(|e| e.saturating_sub(now).max(1));
        (
            Acquired::Waiting {
                position: at as u64 + 1,
                next,
                ticket: self.queue[at].ticket,
            },
            true,
        )
    }

    // ---- queue_release_fast.lua, then queue_release.lua ----

    fn release_fast(
        &mut self,
        id: Id,
        capacity: u64,
        now: Ms,
        bugs: &Bugs,
        notes: &mut Notes,
    ) -> Option<bool> {
        let waiting = self.queue.len();
        let held = self.holding(id, now)?.clone();
        let size = self.holders.len();
        if size == 1 && waiting == 0 {
            notes.note(|| format!("{id} gives back (fast part)"));
            self.holders.clear();
            self.count = None;
            return Some(true);
        }
        if self.holders.iter().any(|h| h.expiry <= now) {
            return None;
        }
        let used = self.kept()? - held.units as i64;
        // The head, when the units given back let it in and nobody behind it could follow;
        // a lapsed head, or one whose lease ends before its lapse, is the engine's.
        let mut grant = None;
        if let Some(head) = self.queue.first().cloned() {
            let beat = self.beats[head.id.process()].filter(|&b| b > now)?;
            let after = used + head.units as i64;
            let capacity = capacity as i64;
            if after < capacity && waiting > 1
                || after <= capacity && head.lease > 0 && now + head.lease < beat
            {
                return None;
            }
            if after <= capacity {
                grant = Some((head, beat));
            } else if bugs.grant_pass_skips_a_waiter_that_does_not_fit {
                // A grant pass that passes a head that does not fit: the engine's (a mutation).
                return None;
            }
        }
        self.remove_holder(id);
        let Some((head, beat)) = grant else {
            notes.note(|| format!("{id} gives back (fast part)"));
            self.count = (size > 1).then_some(Count {
                units: used,
                fence: self.fence,
                size: size as i64 - 1,
            });
            return Some(true);
        };
        self.queue.remove(0);
        if self.queue.is_empty() {
            self.tickets = 0;
        }
        let token = self.next_token(now);
        // Claimed until its lapse, which its lease outlasts (unless a mutation ignores it).
        let expiry = if bugs.claim_ignores_lapse {
            expiry_after(now, head.lease)
        } else {
            beat
        };
        self.set_holder(Holder {
            id: head.id,
            expiry,
            units: head.units,
            token,
            how: How::Pushed,
        });
        let waiter = head.id;
        notes.note(|| format!("{id} gives back (fast part)"));
        notes.note(|| format!("grants {waiter} token {token}, pushed, claim until t={expiry}"));
        let mail = Mail::Granted {
            token,
            expiry,
            waiter,
        };
        self.push_mail(head.id.process(), mail, beat - now, now);
        self.count = Some(Count {
            units: used + head.units as i64,
            fence: token,
            size: size as i64,
        });
        Some(true)
    }

    pub fn release(
        &mut self,
        id: Id,
        capacity: u64,
        now: Ms,
        bugs: &Bugs,
        notes: &mut Notes,
    ) -> (bool, Passed) {
        if let Some(released) = self.release_fast(id, capacity, now, bugs, notes) {
            return (released, true);
        }
        let mut s = self.load(now, bugs);
        let held = if bugs.release_frees_an_expired_holder {
            self.holder(id)
        } else {
            self.holding(id, now)
        };
        match held {
            Some(held) => {
                notes.note(|| format!("{id} gives back {} units", held.units));
                s.used -= held.units as i64;
                s.dropped.push(id);
            }
            None => {
                if self.live_beat(&s, id, now).is_some() {
                    s.leaving = Some(id);
                }
                s.forget(id);
            }
        }
        let held = held.is_some();
        self.settle(&mut s, capacity, None, now, bugs, notes);
        (held, true)
    }

    // ---- queue_extend.lua ----

    pub fn extend(&mut self, id: Id, lease: Ms, now: Ms) -> bool {
        match self.holders.iter_mut().find(|h| h.id == id) {
            Some(h) if h.expiry > now => {
                h.expiry = expiry_after(now, lease);
                if h.how == How::Pushed {
                    h.how = How::Claimed;
                }
                true
            }
            _ => false,
        }
    }

    // ---- queue_shrink.lua ----

    /// Holder `id` keeps `units` of what it holds (same token, same lease) and the units it
    /// let go are handed on: whether it held; `Err(held units)` when it would grow ("a holder
    /// cannot grow"), and then nothing is written.
    pub fn shrink(
        &mut self,
        id: Id,
        units: u64,
        capacity: u64,
        now: Ms,
        bugs: &Bugs,
        notes: &mut Notes,
    ) -> Result<bool, u64> {
        assert!(units >= 1);
        let mut s = self.load(now, bugs);
        let held = self.holding(id, now).cloned();
        if let Some(held) = &held {
            if units > held.units {
                return Err(held.units);
            }
            notes.note(|| format!("{id} keeps {units} of its {} units", held.units));
            s.used -= (held.units - units) as i64;
            s.changed = true;
        }
        self.settle(&mut s, capacity, None, now, bugs, notes);
        let Some(held) = held else {
            return Ok(false);
        };
        self.set_holder(Holder { units, ..held });
        Ok(true)
    }

    // ---- queue_beat.lua ----

    /// The server's time when process `p` was live, and its heartbeat then moved on.
    pub fn beat(&mut self, p: usize, lapse: Ms, now: Ms) -> Option<Ms> {
        let beat = self.beats[p].filter(|&b| b > now)?;
        self.beats[p] = Some(beat.max(now + lapse));
        self.outlive_beats(lapse, now);
        let inbox = &mut self.inboxes[p];
        if inbox.exists() {
            inbox.expiry = now + lapse;
        }
        Some(now)
    }

    // ---- queue_reset_all.lua ----

    /// The operator's reset of everything: every holder and waiter goes (the fencing counter
    /// stays), and the inbox of each of their processes holds only a wake, for
    /// `signal_expiry` ms. How many holders with a live lease it removed.
    pub fn reset_all(&mut self, signal_expiry: Ms, now: Ms, notes: &mut Notes) -> u64 {
        let live = self.holders.iter().filter(|h| h.expiry > now).count() as u64;
        let ids = (self.holders.iter().map(|h| h.id)).chain(self.queue.iter().map(|w| w.id));
        let processes: Vec<usize> = ids.map(Id::process).collect();
        for p in processes {
            self.inboxes[p] = Inbox {
                mail: Vec::new(),
                wake: true,
                expiry: now + signal_expiry,
            };
        }
        notes.note(|| format!("the reset of all removes {live} live holders"));
        self.holders.clear();
        self.queue.clear();
        self.beats.iter_mut().for_each(|b| *b = None);
        self.beats_expiry = 0;
        self.tickets = 0;
        self.count = None;
        live
    }

    // ---- queue_reset.lua ----

    /// Removes holder `id` (every live one with `None`) and hands the units on: the tokens
    /// it took away.
    pub fn reset(
        &mut self,
        id: Option<Id>,
        capacity: u64,
        now: Ms,
        bugs: &Bugs,
        notes: &mut Notes,
    ) -> (Vec<u64>, Passed) {
        let mut s = self.load(now, bugs);
        let removed: Vec<(Id, u64, u64)> = (self.holders.iter())
            .filter(|h| h.expiry > now && id.is_none_or(|id| id == h.id))
            .map(|h| (h.id, h.units, h.token))
            .collect();
        for &(id, units, token) in &removed {
            notes.note(|| format!("the reset removes {id} (token {token})"));
            s.used -= units as i64;
            s.dropped.push(id);
        }
        self.settle(&mut s, capacity, None, now, bugs, notes);
        (removed.iter().map(|r| r.2).collect(), true)
    }

    // ---- election_watchers.lua, election_announce.lua, election_read.lua, election_vacate.lua ----
    // Sent after queue_head.lua alone: no purge, so an expired holder or a lapsed heartbeat
    // stays, and is only read past.

    /// `tell_watchers`: `news` pushed to the inbox of every process whose heartbeat is live,
    /// which then lasts as long as that heartbeat.
    fn tell_watchers(&mut self, news: News, now: Ms) {
        for p in 0..self.beats.len() {
            if let Some(beat) = self.beats[p].filter(|&b| b > now) {
                self.push_mail(p, Mail::Watch(news), beat - now, now);
            }
        }
    }

    /// Leader `id`'s announcement of `term` with `info`: whether it holds that term (then
    /// the record is its own). A record of that term already there is kept as it is (its
    /// `since` too), and nobody is told again.
    pub fn announce(&mut self, id: Id, term: u64, info: &'static str, now: Ms) -> bool {
        let Some(held) = self.holding(id, now).filter(|h| h.token == term) else {
            return false;
        };
        let left = lease_left(held.expiry, now);
        if self.record.is_some_and(|r| r.term == term) {
            return true;
        }
        let record = Record {
            term,
            id,
            since: now,
            info,
        };
        self.record = Some(record);
        self.tell_watchers(News::Leader { record, left }, now);
        true
    }

    /// A read of the leader; by watching process `watcher`, its heartbeat for `lapse` more
    /// first (`ZADD GT`, which also brings a lapsed or purged process back).
    pub fn read_leader(&mut self, watcher: Option<usize>, lapse: Ms, now: Ms) -> Lead {
        if let Some(p) = watcher {
            let beat = now + lapse;
            self.beats[p] = Some(self.beats[p].map_or(beat, |b| b.max(beat)));
            self.outlive_beats(lapse, now);
        }
        // The first live holder by score, then id (`ZRANGEBYSCORE (now +inf LIMIT 0 1`).
        let first = (self.holders.iter())
            .filter(|h| h.expiry > now)
            .min_by_key(|h| (h.expiry, h.id));
        let Some(first) = first else {
            return Lead::Nobody {
                left: INF,
                waiting: !self.queue.is_empty(),
                over: self.fence,
            };
        };
        let left = lease_left(first.expiry, now);
        match self.record {
            Some(record) if record.id == first.id && record.term == first.token => {
                Lead::Leader { record, left }
            }
            _ => Lead::Nobody {
                left,
                waiting: true,
                over: first.token - 1,
            },
        }
    }

    /// Leaves the election without a leader after `term` ended (`None`: whichever), unless
    /// another record was written meanwhile or someone holds: whether it did. The watchers are
    /// told even when there was no record to delete.
    pub fn vacate(&mut self, term: Option<u64>, now: Ms) -> bool {
        if let Some(term) = term
            && self.record.is_none_or(|r| r.term != term)
        {
            return false;
        }
        if self.holders.iter().any(|h| h.expiry > now) {
            return false;
        }
        self.record = None;
        self.tell_watchers(News::Nobody(self.fence), now);
        true
    }

    /// The next fencing token, now the counter (`next_token` in queue_head.lua): a hybrid
    /// logical clock, the server's time in microseconds ([`clock_us`](Self::clock_us), or
    /// the ms's first), or the counter + 1 when that is not above it.
    fn next_token(&mut self, now: Ms) -> u64 {
        self.fence = (self.fence + 1).max(self.clock_us.unwrap_or(now * 1000));
        self.fence
    }

    /// The keys that expire as time passes: the inboxes, and the beats key. Redis has a key
    /// gone once its clock is past the expiry, not at it.
    pub fn expire_keys(&mut self, now: Ms) {
        for inbox in &mut self.inboxes {
            if inbox.exists() && inbox.expiry < now {
                *inbox = Inbox::default();
            }
        }
        if self.beats.iter().any(Option::is_some) && self.beats_expiry < now {
            self.beats.iter_mut().for_each(|b| *b = None);
            self.beats_expiry = 0;
        }
    }

    /// `outlive(4, lapse)`: the beats key lasts at least `lapse` more.
    fn outlive_beats(&mut self, lapse: Ms, now: Ms) {
        self.beats_expiry = self.beats_expiry.max(now + lapse);
    }

    /// `BLPOP` on process `p`'s inbox, when it has mail (the explored model sends no
    /// `reset_all`: a wake is left where it is).
    pub fn pop(&mut self, p: usize) -> Option<Mail> {
        let inbox = &mut self.inboxes[p];
        if inbox.mail.is_empty() {
            return None;
        }
        let mail = inbox.mail.remove(0);
        if !inbox.exists() {
            *inbox = Inbox::default();
        }
        Some(mail)
    }

    /// `LPOP` on process `p`'s inbox: its head, mail or the wake.
    pub fn pop_element(&mut self, p: usize) -> Option<Element> {
        if let Some(mail) = self.pop(p) {
            return Some(Element::Mail(mail));
        }
        let inbox = &mut self.inboxes[p];
        inbox.wake.then(|| {
            *inbox = Inbox::default();
            Element::Wake
        })
    }
}
