//! The shared wait's edges: the first task leaving with its try in flight, a frozen server
//! during a timed wait, the first task's own time coming; and that the async calls' futures
//! can be spawned.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::aio;

use crate::support::{eventually, ms, secs, tries_run, RedisServer, JOIN_SETTLE};

/// How long after `since` the server had no client blocked any more, polled for up to 10 s.
async fn unblocked_after(server: &RedisServer, since: Instant) -> Option<Duration> {
    while since.elapsed() < secs(10) {
        if server.blocked_clients() == 0 {
            return Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// A task whose seat is the first (and only) one in its name's queue, its try behind the
/// shared `BLPOP`, is dropped. The design says that `BLPOP` then ends at once (`CLIENT
/// UNBLOCK`), so that the dropped call's task finishes and the handle's next call may start.
/// The lock is then freed behind everyone's back (no signal, as an expiry frees it): the
/// handle's next `try_lock_for(3 s)` must take it, and the server must have no client left
/// blocked long before the seat's own time (5 s, the holder having no expiry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_first_waiting_task_ends_the_shared_blpop_at_once() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let waiter = Arc::new(aio::Lock::new(&client, "l").unwrap());
    let task = {
        let waiter = Arc::clone(&waiter);
        tokio::spawn(async move { waiter.acquire_timeout(secs(60)).await })
    };
    server.until_blocked(1, secs(20), || task.is_finished());
    let dropped = Instant::now();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    let _: () = server.conn().del("lock:l").unwrap();

    let next = waiter.try_lock_for(secs(3)).await.unwrap();
    let next_after = dropped.elapsed();
    let unblocked = unblocked_after(&server, dropped).await;
    assert!(
        next.is_some(),
        "the handle's try_lock_for(3 s) on a free lock was None ({next_after:?} after the \
         drop); the dropped call's BLPOP ended {unblocked:?} after the drop"
    );
    let unblocked = unblocked.expect("the shared BLPOP still blocks 10 s after the drop");
    assert!(
        unblocked < secs(2),
        "the shared BLPOP of a dropped task ended {unblocked:?} after the drop, not at once"
    );
}

/// A timed wait whose try is behind the shared `BLPOP` when the server freezes (SIGSTOP)
/// ends by its deadline plus the grace (250 ms), as a blocking waiter's does (its `BLPOP`'s
/// read is bounded by `io_deadline_after`) and as a timed call's first try does against a
/// frozen server. The queue's `BLPOP` + try is bounded by the seat's time plus the I/O
/// timeout instead (5 s by default), and its `CLIENT UNBLOCK` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_wait_behind_the_shared_blpop_ends_by_its_deadline_when_the_server_freezes() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let waiter = aio::Lock::new(&client, "l").unwrap();
    let started = Instant::now();
    let task = tokio::spawn(async move {
        let got = waiter.try_lock_for(secs(2)).await.map(|g| g.is_some());
        (got, started.elapsed())
    });
    server.until_blocked(1, secs(20), || task.is_finished());
    server.pause();
    let ended = tokio::time::timeout(secs(30), task).await;
    server.resume();
    let (got, took) = ended.expect("still waiting 30 s on").unwrap();
    assert!(
        matches!(got, Ok(false) | Err(_)),
        "took a held lock: {got:?}"
    );
    // The deadline, the grace, and a noisy machine's scheduling.
    assert!(
        took < ms(2000 + 250 + 1500),
        "try_lock_for(2 s) took {took:?} ({got:?})"
    );
}

/// Tasks of one process get the lock in arrival order, and a task whose try behind the
/// shared `BLPOP` finds the lock taken "sits again in its old place". But the queue hands its
/// next `BLPOP` to the next seat at once, before that task is back: after the first task's
/// seat time (5 s, the holder having no expiry) the second task's try is the one behind the
/// `BLPOP`, and a release then goes to the second task, ahead of the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_task_whose_seat_time_came_keeps_its_turn_ahead_of_a_later_task() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let waiter = |who: &'static str| {
        let lock = aio::Lock::new(&client, "l").unwrap();
        let order = Arc::clone(&order);
        tokio::spawn(async move {
            let got = lock.acquire_timeout(secs(60)).await;
            order.lock().unwrap().push(who);
            lock.release().await.unwrap();
            got
        })
    };
    let first = waiter("first");
    server.until_blocked(1, secs(20), || first.is_finished());
    // The second task arrives well after the first, so their seat times (5 s after each one's
    // try) are well apart.
    tokio::time::sleep(ms(2500)).await;
    let second = waiter("second");
    // It joins the line behind the first without a try of its own, which the server does
    // not see.
    tokio::time::sleep(JOIN_SETTLE).await;
    // The first task's seat time: its try behind the `BLPOP` runs again, finds the lock held.
    let before = tries_run(&server);
    eventually(secs(20), "the first task's try at its seat time", || {
        tries_run(&server) > before
    });
    server.until_blocked(1, secs(20), || false);
    holder.release().await.unwrap();
    assert!(first.await.unwrap().unwrap());
    assert!(second.await.unwrap().unwrap());
    assert_eq!(*order.lock().unwrap(), ["first", "second"]);
}

/// The futures users spawn (`tokio::spawn` needs `Send`) are `Send + 'static`: a check the
/// compiler makes; the futures are built, never run, so no server is reached.
#[test]
fn the_async_calls_futures_can_be_spawned() {
    let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    fn spawnable<F: std::future::Future + Send + 'static>(_future: F) {}
    let lock = Arc::new(aio::Lock::new(&client, "l").unwrap());
    let l = Arc::clone(&lock);
    spawnable(async move { l.lock().await.map(drop) });
    let l = Arc::clone(&lock);
    spawnable(async move { l.acquire().await });
    let l = Arc::clone(&lock);
    spawnable(async move { l.try_lock_for(secs(1)).await.map(drop) });
    let l = Arc::clone(&lock);
    spawnable(async move { l.try_acquire().await });
    let l = Arc::clone(&lock);
    spawnable(async move { l.release().await });
    let l = Arc::clone(&lock);
    spawnable(async move { l.extend(None).await });
    let l = Arc::clone(&lock);
    spawnable(async move { l.reset().await });
    let l = Arc::clone(&lock);
    spawnable(async move { l.holder().await.map(drop) });
    let l = Arc::clone(&lock);
    spawnable(async move { l.with_lock(async { 1 }).await });
    let l = Arc::clone(&lock);
    spawnable(async move {
        let guard = l.lock().await?;
        guard.extend(None).await?;
        guard.when_lost().await;
        guard.unlock().await
    });
    let c = client.clone();
    spawnable(async move { aio::with_lock(&c, "l", async { 1 }).await });
    let c = client.clone();
    spawnable(async move { aio::reset_all(&c).await });
    let c = client.clone();
    spawnable(async move {
        let cache = aio::Cache::new(&c)?;
        cache
            .get_or_set("k", secs(1), || async {
                Ok::<i64, redis_blpop_lock::Error>(1)
            })
            .await?;
        cache
            .get_or_revalidate("k", secs(1), secs(2), || async {
                Ok::<i64, redis_blpop_lock::Error>(1)
            })
            .await
    });
}
