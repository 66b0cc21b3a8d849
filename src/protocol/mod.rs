//! The protocol core, with no I/O: key names, requests and their replies, and what a handle
//! knows about its lock over time. The drivers and connection backends build on this.

pub(crate) mod keys;
pub(crate) mod lease;
pub(crate) mod quorum;
pub(crate) mod redirect;
pub(crate) mod requests;
pub(crate) mod scripts;

/// A connection at a server: its `CLIENT ID` there, and which of the transport's servers it
/// is on (ids are only unique per server). The core keeps it to close a connection whose
/// request may still run; only the transport knows what it points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConnId {
    pub(crate) node: usize,
    pub(crate) id: u64,
}
