//! Clock readings and random numbers for records and soaks: one machine, one clock.

use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch, comparable across this machine's processes.
pub fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A small xorshift generator: enough for random hold times and kill intervals.
pub struct Rng(u64);

impl Rng {
    pub fn seeded(salt: u64) -> Rng {
        Rng((now_ns() as u64 ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
