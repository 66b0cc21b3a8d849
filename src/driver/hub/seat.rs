//! The queue engine's waiters at the hub: a waiter's seat, from before its first ask to the
//! end of its wait, in its primitive's [`Name`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Hub, Mailbox};
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue::{Asked, Mode, Next};
use crate::protocol::request::Request;

/// A waiter's place at its hub, from before its first ask to the end of its wait.
pub(crate) struct Seat {
    hub: Arc<Hub>,
    inbox: String,
    waiter: String,
    epoch: u64,
    pub(crate) mailbox: Arc<Mailbox>,
    /// See [`Seat::wake`].
    wake: Option<Request>,
}

impl Seat {
    /// How the next ask goes: whether the process has joined in this seat's epoch.
    pub(crate) fn mode(&self) -> Mode {
        let state = self.hub.state.lock();
        let name = state.names.get(&self.inbox);
        let known = name.is_some_and(|n| n.joined && n.epoch == self.epoch);
        Mode::Wait { known }
    }

    /// Whether the process lapsed since this waiter joined: it must leave and join again.
    pub(crate) fn stale(&self) -> bool {
        let state = self.hub.state.lock();
        state
            .names
            .get(&self.inbox)
            .is_some_and(|n| n.epoch != self.epoch)
    }

    /// Joins the current epoch, once it has left the line: as for a waiter that left, the
    /// process's next waiter may take its timer over.
    pub(crate) fn rejoin(&mut self) {
        let mut state = self.hub.state.lock();
        if let Some(name) = state.names.get_mut(&self.inbox) {
            self.epoch = name.epoch;
            name.left(&self.waiter);
        }
    }

    /// The ask found it waiting: the process has joined.
    pub(crate) fn joined(&self) {
        let mut state = self.hub.state.lock();
        if let Some(name) = state
            .names
            .get_mut(&self.inbox)
            .filter(|n| n.epoch == self.epoch)
        {
            name.joined = true;
        }
    }

    /// The ask found its process lapsed.
    pub(crate) fn lapsed(&self) {
        let mut state = self.hub.state.lock();
        if let Some(name) = state
            .names
            .get_mut(&self.inbox)
            .filter(|n| n.epoch == self.epoch)
        {
            name.lapsed();
        }
    }

    /// The step after an ask at `now` that was answered `asked`, as its [`QueueWait`] says
    /// (`next`), bounded as the process's [`Cover`] says: the process's first waiter in line
    /// asks again within a lapse window, one behind it may wait until told.
    ///
    /// [`QueueWait`]: crate::protocol::queue::QueueWait
    /// [`Cover`]: crate::protocol::cover::Cover
    pub(crate) fn timed(&self, asked: &Asked, next: Next, now: Instant) -> Next {
        let (Asked::Waiting { ticket, .. }, Next::Block { until }) = (asked, next) else {
            return next;
        };
        let mut state = self.hub.state.lock();
        let Some(name) = state.names.get_mut(&self.inbox) else {
            return next;
        };
        let lapse = name.lapse;
        let until = name.cover.waits(&self.waiter, *ticket, until, now, lapse);
        Next::Block { until }
    }

    /// The wake its thread needs to listen on this seat's inbox too, once: for the waiter to
    /// send, on its own runtime.
    pub(crate) fn wake(&mut self) -> Option<Request> {
        self.wake.take()
    }

    /// It blocks: the hub's thread must run to bring its mail.
    pub(crate) fn block(&self) -> std::io::Result<()> {
        self.hub.start()
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.hub.leave(&self.inbox, |name| {
            name.seats.remove(&self.waiter);
            // Its wait is over (granted, left, stopped).
            name.left(&self.waiter);
        });
    }
}

impl Hub {
    /// A seat for waiter `waiter` (its id made with [`queue::waiter_id`]) in the queue of
    /// `keys`, whose entry lapses after `lapse` without a heartbeat.
    pub(crate) fn seat(self: &Arc<Hub>, keys: &QueueKeys, waiter: &str, lapse: Duration) -> Seat {
        let inbox = keys.signal(&self.process);
        let mailbox = Arc::new(Mailbox::default());
        let mut state = self.state.lock();
        let new_name = !state.names.contains_key(&inbox);
        let name = Hub::name_of(&mut state, &inbox, keys, lapse);
        name.seats.insert(waiter.to_owned(), Arc::clone(&mailbox));
        let epoch = name.epoch;
        let wake = self.wake(&state, new_name);
        Seat {
            hub: Arc::clone(self),
            inbox,
            waiter: waiter.to_owned(),
            epoch,
            mailbox,
            wake,
        }
    }
}
