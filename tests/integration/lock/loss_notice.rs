//! The loss notice (`lost_token()` on every guard and permit, `when_lost()` in async code) and
//! bounded holds (`max_hold`), against private servers. A notice is cancelled within one
//! renewal interval of the loss becoming knowable: a reset or a theft found by the next
//! renewal, renewals that cannot get through until the lease ran out, an expiry without
//! renewal, `max_hold` reached. Never for a holder that holds or for a release; and each
//! acquisition has its own.

use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::{CancelToken, Error, Lock, LockBuilder, LockGuard, RwLock, Semaphore};

use crate::support::{eventually, ms, secs, RedisServer};

/// The expiry of the renewed holds: renewed every 400 ms.
const EXPIRE: Duration = Duration::from_millis(600);
/// How soon after a loss becomes knowable its notice must come: within one renewal interval
/// (two thirds of [`EXPIRE`]), with a margin for a loaded machine (the bench measures speed).
const TOLD_WITHIN: Duration = Duration::from_millis(400 + 2000);
/// The expiry of the holds that do not renew, and of those bounded by [`MAX_HOLD`].
const SHORT: Duration = Duration::from_millis(300);
/// The bound of the bounded holds: three of their renewals, then one cut short.
const MAX_HOLD: Duration = Duration::from_millis(1000);

/// `builder` with [`EXPIRE`] and auto-renewal.
fn renewed<K>(builder: LockBuilder<K>) -> LockBuilder<K> {
    builder.expire(EXPIRE).auto_renewal(true)
}

/// Runs `reset` (another handle's, or an operator's) and checks that `token` is cancelled
/// within [`TOLD_WITHIN`], and that `lost` then says so too.
fn assert_reset_told(token: &CancelToken, lost: impl Fn() -> bool, reset: impl FnOnce()) {
    assert!(!token.is_cancelled(), "cancelled while held");
    reset();
    eventually(TOLD_WITHIN, "the loss notice after a reset", || {
        token.is_cancelled()
    });
    assert!(lost(), "the token was cancelled but lost() is false");
}

/// The handles of the reset tests, renewed, on `client`: a lock, a fair lock, a semaphore of
/// 2 permits and a read-write lock.
fn plain(client: &redis::Client) -> Lock {
    renewed(Lock::builder(client, "l")).build().unwrap()
}

fn fair(client: &redis::Client) -> Lock {
    renewed(Lock::builder(client, "f"))
        .fair(true)
        .build()
        .unwrap()
}

fn semaphore(client: &redis::Client) -> Semaphore {
    renewed(Semaphore::builder(client, "s", 2)).build().unwrap()
}

fn rwlock(client: &redis::Client) -> RwLock {
    renewed(RwLock::builder(client, "rw")).build().unwrap()
}

/// The lock `l` with a [`SHORT`] expiry, not renewed.
fn unrenewed(client: &redis::Client) -> Lock {
    Lock::builder(client, "l").expire(SHORT).build().unwrap()
}

/// `lock` taken, and its guard's loss notice.
fn watched(lock: &Lock) -> (LockGuard<'_>, CancelToken) {
    let guard = lock.lock().unwrap();
    let token = guard.lost_token();
    (guard, token)
}

/// Another handle's reset of the lock `l`.
fn reset_plain(client: &redis::Client) {
    assert!(Lock::new(client, "l").unwrap().reset().unwrap());
}

/// Another handle's reset of the fair lock `f`.
fn reset_fair(client: &redis::Client) {
    assert!(fair(client).reset().unwrap());
}

/// The operator's reset of every hold of the queue primitive `kind` named `name`.
fn reset_queue(client: &redis::Client, kind: Primitive, name: &str) {
    let removed = inspect::reset_queue(client, kind, name, None, 2, secs(5)).unwrap();
    assert!(removed >= 1, "nothing held to reset");
}

fn reset_semaphore(client: &redis::Client) {
    reset_queue(client, Primitive::Semaphore, "s");
}

