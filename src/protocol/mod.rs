//! The protocol core, with no I/O: key names, requests and their replies, and what a handle
//! knows about its lock over time. The drivers and connection backends build on this.

pub(crate) mod keys;
pub(crate) mod lease;
pub(crate) mod requests;
pub(crate) mod scripts;
