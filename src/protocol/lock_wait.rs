//! The plain lock's wait, python-redis-lock's: every decision of one acquire call, time passed
//! in. The driver (`driver/acquire.rs`) does what each [`Step`] says and tells the machine what
//! came of it, as [`QueueWait`](super::queue::QueueWait) is for the queue engine's line; the
//! model checker drives this same machine (`tests/model/lock.rs`).
//!
//! A call tries once. Found busy, it blocks for a release's signal until the holder's expiry
//! (+ 1 ms), its deadline or [`MAX_BLOCK`], whichever is first, and tries again. A lock it takes
//! after a wait is confirmed by an extend when its try's count leaves too little of it (see
//! [`Attempting::needs_confirming`]), or when replicas are to acknowledge a take found by a read.
//! At its end (the deadline, a cancel) it lands the try its process's hub may carry for it
//! behind the hub's `BLPOP`: what that try took is the call's, to keep, or on a cancel to give
//! back.

use std::time::{Duration, Instant};

use super::lease::{Attempting, Wait};
use super::lock::Pttl;

/// The longest single `BLPOP`. A waiter that missed its wake-up signal (it was paused for longer
/// than `signal_expire`, or its connection dropped just as the signal came) tries the lock again
/// after at most this long, even when the holder has no expiry and the caller no timeout.
pub(crate) const MAX_BLOCK: Duration = Duration::from_secs(5);

/// How many more times a single try goes again when it found the lock free mid-try.
const FREE_RETRIES: u8 = 2;

/// What a lock taken needs before it counts, as the handle's settings say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Terms {
    /// The lock's expiry; `None`: it has none, and there is nothing to confirm.
    pub expire: Option<Duration>,
    /// Whether its holder renews it.
    pub renewing: bool,
    /// Whether replicas are to acknowledge it (`WAIT`).
    pub replicated: bool,
}

/// One acquire call of the plain lock.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LockWait {
    wait: Wait,
    terms: Terms,
    free_retries: u8,
    /// It has blocked for a signal: a lock it takes from then on was handed over by a release.
    woken: bool,
}

/// What the call does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// One try at the lock.
    Try {
        /// It follows a wait (see [`Attempting`]).
        woken: bool,
    },
    /// Block for a release's signal, then try: the first block takes a place among the
    /// process's waiters on the lock, kept until the call ends.
    Block {
        /// When to stop waiting and try: the holder's expiry, the deadline or the longest block.
        until: Instant,
    },
    /// Land the try the process's hub carries behind its `BLPOP`: wake the hub and take its
    /// reply, which says what the call came to.
    Land,
    /// The lock is the caller's.
    Hand {
        /// Until when it lasts at the earliest (`None`: no expiry).
        valid_until: Option<Instant>,
        /// Its fencing token, if it has one.
        token: Option<u64>,
        /// It was handed over by a release, after a wait.
        handed_over: bool,
    },
    /// Taken just as the call was cancelled: give it back (which passes the wake-up on), and
    /// end [`End::Cancelled`].
    GiveBack,
    /// Over without the lock: leave the process's waiters (passing on a signal told and not
    /// acted on), then end so.
    End(End),
}

/// How a call that did not get the lock ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum End {
    /// Its wait ended first.
    TimedOut,
    /// Its cancel token was cancelled.
    Cancelled,
    /// The lock holds the handle's own id: it holds it already.
    AlreadyAcquired,
}

impl LockWait {
    /// A call that waits as `wait` says for a lock taken on `terms`.
    pub fn new(wait: Wait, terms: Terms) -> Self {
        LockWait {
            wait,
            terms,
            free_retries: FREE_RETRIES,
            woken: false,
        }
    }