fn reset_rwlock(client: &redis::Client) {
    reset_queue(client, Primitive::RwLock, "rw");
}

/// The test `$test`: the hold that `$take` makes of the handle `$handle` builds is told of
/// `$reset` within a renewal interval.
macro_rules! reset_is_told {
    ($test:ident: $handle:ident.$take:ident(), $reset:ident) => {
        #[test]
        fn $test() {
            let server = RedisServer::start();
            let client = server.client();
            let handle = $handle(&client);
            let held = handle.$take().unwrap();
            assert_reset_told(&held.lost_token(), || held.lost(), || $reset(&client));
        }
    };
}

reset_is_told!(
    a_reset_cancels_a_lock_guards_token_within_a_renewal_interval:
        plain.lock(), reset_plain
);
reset_is_told!(
    a_reset_cancels_a_fair_lock_guards_token_within_a_renewal_interval:
        fair.lock(), reset_fair
);
reset_is_told!(
    a_reset_cancels_a_semaphore_permits_token_within_a_renewal_interval:
        semaphore.acquire(), reset_semaphore
);
reset_is_told!(
    a_reset_cancels_a_write_guards_token_within_a_renewal_interval:
        rwlock.write(), reset_rwlock
);
reset_is_told!(
    a_reset_cancels_a_read_guards_token_within_a_renewal_interval:
        rwlock.read(), reset_rwlock
);

#[test]
fn a_renewal_that_finds_another_owner_cancels_the_token() {
    let server = RedisServer::start();
    let lock = plain(&server.client());
    let guard = lock.lock().unwrap();
    assert_reset_told(
        &guard.lost_token(),
        || guard.lost(),
        || {
            let () = server.conn().set("lock:l", "thief").unwrap();
        },
    );
}

#[test]
fn an_extend_that_finds_the_lock_gone_cancels_the_token_at_once() {
    let server = RedisServer::start();
    let lock = Lock::builder(&server.client(), "l")
        .expire(secs(30))
        .build()
        .unwrap();
    let (guard, token) = watched(&lock);
    let () = server.conn().del("lock:l").unwrap();
    assert!(matches!(guard.extend(None), Err(Error::NotAcquired { .. })));
    assert!(token.is_cancelled());
}

#[test]
fn a_renewing_holders_token_stays_uncancelled_through_three_intervals() {
    let server = RedisServer::start();
    let lock = plain(&server.client());
    let (guard, token) = watched(&lock);
    let held = Instant::now();
    while held.elapsed() < EXPIRE * 2 {
        assert!(
            !token.is_cancelled(),
            "cancelled {:?} into the hold",
            held.elapsed()
        );
        std::thread::sleep(ms(10));
    }
    assert!(!guard.lost());
    guard.unlock().unwrap();
}

#[test]
fn a_lock_without_renewal_cancels_its_token_at_its_expiry() {
    let server = RedisServer::start();
    let lock = unrenewed(&server.client());
    let before = Instant::now();
    let (guard, token) = watched(&lock);
    eventually(SHORT + secs(2), "the notice at the expiry", || {
        token.is_cancelled()
    });
    assert!(before.elapsed() >= SHORT, "told before the expiry");
    assert!(guard.lost());
}

#[test]
fn renewals_that_cannot_get_through_cancel_the_token_once_the_lease_ran_out() {
    let server = RedisServer::start();
    let lock = plain(&server.client());
    let before = Instant::now();
    let (guard, token) = watched(&lock);
    // Frozen before the first renewal is due: every renewal hangs.
    server.pause();
    eventually(
        EXPIRE + secs(2),
        "the notice once the lease ran out",
        || token.is_cancelled(),
    );
    let told = before.elapsed();
    server.resume();
    assert!(
        told >= EXPIRE,
        "told after {told:?}, before the lease ran out"
    );
    assert!(guard.lost());
}

