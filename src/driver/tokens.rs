//! The fencing tokens a handle was given, shared by its acquisitions, so that one given a
//! token that went back is told (see [`observe::fence_went_back`](crate::observe)).
//!
//! A token comes from a hybrid logical clock (`scripts/acquire.lua`, `queue_head.lua`): it
//! grows on a server that kept its counter, and past a counter that was lost as long as the
//! server's clock is ahead of the last grant. A token not above one seen before means both
//! failed: the counter was lost and the clock is behind.
//!
//! The check is against the tokens seen before the acquisition began, not after: a
//! semaphore's acquisitions run side by side, and one granted first may be read last.

use std::sync::atomic::{AtomicU64, Ordering};

/// The highest fencing token a handle's acquisitions were given (0: none yet).
#[derive(Debug, Default)]
pub(crate) struct TokensSeen(AtomicU64);

impl TokensSeen {
    /// The highest token seen so far: every token granted after now is above it.
    pub(crate) fn floor(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Records `token`, given to an acquisition that began when [`floor`](Self::floor) was
    /// `floor`: that floor when the token is not above it (it went back), else `None`.
    pub(crate) fn given(&self, token: u64, floor: u64) -> Option<u64> {
        self.0.fetch_max(token, Ordering::AcqRel);
        (floor > 0 && token <= floor).then_some(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::TokensSeen;

    #[test]
    fn a_token_is_judged_by_those_seen_before_its_acquisition_began() {
        let seen = TokensSeen::default();
        let (first, second) = (seen.floor(), seen.floor());
        // Two acquisitions side by side: the later grant read first.
        assert_eq!(seen.given(11, second), None);
        assert_eq!(seen.given(10, first), None);
        assert_eq!(seen.floor(), 11);
        // One that began after both saw 11: a token at or below it went back.
        assert_eq!(seen.given(11, seen.floor()), Some(11));
        assert_eq!(seen.given(5, 11), Some(11));
        assert_eq!(seen.given(12, 11), None);
    }
}
