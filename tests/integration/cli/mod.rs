//! The `redis-lock` binary (built only with the `cli` feature).

pub(crate) mod commands;
pub(crate) mod election;
pub(crate) mod queues;
