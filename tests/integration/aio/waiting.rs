//! Waiting tasks, beyond the suite both APIs run (`lock/waiting.rs`): sharing one waiting
//! connection per name however many tasks wait, getting the lock in the order they queued, and
//! tasks and threads of one process served in turn.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::{aio, Error, Lock};

use crate::support::{
    assert_task_woken_by, client_list, connections, connections_after_a_wait, eventually, ms, secs,
    tries_run, RedisServer,
};

/// How long a test waits for its waiters to block before it gives up.
const BLOCK_LIMIT: Duration = Duration::from_secs(20);

/// What a process may hold besides its one waiting connection (the design's target).
const CONNECTIONS_BESIDES_WAITING: usize = 8;

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
