//! The protocol core's client state machines, for the model checker (`tests/model`, see
//! `docs/model.md`): the waiter's way through the queue, the plain lock's wait and the lease a
//! handle believes, as the drivers use them, so that the model drives the real ones and not a copy. Hidden and not a
//! stable API: it exists only with the `model` feature.

pub use crate::protocol::cover::Cover;
pub use crate::protocol::election::{parse_news, Seen};
pub use crate::protocol::hub::{Event as HubEvent, Hub as HubMachine, Told};
pub use crate::protocol::lease::{renewal_due, valid_from_read, Attempting, Lease, Wait};
pub use crate::protocol::lock::Pttl;
pub use crate::protocol::lock_wait::{End as LockEnd, LockWait, Step as LockStep, Terms};
pub use crate::protocol::queue::{Ask, Asked, Next as QueueNext, QueueWait};
pub use crate::protocol::watch::{Heard, Watch, Word};

/// `election_read.lua`'s reply, parsed as the hub parses it (`None`: not well formed).
pub fn parse_read(reply: &redis::Value) -> Option<Seen> {
    use crate::protocol::keys::QueueKeys;
    use crate::protocol::primitive::Primitive;
    let keys = QueueKeys::new(Primitive::Election, "model");
    crate::protocol::election::parse_read(&keys, reply).ok()
}