#[test]
fn max_hold_cancels_a_hung_holders_token_when_its_last_lease_ends() {
    let server = RedisServer::start();
    let lock = Lock::builder(&server.client(), "l")
        .expire(SHORT)
        .auto_renewal(true)
        .max_hold(MAX_HOLD)
        .build()
        .unwrap();
    let before = Instant::now();
    let (guard, token) = watched(&lock);
    // The holder hangs: its thread only looks at the token, and renews nothing itself.
    eventually(MAX_HOLD + secs(2), "the notice at max_hold", || {
        token.is_cancelled()
    });
    let told = before.elapsed();
    // The last renewal ends the lease at max_hold, to the millisecond below.
    assert!(told + ms(1) >= MAX_HOLD, "told after {told:?}");
    assert!(guard.lost());
}

#[test]
fn max_hold_frees_a_hung_holders_lock_for_another_handle() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l")
        .expire(SHORT)
        .auto_renewal(true)
        .max_hold(MAX_HOLD)
        .build()
        .unwrap();
    let before = Instant::now();
    let guard = holder.lock().unwrap();
    // The holder's thread hangs in this wait; its renewal goes on until max_hold.
    let waiter = Lock::new(&client, "l").unwrap();
    let taken = waiter.try_lock_for(secs(10)).unwrap();
    let at = before.elapsed();
    assert!(taken.is_some(), "never freed");
    assert!(
        at + ms(1) >= MAX_HOLD,
        "freed after {at:?}, before max_hold"
    );
    assert!(at <= MAX_HOLD + SHORT + secs(1), "freed only after {at:?}");
    assert!(guard.lost());
}

#[test]
fn a_released_guards_token_is_never_cancelled() {
    let server = RedisServer::start();
    let lock = unrenewed(&server.client());
    let (guard, token) = watched(&lock);
    guard.unlock().unwrap();
    // Past the expiry the released lease would have had.
    std::thread::sleep(SHORT * 2);
    assert!(!token.is_cancelled());
}

#[test]
fn a_token_taken_after_the_loss_is_cancelled_already() {
    let server = RedisServer::start();
    let lock = unrenewed(&server.client());
    let guard = lock.lock().unwrap();
    eventually(SHORT + secs(2), "the expiry", || guard.lost());
    assert!(guard.lost_token().is_cancelled());
}

#[test]
fn a_handle_that_acquires_again_gets_a_fresh_token() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = plain(&client);
    let guard = lock.lock().unwrap();
    let first = guard.lost_token();
    assert_reset_told(&first, || guard.lost(), || reset_plain(&client));
    drop(guard);
    let again = lock.lock().unwrap();
    assert!(!again.lost_token().is_cancelled());
    assert!(
        first.is_cancelled(),
        "the first acquisition's token was reset"
    );
}

#[test]
fn max_hold_needs_an_expire() {
    let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    let built = Lock::builder(&client, "l").max_hold(secs(60)).build();
    assert!(matches!(built, Err(Error::InvalidArgument(m)) if m.contains("needs an expire")));
}

#[test]
fn a_zero_max_hold_is_refused() {
    let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    let built = renewed(Semaphore::builder(&client, "s", 2))
        .max_hold(Duration::ZERO)
        .build();
    assert!(matches!(built, Err(Error::InvalidArgument(m)) if m.contains("max_hold")));
}

#[test]
fn a_max_hold_shorter_than_the_expire_is_refused() {
    let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    // A queue primitive's expiry is 30 s unless told otherwise.
    let built = RwLock::builder(&client, "rw").max_hold(secs(10)).build();
    assert!(matches!(built, Err(Error::InvalidArgument(m)) if m.contains("at least the expire")));
}

/// The same notices in the async API: `when_lost()` resolves as the token is cancelled.
#[cfg(feature = "tokio")]
mod aio_api {
    use std::future::Future;

    use redis_blpop_lock::aio;

    use super::*;

    /// Runs `reset` and checks that `when_lost` resolves within [`TOLD_WITHIN`], and that
    /// `token` (taken before the reset) is cancelled by then.
    async fn assert_reset_told(token: CancelToken, when_lost: impl Future, reset: impl FnOnce()) {
        assert!(!token.is_cancelled(), "cancelled while held");
        reset();
        tokio::time::timeout(TOLD_WITHIN, when_lost)
            .await
            .expect("when_lost did not resolve after a reset");
        assert!(
            token.is_cancelled(),
            "when_lost resolved, the token is not cancelled"
        );
    }

