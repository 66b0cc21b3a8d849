//! The queue engine's waiters at the hub: a waiter's seat, from before its first ask to the
//! end of its wait. What each step means is the hub's machine's to say
//! ([`protocol::hub`](crate::protocol::hub)).

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
    /// Granted, it holds until then at the earliest unless it renews: see [`Seat::granted`].
    held_until: Option<Instant>,
}

impl Seat {
    /// How the next ask goes: whether the process has joined in this seat's epoch.
    pub(crate) fn mode(&self) -> Mode {
        let known = self.hub.state.lock().machine.known(&self.inbox, self.epoch);
        Mode::Wait { known }
    }

    /// Whether the process lapsed since this waiter joined: it must leave and join again.
    pub(crate) fn stale(&self) -> bool {
        self.hub.state.lock().machine.stale(&self.inbox, self.epoch)
    }

    /// Joins the current epoch, once it has left the line: as for a waiter that left, the
    /// process's next waiter may take its timer over. Its mail goes: the leave gave back any
    /// grant in it, and the ask that follows says where it stands now.
    pub(crate) fn rejoin(&mut self) {
        let mut state = self.hub.state.lock();
        if let Some(epoch) = (state.machine).rejoin(&self.inbox, &self.waiter, Instant::now()) {
            self.epoch = epoch;
        }
        // Under the hub's lock, after the machine knows: a grant popped from now on comes
        // undated.
        self.mailbox.take();
        state.pump();
    }

    /// The ask found it waiting: the process has joined.
    pub(crate) fn joined(&self) {
        let mut state = self.hub.state.lock();
        (state.machine).joined(&self.inbox, self.epoch, Instant::now());
    }

    /// The ask found its process lapsed.
    pub(crate) fn lapsed(&self) {
        let mut state = self.hub.state.lock();
        state.machine.found_lapsed(&self.inbox, self.epoch);
        state.pump();
    }

    /// The step after an ask sent at `sent` and answered `asked` at `now`, as its
    /// [`QueueWait`] says (`next`), bounded as the process's [`Cover`] says: the process's
    /// first waiter in line asks again within a lapse window, one behind it may wait until
    /// told.
    ///
    /// [`QueueWait`]: crate::protocol::queue::QueueWait
    /// [`Cover`]: crate::protocol::cover::Cover
    pub(crate) fn timed(&self, asked: &Asked, next: Next, sent: Instant, now: Instant) -> Next {
        let (Asked::Waiting { ticket, .. }, Next::Block { until }) = (asked, next) else {
            return next;
        };
        let mut state = self.hub.state.lock();
        let until = (state.machine).timed(&self.inbox, &self.waiter, *ticket, until, sent, now);
        Next::Block { until }
    }

    /// Its wait ends with a grant held until `valid_until` at the earliest unless renewed:
    /// should the holder stop before then, that is when the process's next waiter may go in.
    pub(crate) fn granted(mut self, valid_until: Option<Instant>) {
        self.held_until = valid_until;
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
        // Its wait is over (granted, left, stopped).
        let mut state = self.hub.state.lock();
        state.mailboxes.remove(&self.waiter);
        let now = Instant::now();
        (state.machine).unseat(&self.inbox, &self.waiter, self.held_until, now);
        if !state.machine.knows(&self.inbox) {
            state.refused.remove(&self.inbox);
        }
        state.pump();
    }
}

impl Hub {
    /// A seat for waiter `waiter` (its id made with [`queue::waiter_id`]) in the queue of
    /// `keys`, whose entry lapses after `lapse` without a heartbeat.
    ///
    /// [`queue::waiter_id`]: crate::protocol::queue::waiter_id
    pub(crate) fn seat(self: &Arc<Hub>, keys: &QueueKeys, waiter: &str, lapse: Duration) -> Seat {
        let inbox = keys.signal(&self.process);
        let mailbox = Arc::new(Mailbox::default());
        let mut state = self.state.lock();
        let new_name = !state.machine.knows(&inbox);
        let epoch = (state.machine).seat(&inbox, keys, waiter, lapse, Instant::now());
        state
            .mailboxes
            .insert(waiter.to_owned(), Arc::clone(&mailbox));
        let wake = self.wake(&state, new_name);
        Seat {
            hub: Arc::clone(self),
            inbox,
            waiter: waiter.to_owned(),
            epoch,
            mailbox,
            wake,
            held_until: None,
        }
    }
}