    /// The first step at `now`. `behind`: a waiter of this process was just told the lock is
    /// free, or waits for the hub to bring it, with its timer (the holder's expiry it knows,
    /// if any). A call that waits then queues behind it instead of overtaking it, keeping the
    /// process's waiters in arrival order, timed as they are; a single try tries.
    pub fn start(&mut self, behind: Option<Option<Instant>>, now: Instant) -> Step {
        match behind {
            Some(timer) if self.wait != Wait::Never => {
                let left = |t: Instant| Pttl::Left(t.saturating_duration_since(now));
                self.busy(false, timer.map_or(Pttl::Forever, left), now, false, false)
            }
            _ => Step::Try { woken: false },
        }
    }

    /// A try whose reply came at `at` found the lock busy for `pttl`, held by the handle
    /// itself if `ours`. `cancelled`: the call was cancelled meanwhile; `carried`: the hub
    /// carries a try for it, which is landed before the call ends, and what it took kept.
    ///
    /// A single try that found the lock free by the time it looked (the holder let go between
    /// its commands, or a lost reply was settled by reading) is not over yet: it goes again, a
    /// bounded number of times.
    pub fn busy(
        &mut self,
        ours: bool,
        pttl: Pttl,
        at: Instant,
        cancelled: bool,
        carried: bool,
    ) -> Step {
        if ours {
            return Step::End(End::AlreadyAcquired);
        }
        let next = match self.wait {
            Wait::Never if pttl == Pttl::Gone && self.free_retries > 0 => {
                self.free_retries -= 1;
                Step::Try { woken: false }
            }
            Wait::Never => Step::End(End::TimedOut),
            Wait::Until(deadline) => block(at, Some(deadline), pttl),
            Wait::Forever => block(at, None, pttl),
        };
        match next {
            _ if (cancelled || next == Step::End(End::TimedOut)) && carried => Step::Land,
            _ if cancelled => Step::End(End::Cancelled),
            Step::Block { .. } => {
                self.woken = true;
                next
            }
            next => next,
        }
    }

    /// A block ended with nothing carried for it: `told` a signal (or that one may be lost),
    /// or at its time. Cancelled while it was not told, it ends; otherwise it tries.
    pub fn woke(&mut self, told: bool, cancelled: bool) -> Step {
        if cancelled && !told {
            return Step::End(End::Cancelled);
        }
        Step::Try { woken: true }
    }

    /// A try sent as `attempt` says took the lock, as its reply showed at `now` (its replicas'
    /// acknowledgement in it when `acknowledged`; a take found by a read has none): whether an
    /// extend is to confirm it before it counts (its replicas' `WAIT` riding with it).
    #[must_use]
    pub fn taken(&self, attempt: &Attempting, acknowledged: bool, now: Instant) -> bool {
        let Terms {
            expire,
            renewing,
            replicated,
        } = self.terms;
        expire.is_some()
            && ((replicated && !acknowledged) || attempt.needs_confirming(now, expire, renewing))
    }

    /// What a take came to once confirmed: still the handle's and valid until the inner
    /// instant (`None`: the extend found it no longer ours, as for a taker stopped past its
    /// lease, so it holds nothing and tries again), with its fencing `token`. `cancelled`: the
    /// call was cancelled meanwhile.
    pub fn confirmed(
        &mut self,
        valid_until: Option<Option<Instant>>,
        token: Option<u64>,
        cancelled: bool,
    ) -> Step {
        match valid_until {
            None => Step::Try { woken: false },
            Some(_) if cancelled => Step::GiveBack,
            Some(valid_until) => Step::Hand {
                valid_until,
                token,
                handed_over: self.woken,
            },
        }
    }
}

