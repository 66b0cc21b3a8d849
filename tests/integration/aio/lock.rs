//! The async lock on one server, one process, beyond the suite both APIs run
//! (`lock/api.rs`): every call form at once, `when_lost`, the guard's life across tasks and
//! runtimes, `with_lock`, `reset_all`, the cache, and waits shared with the blocking API.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{aio, Error, Lock};

use crate::support::{
    assert_lost_and_dropped, assert_task_woken_by, blocked_task_waiter, eventually, ms, secs,
    RedisServer,
};

/// How long a test waits for its waiters to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

fn owner(server: &RedisServer, name: &str) -> Option<String> {
    server.conn().get(format!("lock:{name}")).unwrap()
}

fn pttl(server: &RedisServer, name: &str) -> i64 {
    server.conn().pttl(format!("lock:{name}")).unwrap()
}

fn already_acquired<T>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::AlreadyAcquired { .. }))
}

fn not_acquired<T>(result: &Result<T, Error>) -> bool {
    matches!(result, Err(Error::NotAcquired { .. }))
}

/// A handle on lock `l` at `server` with `expire`, kept alive by renewals.
fn renewed(server: &RedisServer, expire: Duration) -> aio::Lock {
    aio::Lock::builder(&server.client(), "l")
        .expire(expire)
        .auto_renewal(true)
        .build()
        .unwrap()
}

