//! One queue primitive at the hub, as the process uses it: its waiters' mailboxes, their
//! epoch (a new one when the process is found lapsed) and their heartbeat's schedule, and an
//! election's watches.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::watch::Watch;
use super::{Hub, Mailbox, State, Told};
use crate::protocol::cover::Cover;
use crate::protocol::keys::QueueKeys;

/// One primitive's waiters and watches of this process.
pub(super) struct Name {
    pub(super) keys: QueueKeys,
    /// The shortest lapse window of its waiters: a heartbeat every half of it.
    pub(super) lapse: Duration,
    pub(super) beat_due: Instant,
    /// Bumped when the process is found lapsed there: its waiters join again.
    pub(super) epoch: u64,
    /// Whether the process has joined its queue in this epoch, so that a heartbeat found
    /// gone means it lapsed.
    pub(super) joined: bool,
    pub(super) seats: HashMap<String, Arc<Mailbox>>,
    /// Which of its waiters in line times the others.
    pub(super) cover: Cover,
    /// An election's watchers of this process.
    pub(super) watch: Watch,
}

impl Name {
    fn new(keys: &QueueKeys, lapse: Duration) -> Name {
        Name {
            keys: keys.clone(),
            lapse,
            beat_due: Instant::now() + lapse / 2,
            epoch: 0,
            joined: false,
            seats: HashMap::new(),
            cover: Cover::default(),
            watch: Watch::default(),
        }
    }

    /// Whether no waiter and no watcher of this process is left here.
    pub(super) fn is_empty(&self) -> bool {
        self.seats.is_empty() && self.watch.is_empty()
    }

    /// Waiter `waiter` left the line (its wait is over, or it leaves to join again): the
    /// process's next waiter in line may have to take its timer over ([`Cover::left`]).
    pub(super) fn left(&mut self, waiter: &str) {
        let now = Instant::now();
        let next = self.cover.left(waiter, now, self.lapse);
        if let Some((mailbox, at)) = next.and_then(|(next, at)| Some((self.seats.get(&next)?, at)))
        {
            mailbox.tell(if at > now {
                Told::AskBy(at)
            } else {
                Told::AskAgain
            });
        }
    }

    /// The process lapsed here: a new epoch, whose waiters leave and join again.
    pub(super) fn lapsed(&mut self) {
        self.epoch += 1;
        self.joined = false;
        for mailbox in self.seats.values() {
            mailbox.tell(Told::AskAgain);
        }
        // Its heartbeat is gone, and with it the announcements: its watchers look again.
        self.watch.look_now();
    }
}

impl Hub {
    /// The entry of the primitive of `inbox`, made for `keys` if there is none; its lapse
    /// window the shortest of those asked for.
    pub(super) fn name_of<'s>(
        state: &'s mut State,
        inbox: &str,
        keys: &QueueKeys,
        lapse: Duration,
    ) -> &'s mut Name {
        let name = (state.names.entry(inbox.to_owned())).or_insert_with(|| Name::new(keys, lapse));
        name.lapse = name.lapse.min(lapse);
        name
    }

    /// Someone leaves the primitive of `inbox` (`leave` takes it out); the hub stops
    /// listening there once nobody of the process is left.
    pub(super) fn leave(&self, inbox: &str, leave: impl FnOnce(&mut Name)) {
        let mut state = self.state.lock();
        let Some(name) = state.names.get_mut(inbox) else {
            return;
        };
        leave(name);
        if name.is_empty() {
            state.names.remove(inbox);
            state.refused.remove(inbox);
        }
    }
}
