//! Faults made for real: bad replies, stopped and killed processes, frozen servers, hostile input, chaos.

pub(crate) mod bounded_waits;
pub(crate) mod chaos;
pub(crate) mod eviction;
pub(crate) mod hostile_input;
pub(crate) mod injected;
pub(crate) mod replies;
pub(crate) mod seams_conn;
