//! The model group: the queue engine's and the plain lock's protocols, explored by a model
//! checker (stateright) over every interleaving within bounds, with the real client state
//! machines (`redis_blpop_lock::model`) and a Rust model of the server's scripts; and the model
//! checked against the real scripts on a `redis-server`. See docs/model.md.
//! `cargo test --all-features --test model`; `MODEL_DEPTH=<n>` explores deeper.

// The integration tests' support: a private redis-server for the differential tests.
#[allow(dead_code, unused_imports)]
#[path = "../integration/support/mod.rs"]
mod support;

mod lock;
mod queue;
