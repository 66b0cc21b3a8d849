//! Waiting tasks: woken by a release (in this process or another), by a holder's expiry, or by
//! their own timer when a wake-up never comes; sharing one waiting connection per name however
//! many tasks wait; and getting the lock in the order they queued.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{aio, Error, Lock};

use crate::support::{
    assert_task_woken_by, blocked_task_waiter, client_list, connections, connections_after_a_wait,
    eventually, ms, secs, spawn_task_waiter, tries_run, ChildProcess, RedisServer,
};

/// How long a test waits for its waiters to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

/// What a process may hold besides its one waiting connection (the design's target).
const CONNECTIONS_BESIDES_WAITING: usize = 8;

/// Lock `l` held by a handle whose release leaves a signal that lasts a minute: a signal
/// gone soon after a release was taken by a waiter.
async fn holder_whose_signal_lasts(client: &redis::Client) -> aio::Lock {
    let holder = aio::Lock::builder(client, "l")
        .signal_expire(secs(60))
        .build()
        .unwrap();
    holder.acquire().await.unwrap();
    holder
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiting_task_which_consumes_the_signal() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = holder_whose_signal_lasts(&client).await;
    let waiter = blocked_task_waiter(&server, aio::Lock::new(&client, "l").unwrap());
    assert_task_woken_by(async { holder.release().await.unwrap() }, waiter).await;
    // The signal lives for 60 s: it is gone only because the waiter popped it.
    assert!(!server.conn().exists::<_, bool>("lock-signal:l").unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_another_process_wakes_a_waiting_task() {
    let server = RedisServer::start();
    let mut holder = ChildProcess::spawn("lock::waiting::hold", &server.url(), &["l", "0"]);
    holder.expect_line("acquired");
    let waiter = blocked_task_waiter(&server, aio::Lock::new(&server.client(), "l").unwrap());
    assert_task_woken_by(async { holder.send_line("release") }, waiter).await;
    holder.wait_success();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_exactly_one_of_three_waiting_tasks() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = holder_whose_signal_lasts(&client).await;
    let tries_before = tries_run(&server);
    let waiters: Vec<_> = (0..3)
        .map(|_| spawn_task_waiter(aio::Lock::new(&client, "l").unwrap(), secs(4)))
        .collect();
    server.until_in_line(1, tries_before, BLOCK_LIMIT, || false);
    holder.release().await.unwrap();
    let mut took = 0;
    for waiter in waiters {
        took += usize::from(waiter.await.unwrap().unwrap());
    }
    assert_eq!(took, 1, "{took} of the three waiters took the lock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_lock_goes_to_a_waiting_task_soon_after_it_expires() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l")
        .expire(ms(1500))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let left: u64 = server.conn().pttl("lock:l").unwrap();
    let expires_at = Instant::now() + ms(left);
    std::mem::forget(holder); // a crash: no release, no renewal
    let waiter = aio::Lock::new(&client, "l").unwrap();
    assert!(waiter.acquire_timeout(secs(60)).await.unwrap());
    let late = Instant::now().saturating_duration_since(expires_at);
    assert!(late < ms(750), "took the lock {late:?} after it expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_that_never_gets_a_signal_still_gets_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let waiter = blocked_task_waiter(&server, aio::Lock::new(&client, "l").unwrap());
    // Free the lock behind the waiter's back: no signal is ever pushed. The waiter tries
    // again on its own after a 5 s block.
    let _: () = server.conn().del("lock:l").unwrap();
    let got = tokio::time::timeout(secs(30), waiter)
        .await
        .expect("the waiter still waits for a free lock 30 s on");
    assert!(got.unwrap().unwrap());
}

/// `per_name` tasks wait on each of `names` locks held by the test. While they all wait, the
/// process holds one waiting connection for all the names (one `BLPOP` at the server) and at
/// most 9 connections in all; released, every task gets its lock in turn, and the waiting
/// connection closes.
async fn assert_waits_are_shared(names: usize, per_name: usize) {
    let server = RedisServer::start();
    let client = server.client();
    let baseline = connections_after_a_wait(&server).await;
    let mut holders = Vec::new();
    for n in 0..names {
        let holder = aio::Lock::new(&client, format!("l{n}")).unwrap();
        holder.acquire().await.unwrap();
        holders.push(holder);
    }
    let tasks = names * per_name;
    let tries_before = tries_run(&server);
    let acquired = Arc::new(AtomicUsize::new(0));
    let waiters: Vec<_> = (0..tasks)
        .map(|i| {
            let lock = aio::Lock::new(&client, format!("l{}", i % names)).unwrap();
            let acquired = Arc::clone(&acquired);
            tokio::spawn(async move {
                let guard = lock.lock().await?;
                acquired.fetch_add(1, Ordering::SeqCst);
                guard.unlock().await
            })
        })
        .collect();
    // The first task of each name tries; the others join the line behind it.
    server.until_in_line(names as u64, tries_before, BLOCK_LIMIT, || false);
    server.until_blocked(1, BLOCK_LIMIT, || false);
    let list = client_list(&server);
    println!(
        "{tasks} tasks waiting on {names} names: {} connections, {} blocked",
        list.len(),
        server.blocked_clients()
    );
    assert!(
        list.len() <= 1 + CONNECTIONS_BESIDES_WAITING,
        "{} connections while {tasks} tasks wait on {names} names:\n{}",
        list.len(),
        list.join("\n")
    );
    assert_eq!(
        server.blocked_clients(),
        1,
        "one BLPOP in all, whatever the number of tasks and names"
    );
    for holder in &holders {
        holder.release().await.unwrap();
    }
    for waiter in waiters {
        tokio::time::timeout(secs(60), waiter)
            .await
            .expect("a task still waits a minute after the releases")
            .unwrap()
            .unwrap();
    }
    assert_eq!(acquired.load(Ordering::SeqCst), tasks);
    eventually(secs(10), "the waiting connections to close", || {
        server.blocked_clients() == 0 && connections(&server) <= baseline
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_tasks_waiting_on_one_name_share_one_waiting_connection() {
    assert_waits_are_shared(1, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_tasks_on_each_of_fifty_names_share_one_waiting_connection() {
    assert_waits_are_shared(50, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_waiting_on_one_name_get_the_lock_in_arrival_order() {
    const TASKS: usize = 6;
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..TASKS {
        let tries_before = tries_run(&server);
        let lock = aio::Lock::new(&client, "l").unwrap();
        let order = Arc::clone(&order);
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            order.lock().unwrap().push(i);
            guard.unlock().await
        }));
        // Its first try has failed at the server (and the name's `BLPOP` is up); a moment
        // more for the reply to reach it and for it to queue behind the tasks before it.
        eventually(BLOCK_LIMIT, format!("task {i}'s first try"), || {
            tries_run(&server) > tries_before
        });
        server.until_blocked(1, BLOCK_LIMIT, || false);
        tokio::time::sleep(ms(200)).await;
    }
    holder.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(secs(60), waiter)
            .await
            .expect("a task still waits a minute after the release")
            .unwrap()
            .unwrap();
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(
        order,
        (0..TASKS).collect::<Vec<_>>(),
        "not in arrival order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_whose_connection_is_killed_reconnects_and_gets_the_lock() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let waiter = blocked_task_waiter(&server, aio::Lock::new(&client, "l").unwrap());
    let killed: u64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut server.conn())
        .unwrap();
    assert!(killed >= 1);
    server.until_blocked(1, BLOCK_LIMIT, || waiter.is_finished());
    assert_task_woken_by(
        async {
            holder
                .release()
                .await
                .expect("the release after a reconnect");
        },
        waiter,
    )
    .await;
}

/// A task's wait and a thread's wait on one name queue at the server in the order they came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_and_a_waiting_thread_are_served_in_turn() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = aio::Lock::new(&client, "l").unwrap();
    holder.acquire().await.unwrap();
    let task = aio::Lock::new(&client, "l").unwrap();
    let task_id = task.id().to_string();
    let task = tokio::spawn(async move {
        let guard = task.lock().await?;
        Ok::<_, Error>(guard)
    });
    server.until_blocked(1, BLOCK_LIMIT, || task.is_finished());
    let thread = Lock::new(&client, "l").unwrap();
    let thread_id = thread.id().to_string();
    let since = tries_run(&server);
    let thread = tokio::task::spawn_blocking(move || thread.acquire_timeout(secs(60)));
    server.until_waiting(1, since, BLOCK_LIMIT, || thread.is_finished());
    holder.release().await.unwrap();
    let guard = tokio::time::timeout(secs(10), task)
        .await
        .expect("the task, first in line, was not woken")
        .unwrap()
        .unwrap();
    let mut conn = server.conn();
    assert_eq!(
        conn.get::<_, Option<String>>("lock:l").unwrap(),
        Some(task_id)
    );
    assert!(!thread.is_finished());
    assert_task_woken_by(async { guard.unlock().await.unwrap() }, thread).await;
    assert_eq!(
        conn.get::<_, Option<String>>("lock:l").unwrap(),
        Some(thread_id)
    );
}