/// How long to block after a busy try whose reply arrived at `now`: until the holder's expiry
/// + 1 ms (so the next try finds the key gone), the caller's deadline, or [`MAX_BLOCK`],
///   whichever comes first.
fn block(now: Instant, deadline: Option<Instant>, pttl: Pttl) -> Step {
    let mut block = MAX_BLOCK;
    if let Some(deadline) = deadline {
        let remaining = deadline.saturating_duration_since(now);
        if remaining.is_zero() {
            return Step::End(End::TimedOut);
        }
        block = block.min(remaining);
    }
    match pttl {
        Pttl::Gone => return Step::Try { woken: false },
        Pttl::Forever => {}
        Pttl::Left(left) => block = block.min(left + Duration::from_millis(1)),
    }
    Step::Block { until: now + block }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const TERMS: Terms = Terms {
        expire: Some(Duration::from_secs(10)),
        renewing: true,
        replicated: false,
    };

    fn call(wait: Wait) -> LockWait {
        LockWait::new(wait, TERMS)
    }

    /// What a try found busy for `pttl` at `now` leads to, nothing cancelled or carried.
    fn busy(wait: &mut LockWait, now: Instant, pttl: Pttl) -> Step {
        wait.busy(false, pttl, now, false, false)
    }

    #[test]
    fn a_wait_ends_one_millisecond_after_the_holders_expiry() {
        let now = Instant::now();
        let step = busy(&mut call(Wait::Forever), now, Pttl::Left(ms(250)));
        assert_eq!(
            step,
            Step::Block {
                until: now + ms(251)
            }
        );
    }

    #[test]
    fn a_wait_ends_at_the_callers_deadline() {
        let now = Instant::now();
        let mut wait = call(Wait::Until(now + ms(40)));
        let until = Step::Block {
            until: now + ms(40),
        };
        assert_eq!(busy(&mut wait, now, Pttl::Left(ms(250))), until);
        assert_eq!(busy(&mut wait, now, Pttl::Forever), until);
    }

    #[test]
    fn a_lock_without_expiry_and_no_deadline_is_waited_on_at_most_max_block() {
        let now = Instant::now();
        let step = busy(&mut call(Wait::Forever), now, Pttl::Forever);
        assert_eq!(
            step,
            Step::Block {
                until: now + MAX_BLOCK
            }
        );
    }

    #[test]
    fn a_key_gone_during_the_try_is_tried_again_at_once() {
        let now = Instant::now();
        let step = busy(&mut call(Wait::Until(now + ms(100))), now, Pttl::Gone);
        assert_eq!(step, Step::Try { woken: false });
    }

    #[test]
    fn a_passed_deadline_gives_up_even_on_a_free_lock() {
        let now = Instant::now();
        let step = busy(&mut call(Wait::Until(now)), now, Pttl::Gone);
        assert_eq!(step, Step::End(End::TimedOut));
    }

    #[test]
    fn a_single_try_goes_again_on_a_lock_found_free_but_only_twice() {
        let now = Instant::now();
        let mut wait = call(Wait::Never);
        assert_eq!(busy(&mut wait, now, Pttl::Gone), Step::Try { woken: false });
        assert_eq!(busy(&mut wait, now, Pttl::Gone), Step::Try { woken: false });
        assert_eq!(busy(&mut wait, now, Pttl::Gone), Step::End(End::TimedOut));
    }

    #[test]
    fn a_single_try_gives_up_on_a_held_lock() {
        let step = busy(&mut call(Wait::Never), Instant::now(), Pttl::Forever);
        assert_eq!(step, Step::End(End::TimedOut));
    }

    #[test]
    fn a_lock_holding_the_handles_own_id_is_already_acquired() {
        let step = call(Wait::Forever).busy(true, Pttl::Forever, Instant::now(), false, false);
        assert_eq!(step, Step::End(End::AlreadyAcquired));
    }

    #[test]
    fn a_call_queues_behind_a_waiter_of_its_process_timed_as_that_waiter_is() {
        let now = Instant::now();
        let mut wait = call(Wait::Forever);
        let step = wait.start(Some(Some(now + ms(300))), now);
        assert_eq!(
            step,
            Step::Block {
                until: now + ms(301)
            }
        );
        let step = call(Wait::Forever).start(Some(None), now);
        assert_eq!(
            step,
            Step::Block {
                until: now + MAX_BLOCK
            }
        );
        assert_eq!(wait.start(None, now), Step::Try { woken: false });
    }

    #[test]
    fn a_single_try_never_queues_behind_its_processs_waiters() {
        let now = Instant::now();
        let step = call(Wait::Never).start(Some(Some(now + ms(300))), now);
        assert_eq!(step, Step::Try { woken: false });
    }

    #[test]
    fn a_cancel_or_the_deadline_lands_a_carried_try_before_the_call_ends() {
        let now = Instant::now();
        let held = Pttl::Left(ms(250));
        let mut wait = call(Wait::Forever);
        assert_eq!(wait.busy(false, held, now, true, true), Step::Land);
        assert_eq!(
            wait.busy(false, held, now, true, false),
            Step::End(End::Cancelled)
        );
        let mut wait = call(Wait::Until(now));
        assert_eq!(wait.busy(false, held, now, false, true), Step::Land);
        // Still waiting, a carried try goes on riding the hub's `BLPOP`.
        let mut wait = call(Wait::Forever);
        assert_eq!(
            wait.busy(false, held, now, false, true),
            Step::Block {
                until: now + ms(251)
            }
        );
    }

    #[test]
    fn a_block_cancelled_before_a_signal_ends_and_a_signal_is_acted_on() {
        let mut wait = call(Wait::Forever);
        assert_eq!(wait.woke(false, true), Step::End(End::Cancelled));
        assert_eq!(wait.woke(true, true), Step::Try { woken: true });
        assert_eq!(wait.woke(false, false), Step::Try { woken: true });
    }

    #[test]
    fn a_take_after_a_wait_counts_as_handed_over() {
        let now = Instant::now();
        let until = Some(now + ms(10_000));
        let mut first = call(Wait::Forever);
        assert_eq!(
            first.confirmed(Some(until), Some(7), false),
            Step::Hand {
                valid_until: until,
                token: Some(7),
                handed_over: false
            }
        );
        let mut waited = call(Wait::Forever);
        assert!(matches!(
            waited.busy(false, Pttl::Forever, now, false, false),
            Step::Block { .. }
        ));
        assert_eq!(
            waited.confirmed(Some(until), None, false),
            Step::Hand {
                valid_until: until,
                token: None,
                handed_over: true
            }
        );
    }

    #[test]
    fn a_take_found_gone_by_its_confirm_tries_again_and_one_cancelled_is_given_back() {
        let mut wait = call(Wait::Forever);
        assert_eq!(
            wait.confirmed(None, Some(3), false),
            Step::Try { woken: false }
        );
        assert_eq!(wait.confirmed(Some(None), Some(3), true), Step::GiveBack);
    }

    #[test]
    fn a_slow_take_after_a_wait_is_confirmed_and_a_prompt_one_is_not() {
        let now = Instant::now();
        let wait = call(Wait::Forever);
        let slow = Attempting::new(now - ms(6_000), true);
        let prompt = Attempting::new(now - ms(10), true);
        assert!(wait.taken(&slow, true, now));
        assert!(!wait.taken(&prompt, true, now));
        // A first try's count starts at its send, which it waited for nothing.
        assert!(!wait.taken(&Attempting::new(now - ms(6_000), false), true, now));
    }

    #[test]
    fn a_take_found_by_a_read_is_confirmed_when_replicas_must_acknowledge_it() {
        let now = Instant::now();
        let prompt = Attempting::new(now, false);
        let replicated = LockWait::new(
            Wait::Never,
            Terms {
                replicated: true,
                ..TERMS
            },
        );
        assert!(replicated.taken(&prompt, false, now));
        assert!(!replicated.taken(&prompt, true, now));
        assert!(!call(Wait::Never).taken(&prompt, false, now));
        let no_expiry = LockWait::new(
            Wait::Never,
            Terms {
                expire: None,
                replicated: true,
                ..TERMS
            },
        );
        assert!(!no_expiry.taken(&prompt, false, now));
    }
}
