//! The model group: the queue engine's and the plain lock's protocols, explored by a model
//! checker (stateright) over every interleaving within bounds, with the real client state
//! machines (`redis_blpop_lock::model`) and a Rust model of the server's scripts; and the model
//! checked against the real scripts on a `redis-server`. See docs/model.md.
//! `cargo test --all-features --test model`; `MODEL_DEPTH=<n>` explores deeper.

// The integration tests' support: a private redis-server for the differential tests.
#[allow(dead_code, unused_imports, unused_macros)]
#[path = "../integration/support/mod.rs"]
mod support;

mod lock;
mod queue;

/// splitmix64: the same sequence for a seed on every machine, for the differential tests'
/// random operations.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    /// A number below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}