    /// The async handles of the reset tests, as the blocking ones.
    fn plain(client: &redis::Client) -> aio::Lock {
        renewed(aio::Lock::builder(client, "l")).build().unwrap()
    }

    fn fair(client: &redis::Client) -> aio::Lock {
        let builder = renewed(aio::Lock::builder(client, "f")).fair(true);
        builder.build().unwrap()
    }

    fn semaphore(client: &redis::Client) -> aio::Semaphore {
        let builder = renewed(aio::Semaphore::builder(client, "s", 2));
        builder.build().unwrap()
    }

    fn rwlock(client: &redis::Client) -> aio::RwLock {
        renewed(aio::RwLock::builder(client, "rw")).build().unwrap()
    }

    /// As `reset_is_told!`, awaiting `when_lost()`.
    macro_rules! reset_is_told_async {
        ($test:ident: $handle:ident.$take:ident(), $reset:ident) => {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $test() {
                let server = RedisServer::start();
                let client = server.client();
                let handle = $handle(&client);
                let held = handle.$take().await.unwrap();
                assert_reset_told(held.lost_token(), held.when_lost(), || $reset(&client)).await;
            }
        };
    }

    reset_is_told_async!(
        a_reset_resolves_a_lock_guards_when_lost_within_a_renewal_interval:
            plain.lock(), reset_plain
    );
    reset_is_told_async!(
        a_reset_resolves_a_fair_lock_guards_when_lost_within_a_renewal_interval:
            fair.lock(), reset_fair
    );
    reset_is_told_async!(
        a_reset_resolves_a_semaphore_permits_when_lost_within_a_renewal_interval:
            semaphore.acquire(), reset_semaphore
    );
    reset_is_told_async!(
        a_reset_resolves_a_write_guards_when_lost_within_a_renewal_interval:
            rwlock.write(), reset_rwlock
    );
    reset_is_told_async!(
        a_reset_resolves_a_read_guards_when_lost_within_a_renewal_interval:
            rwlock.read(), reset_rwlock
    );

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_async_lock_without_renewal_resolves_when_lost_at_its_expiry() {
        let server = RedisServer::start();
        let lock = aio::Lock::builder(&server.client(), "l")
            .expire(SHORT)
            .build()
            .unwrap();
        let before = Instant::now();
        let guard = lock.lock().await.unwrap();
        tokio::time::timeout(SHORT + secs(2), guard.when_lost())
            .await
            .expect("when_lost did not resolve at the expiry");
        assert!(before.elapsed() >= SHORT, "resolved before the expiry");
        assert!(guard.lost_token().is_cancelled());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn max_hold_resolves_when_lost_of_an_async_permit() {
        let server = RedisServer::start();
        let semaphore = aio::Semaphore::builder(&server.client(), "s", 2)
            .expire(SHORT)
            .max_hold(MAX_HOLD)
            .build()
            .unwrap();
        let before = Instant::now();
        let permit = semaphore.acquire().await.unwrap();
        tokio::time::timeout(MAX_HOLD + secs(2), permit.when_lost())
            .await
            .expect("when_lost did not resolve at max_hold");
        let told = before.elapsed();
        assert!(told + ms(1) >= MAX_HOLD, "resolved after {told:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unlocked_async_guards_when_lost_never_resolves() {
        let server = RedisServer::start();
        let lock = aio::Lock::builder(&server.client(), "l")
            .expire(SHORT)
            .build()
            .unwrap();
        let guard = lock.lock().await.unwrap();
        let token = guard.lost_token();
        guard.unlock().await.unwrap();
        let waited = tokio::time::timeout(SHORT * 2, token.cancelled()).await;
        assert!(waited.is_err(), "cancelled after an unlock");
    }
}