#[test]
fn the_handle_and_the_guard_can_go_anywhere_a_task_goes() {
    fn task_safe<T: Send + Sync + 'static>() {}
    task_safe::<aio::Lock>();
    task_safe::<aio::LockGuard>();
    task_safe::<aio::Cache>();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_takes_the_key_and_unlock_frees_it() {
    let server = RedisServer::start();
    let lock = aio::Lock::new(&server.client(), "l").unwrap();
    assert_eq!(lock.name(), "l");
    let guard = lock.lock().await.unwrap();
    assert_eq!(guard.name(), "l");
    assert!(!guard.lost());
    assert_eq!(owner(&server, "l").as_deref(), Some(lock.id()));
    assert_eq!(pttl(&server, "l"), -1, "no expiry was asked for");
    guard.unlock().await.unwrap();
    assert_eq!(owner(&server, "l"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_and_release_take_and_free_the_key() {
    let server = RedisServer::start();
    let lock = aio::Lock::builder(&server.client(), "l")
        .expire(secs(10))
        .build()
        .unwrap();
    lock.acquire().await.unwrap();
    assert_eq!(owner(&server, "l").as_deref(), Some(lock.id()));
    let left = pttl(&server, "l");
    assert!(left > 0 && left <= 10_000, "pttl {left}");
    lock.release().await.unwrap();
    assert_eq!(owner(&server, "l"), None);
    assert!(lock.try_acquire().await.unwrap(), "free again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_while_another_owner_holds_it_is_none() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    let other = aio::Lock::new(&client, "l").unwrap();
    let _guard = holder.lock().await.unwrap();
    assert!(other.try_lock().await.unwrap().is_none());
    assert!(!other.try_acquire().await.unwrap());
    assert_eq!(owner(&server, "l").as_deref(), Some(holder.id()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_waits_on_a_held_lock_give_up_at_their_deadline() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let other = aio::Lock::new(&client, "l").unwrap();
    let wait = ms(300);
    for call in ["try_lock_for", "acquire_timeout", "try_lock_until"] {
        let started = Instant::now();
        let got = match call {
            "try_lock_for" => other.try_lock_for(wait).await.unwrap().is_some(),
            "acquire_timeout" => other.acquire_timeout(wait).await.unwrap(),
            _ => other
                .try_lock_until(started + wait)
                .await
                .unwrap()
                .is_some(),
        };
        let took = started.elapsed();
        assert!(!got, "{call} took a held lock");
        // Not before the deadline (less a millisecond's rounding), and by it give or take the
        // round trip under way and a noisy machine's scheduling.
        assert!(took >= ms(290), "{call}(300 ms) gave up after {took:?}");
        assert!(took < ms(300 + 1500), "{call}(300 ms) took {took:?}");
    }
    assert_eq!(owner(&server, "l").as_deref(), Some(holder.id()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_wait_succeeds_once_the_holders_expiry_passes() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::builder(&client, "l")
        .expire(ms(300))
        .build()
        .unwrap();
    holder.acquire().await.unwrap();
    let other = aio::Lock::new(&client, "l").unwrap();
    let guard = other.try_lock_for(secs(20)).await.unwrap();
    assert!(guard.is_some());
    assert_eq!(owner(&server, "l").as_deref(), Some(other.id()));
    assert!(holder.lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquiring_twice_is_already_acquired() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = aio::Lock::new(&client, "l").unwrap();
    lock.acquire().await.unwrap();
    assert!(already_acquired(&lock.acquire().await));
    assert!(already_acquired(&lock.try_acquire().await));
    assert!(already_acquired(&lock.acquire_timeout(ms(100)).await));
    assert!(already_acquired(&lock.lock().await));
    assert!(already_acquired(&lock.try_lock().await));
    assert!(already_acquired(&lock.try_lock_for(ms(100)).await));
    // Another handle with the owner's id is the same owner.
    let twin = aio::Lock::builder(&client, "l")
        .id(lock.id())
        .build()
        .unwrap();
    assert!(already_acquired(&twin.acquire_timeout(ms(100)).await));
    assert_eq!(owner(&server, "l").as_deref(), Some(lock.id()));
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_lock_not_held_is_not_acquired_and_wakes_nobody() {
    let server = RedisServer::start();
    let client = server.client();
    let never = aio::Lock::new(&client, "l").unwrap();
    assert!(not_acquired(&never.release().await));
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    assert!(not_acquired(&never.release().await));
    assert_eq!(owner(&server, "l").as_deref(), Some(holder.id()));
    assert!(
        !server.conn().exists::<_, bool>("lock-signal:l").unwrap(),
        "a refused release must not wake anyone"
    );
    // A handle with the owner's id may release.
    let twin = aio::Lock::builder(&client, "l")
        .id(holder.id())
        .build()
        .unwrap();
    twin.release().await.unwrap();
    assert!(!holder.locked().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_sets_a_new_expiry_for_the_owner_only() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = aio::Lock::builder(&client, "l")
        .expire(secs(100))
        .build()
        .unwrap();
    let guard = lock.lock().await.unwrap();
    let _: () = server.conn().pexpire("lock:l", 1_000).unwrap();
    lock.extend(None).await.unwrap();
    let left = pttl(&server, "l");
    assert!(
        left > 90_000,
        "extend(None) uses the configured expiry: pttl {left}"
    );
    guard.extend(Some(secs(200))).await.unwrap();
    let left = pttl(&server, "l");
    assert!(left > 190_000, "the guard's extend: pttl {left}");
    let other = aio::Lock::builder(&client, "l")
        .expire(secs(5))
        .build()
        .unwrap();
    assert!(not_acquired(&other.extend(Some(secs(1))).await));
    assert!(pttl(&server, "l") > 190_000);
    guard.unlock().await.unwrap();
    let forever = aio::Lock::new(&client, "l").unwrap();
    forever.acquire().await.unwrap();
    assert!(matches!(
        forever.extend(Some(secs(1))).await,
        Err(Error::NotExpirable { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_locked_and_owner_id_describe_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let observer = aio::Lock::new(&client, "l").unwrap();
    assert_eq!(observer.holder().await.unwrap(), None);
    assert!(!observer.locked().await.unwrap());
    assert_eq!(observer.owner_id().await.unwrap(), None);
    let lock = aio::Lock::builder(&client, "l")
        .id("worker-7")
        .expire(secs(10))
        .build()
        .unwrap();
    assert_eq!(lock.id(), "worker-7");
    lock.acquire().await.unwrap();
    let holder = observer.holder().await.unwrap().expect("a holder");
    assert_eq!(holder.id, "worker-7");
    let ttl = holder.ttl.expect("an expiring lock has a ttl");
    assert!(ttl > Duration::ZERO && ttl <= secs(10), "{ttl:?}");
    assert!(observer.locked().await.unwrap());
    assert_eq!(
        observer.owner_id().await.unwrap().as_deref(),
        Some("worker-7")
    );
    assert_eq!(owner(&server, "l").as_deref(), Some("worker-7"));
    let generated = aio::Lock::new(&client, "l").unwrap();
    assert_eq!(generated.id().len(), 24);
    assert_ne!(generated.id(), aio::Lock::new(&client, "l").unwrap().id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_grow_with_every_acquisition() {
    let server = RedisServer::start();
    let client = server.client();
    let a = aio::Lock::builder(&client, "l")
        .fencing(true)
        .build()
        .unwrap();
    let b = aio::Lock::builder(&client, "l")
        .fencing(true)
        .build()
        .unwrap();
    let mut tokens = Vec::new();
    for lock in [&a, &b, &a, &b] {
        let guard = lock.lock().await.unwrap();
        let token = guard.fencing_token().expect("a token");
        assert_eq!(lock.fencing_token(), Some(token), "the handle's token");
        tokens.push(token);
        guard.unlock().await.unwrap();
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(a.fencing_token(), None, "no token while not held");
    let plain = aio::Lock::new(&client, "plain").unwrap();
    let guard = plain.lock().await.unwrap();
    assert_eq!(guard.fencing_token(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewal_keeps_the_key_past_its_expiry() {
    let server = RedisServer::start();
    let lock = renewed(&server, secs(1));
    let guard = lock.lock().await.unwrap();
    // `when_lost` must not resolve while the renewals get through.
    tokio::select! {
        () = guard.when_lost() => panic!("when_lost resolved for a lock still held"),
        () = tokio::time::sleep(ms(2500)) => {}
    }
    assert_eq!(owner(&server, "l").as_deref(), Some(lock.id()));
    assert!(!guard.lost());
    assert!(!lock.lost());
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_past_its_expiry_is_lost_and_when_lost_resolves() {
    let server = RedisServer::start();
    let lock = aio::Lock::builder(&server.client(), "l")
        .expire(ms(300))
        .build()
        .unwrap();
    let guard = lock.lock().await.unwrap();
    assert!(!guard.lost());
    tokio::time::timeout(secs(10), guard.when_lost())
        .await
        .expect("when_lost never resolved after the expiry");
    assert!(guard.lost());
    assert!(lock.lost());
    // The handle counts the expiry from before its try, so Redis may keep the key a moment
    // longer; once Redis has let it go, the guard's unlock has nothing to release.
    let mut conn = server.conn();
    eventually(secs(5), "the key to expire", || {
        !conn.exists::<_, bool>("lock:l").unwrap()
    });
    assert!(not_acquired(&guard.unlock().await));
    assert!(
        lock.try_acquire().await.unwrap(),
        "a lost lock can be taken again"
    );
    assert!(!lock.lost());
}

/// A renewed lock whose key `tamper` changes behind its holder's back: the next renewal finds
/// it not ours, so the guard and the handle report it lost, `when_lost` resolves, and the key
/// is left as `tamper` made it (`left`).
async fn assert_a_renewal_reports_lost(
    tamper: impl FnOnce(&mut redis::Connection),
    left: Option<&str>,
) {
    let server = RedisServer::start();
    let lock = renewed(&server, ms(600));
    let guard = lock.lock().await.unwrap();
    tamper(&mut server.conn());
    tokio::time::timeout(secs(10), guard.when_lost())
        .await
        .expect("when_lost never resolved");
    assert!(guard.lost());
    assert!(lock.lost());
    assert_eq!(
        owner(&server, "l").as_deref(),
        left,
        "the renewal wrote the key"
    );
    assert!(not_acquired(&guard.unlock().await));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_another_id_reports_the_lock_lost() {
    let steal = |conn: &mut redis::Connection| conn.set::<_, _, ()>("lock:l", "thief").unwrap();
    assert_a_renewal_reports_lost(steal, Some("thief")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_that_finds_the_key_deleted_reports_the_lock_lost() {
    let delete = |conn: &mut redis::Connection| conn.del::<_, ()>("lock:l").unwrap();
    assert_a_renewal_reports_lost(delete, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_renewal_stops_when_the_handle_is_dropped() {
    let server = RedisServer::start();
    let lock = renewed(&server, ms(300));
    lock.acquire().await.unwrap();
    drop(lock);
    let mut conn = server.conn();
    eventually(secs(5), "the dropped handle's lock to go", || {
        !conn.exists::<_, bool>("lock:l").unwrap()
    });
    // And no renewal brings it back.
    tokio::time::sleep(ms(600)).await;
    assert!(!conn.exists::<_, bool>("lock:l").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_moved_into_a_task_unlocks_there() {
    let server = RedisServer::start();
    let lock = renewed(&server, secs(2));
    let guard = lock.lock().await.unwrap();
    let task = tokio::spawn(async move {
        assert_eq!(guard.name(), "l");
        tokio::time::sleep(ms(100)).await;
        assert!(!guard.lost());
        guard.extend(None).await?;
        guard.unlock().await
    });
    task.await.unwrap().unwrap();
    assert_eq!(owner(&server, "l"), None);
    assert!(lock.try_acquire().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_without_unlock_releases_and_wakes_a_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    let guard = holder.lock().await.unwrap();
    let waiter = aio::Lock::new(&client, "l").unwrap();
    let waiter_id = waiter.id().to_string();
    let waiter = blocked_task_waiter(&server, waiter);
    assert_task_woken_by(async { drop(guard) }, waiter).await;
    assert_eq!(owner(&server, "l"), Some(waiter_id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_in_a_finished_task_releases() {
    let server = RedisServer::start();
    let lock = aio::Lock::new(&server.client(), "l").unwrap();
    let guard = lock.lock().await.unwrap();
    tokio::spawn(async move { drop(guard) }).await.unwrap();
    let mut conn = server.conn();
    eventually(secs(10), "the dropped guard's release", || {
        !conn.exists::<_, bool>("lock:l").unwrap()
    });
}

#[test]
fn a_guard_dropped_after_its_runtime_is_gone_releases_on_the_dropping_thread() {
    let server = RedisServer::start();
    let client = server.client();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (lock, guard) = runtime.block_on(async {
        let lock = aio::Lock::new(&client, "l").unwrap();
        let guard = lock.lock().await.unwrap();
        (lock, guard)
    });
    assert_eq!(owner(&server, "l").as_deref(), Some(lock.id()));
    drop(runtime);
    drop(guard);
    // Sent before the drop returned: on this thread, with no runtime to spawn on.
    assert_eq!(owner(&server, "l"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_returns_the_works_value_and_releases() {
    let server = RedisServer::start();
    let client = server.client();
    let value = aio::with_lock(&client, "l", async {
        let left = pttl(&server, "l");
        assert!(left > 0 && left <= 30_000, "pttl {left} inside with_lock");
        tokio::time::sleep(ms(10)).await;
        42
    })
    .await
    .unwrap();
    assert_eq!(value, 42);
    assert_eq!(owner(&server, "l"), None);
    let lock = aio::Lock::new(&client, "m").unwrap();
    assert_eq!(lock.with_lock(async { "inside" }).await.unwrap(), "inside");
    assert_eq!(owner(&server, "m"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_on_a_handle_drops_the_work_and_is_lost_when_the_key_is_stolen() {
    let server = RedisServer::start();
    let lock = renewed(&server, ms(600));
    assert_lost_and_dropped(&server, |work| lock.with_lock(work)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_all_frees_every_lock_counts_them_and_wakes_a_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let mut holders = Vec::new();
    for i in 0..3 {
        let lock = aio::Lock::new(&client, format!("l{i}")).unwrap();
        lock.acquire().await.unwrap();
        holders.push(lock);
    }
    let _: () = server.conn().set("unrelated", "x").unwrap();
    let _: () = server.conn().rpush("lock:not-a-lock", "x").unwrap();
    let waiter = blocked_task_waiter(&server, aio::Lock::new(&client, "l0").unwrap());
    let reset = async {
        assert_eq!(aio::reset_all(&client).await.unwrap(), 3);
    };
    assert_task_woken_by(reset, waiter).await;
    for lock in &holders[1..] {
        assert!(!lock.locked().await.unwrap(), "{} still held", lock.name());
    }
    let mut conn = server.conn();
    assert!(conn.exists::<_, bool>("unrelated").unwrap());
    assert!(conn.exists::<_, bool>("lock:not-a-lock").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_misses_compute_once() {
    let server = RedisServer::start();
    let cache = aio::Cache::new(&server.client()).unwrap().prefix("cache:");
    let calls = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(tokio::sync::Barrier::new(64));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (cache, calls, start) = (cache.clone(), Arc::clone(&calls), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                cache
                    .get_or_set("k", secs(60), || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(ms(200)).await;
                        Ok::<_, Error>("computed".to_string())
                    })
                    .await
            })
        })
        .collect();
    for task in tasks {
        let value: String = task.await.unwrap().unwrap();
        assert_eq!(value, "computed");
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let mut conn = server.conn();
    assert_eq!(conn.get::<_, String>("cache:k").unwrap(), "computed");
    let ttl: i64 = conn.pttl("cache:k").unwrap();
    assert!(ttl > 50_000 && ttl <= 60_000, "pttl {ttl}");
    assert!(!conn.exists::<_, bool>("lock:get_or_set:k").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_of_a_stale_value_get_it_at_once_while_one_task_refreshes() {
    let server = RedisServer::start();
    let cache = aio::Cache::new(&server.client()).unwrap();
    let old: String = cache
        .get_or_revalidate("k", ms(100), secs(60), || async {
            Ok::<_, Error>("old".to_string())
        })
        .await
        .unwrap();
    assert_eq!(old, "old");
    let mut conn = server.conn();
    eventually(secs(5), "the value to go stale", || {
        !conn.exists::<_, bool>("k:fresh").unwrap()
    });
    let calls = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (cache, calls) = (cache.clone(), Arc::clone(&calls));
            tokio::spawn(async move {
                let started = Instant::now();
                let value: Result<String, Error> = cache
                    .get_or_revalidate("k", secs(30), secs(60), move || async move {
                        calls.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(secs(2)).await;
                        Ok("new".to_string())
                    })
                    .await;
                (value, started.elapsed())
            })
        })
        .collect();
    for task in tasks {
        let (value, took) = task.await.unwrap();
        assert_eq!(value.unwrap(), "old");
        assert!(took < secs(1), "a reader waited {took:?} for the refresh");
    }
    eventually(secs(10), "the refreshed value", || {
        conn.get::<_, String>("k").unwrap() == "new"
    });
    eventually(secs(5), "the refresh lock's release", || {
        !conn.exists::<_, bool>("lock:get_or_set:k").unwrap()
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(conn.exists::<_, bool>("k:fresh").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_release_wakes_a_blocking_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let blocking = Lock::new(&client, "l").unwrap();
    let waiter = tokio::task::spawn_blocking(move || blocking.acquire_timeout(secs(60)));
    server.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    assert_task_woken_by(async { holder.release().await.unwrap() }, waiter).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_release_wakes_an_async_waiter() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let waiter = blocked_task_waiter(&server, aio::Lock::new(&client, "l").unwrap());
    assert_task_woken_by(async { holder.release().unwrap() }, waiter).await;
}
