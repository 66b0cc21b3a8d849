//! Operating the queue primitives against real servers: `inspect` shows their holders and
//! their line, `reset_queue` ends one hold or all and hands it on, `reset_all` ends every hold
//! and line and wakes the waiters, who join anew.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::inspect::{self, Primitive, Queue};
use redis_blpop_lock::{reset_all, Lock, Semaphore};

use crate::support::{secs, strip_process, RedisServer};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Long enough for a waiter to join the line on a loaded machine; the tests wait for the
/// server to show it there.
const BLOCK_LIMIT: Duration = Duration::from_secs(10);

/// A semaphore handle whose acquisitions' ids start with `id`, with a lease of `expire`
/// renewed, and a waiter's heartbeat of `heartbeat`.
pub(crate) fn semaphore(
    client: &redis::Client,
    name: &str,
    permits: u32,
    id: &str,
    heartbeat: Duration,
) -> Semaphore {
    Semaphore::builder(client, name, permits)
        .id(id)
        .expire(secs(120))
        .heartbeat(heartbeat)
        .build()
        .unwrap()
}

/// A thread in line for permits, which reports its permit's fencing token on `got` once it
/// has one, and holds it until this is dropped; dropping it waits for the thread to end.
pub(crate) struct Waiter {
    pub(crate) got: mpsc::Receiver<Option<u64>>,
    release: Option<mpsc::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        drop(self.release.take());
        if let Some(thread) = self.thread.take() {
            // Its own failure has been told on stderr; the test's asserts say what matters.
            let _ = thread.join();
        }
    }
}

/// Puts a thread in line for `units` of `semaphore` (waiting up to 60 s), once the server
/// shows it as the `nth` waiter in the semaphore's queue.
pub(crate) fn in_line(server: &RedisServer, semaphore: Semaphore, units: u32, nth: u64) -> Waiter {
    let name = semaphore.name().to_owned();
    let (done, got) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let thread = thread::spawn(move || {
        let permit = semaphore
            .try_acquire_many_for(units, secs(60))
            .unwrap()
            .expect("a permit within 60 s");
        done.send(permit.fencing_token()).unwrap();
        let _ = released.recv();
        permit.release().unwrap();
    });
    server.until_queued(Primitive::Semaphore, &name, nth, BLOCK_LIMIT, || {
        thread.is_finished()
    });
    Waiter {
        got,
        release: Some(release),
        thread: Some(thread),
    }
}

/// The id of the hold of semaphore `name` with fencing token `token`, as the server has it
/// (`<handle id>:<count>@<process id>`).
pub(crate) fn id_of_hold(client: &redis::Client, name: &str, token: Option<u64>) -> String {
    let queue = inspect::queue(client, Primitive::Semaphore, name, IO_TIMEOUT).unwrap();
    queue
        .holders
        .iter()
        .find(|h| Some(h.token) == token)
        .map(|h| h.id.clone())
        .expect("the hold is a holder")
}

/// (id, units) of each of some holders or waiters.
type Entries<'a> = Vec<(&'a str, u64)>;

/// (id, units) of each holder, sorted by id, and of each waiter of `queue`, in line; each id
/// as its handle was built with, less the `@<process id>` that ends it.
fn holders_and_line(queue: &Queue) -> (Entries<'_>, Entries<'_>) {
    let mut holders: Entries = queue
        .holders
        .iter()
        .map(|h| (strip_process(&h.id), h.units))
        .collect();
    holders.sort_unstable();
    (
        holders,
        queue
            .waiters
            .iter()
            .map(|w| (strip_process(&w.id), w.units))
            .collect(),
    )
}

#[test]
fn a_queue_shows_its_holders_with_units_lease_and_token_and_its_waiters_in_line_order() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = semaphore(&client, "db", 3, "holder", secs(2));
    let permit = holder.acquire_many(2).unwrap();
    // Two permits are not there for the first in line, and the second waits behind it.
    let first = in_line(&server, semaphore(&client, "db", 3, "first", secs(2)), 2, 1);
    let second = in_line(
        &server,
        semaphore(&client, "db", 3, "second", secs(2)),
        1,
        2,
    );

    let queue = inspect::queue(&client, Primitive::Semaphore, "db", IO_TIMEOUT).unwrap();
    assert_eq!(
        holders_and_line(&queue),
        (vec![("holder:0", 2)], vec![("first:0", 2), ("second:0", 1)])
    );
    assert_eq!(
        (queue.kind, queue.name.as_str(), queue.used),
        (Primitive::Semaphore, "db", 2)
    );
    assert_eq!(Some(queue.holders[0].token), permit.fencing_token());
    let ttl = queue.holders[0].ttl.expect("a lease");
    assert!(ttl > secs(60) && ttl <= secs(120), "{ttl:?}");
    // A waiter heartbeats: its entry always has a lapse ahead of it.
    assert!(queue.waiters.iter().all(|w| w.lapses_in > Duration::ZERO));
    // Every primitive with a holder or a waiter, and only those; read again, so with other
    // times left.
    let all = inspect::queues(&client, IO_TIMEOUT).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(holders_and_line(&all[0]), holders_and_line(&queue));

    permit.release().unwrap();
    for waiter in [&first, &second] {
        assert!(waiter.got.recv_timeout(secs(30)).unwrap().is_some());
    }
    let after = inspect::queue(&client, Primitive::Semaphore, "db", IO_TIMEOUT).unwrap();
    assert_eq!(
        holders_and_line(&after).0,
        vec![("first:0", 2), ("second:0", 1)]
    );
}

#[test]
fn a_free_primitive_shows_no_holder_and_no_line_and_is_not_listed() {
    let server = RedisServer::start();
    let client = server.client();
    let permits = Semaphore::new(&client, "idle", 2).unwrap();
    permits.acquire().unwrap().release().unwrap();
    let queue = inspect::queue(&client, Primitive::Semaphore, "idle", IO_TIMEOUT).unwrap();
    assert!(queue.holders.is_empty() && queue.waiters.is_empty() && queue.used == 0);
    assert_eq!(inspect::queues(&client, IO_TIMEOUT).unwrap(), vec![]);
}

#[test]
fn reset_all_ends_every_queue_hold_keeps_the_fence_and_wakes_the_waiters_who_join_anew() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = semaphore(&client, "s", 1, "holder", secs(2));
    let permit = holder.acquire().unwrap();
    let token = permit.fencing_token().unwrap();
    let lock = Lock::new(&client, "plain").unwrap();
    assert!(lock.try_acquire().unwrap());
    // Without a wake-up this waiter would ask again only at its 60 s heartbeat.
    let waiter = in_line(
        &server,
        semaphore(&client, "s", 1, "waiter", secs(60)),
        1,
        1,
    );

    let woken = Instant::now();
    assert_eq!(reset_all(&client).unwrap(), 2, "the lock and the permit");
    let taken = waiter
        .got
        .recv_timeout(secs(30))
        .expect("the waiter took the permit");
    assert!(
        woken.elapsed() < secs(20),
        "woken, not at its heartbeat: {:?}",
        woken.elapsed()
    );
    // The fencing counter survived: the new holder's token is above the old one's.
    assert!(taken > Some(token), "{taken:?} after {token}");
    let queue = inspect::queue(&client, Primitive::Semaphore, "s", IO_TIMEOUT).unwrap();
    assert_eq!(holders_and_line(&queue), (vec![("waiter:0", 1)], vec![]));
    assert!(!lock.locked().unwrap());
    drop(permit);
}

#[test]
fn reset_all_leaves_nothing_of_a_queue_but_its_fence_and_wake_ups_that_expire() {
    let server = RedisServer::start();
    let client = server.client();
    let permits = semaphore(&client, "gone", 2, "holder", secs(2));
    let _one = permits.acquire().unwrap();
    let _two = permits.acquire().unwrap();
    let mut conn = server.conn();
    // Both holders are of this process: the wake-up goes to its one inbox.
    let holders: Vec<String> = conn.zrange("semaphore:{gone}:holders", 0, -1).unwrap();
    let processes: std::collections::BTreeSet<&str> = holders
        .iter()
        .map(|id| &id[strip_process(id).len() + 1..])
        .collect();
    assert_eq!(processes.len(), 1, "{holders:?}");
    let inbox = format!("semaphore:{{gone}}:signal:{}", processes.first().unwrap());
    assert_eq!(reset_all(&client).unwrap(), 2);
    let mut keys: Vec<String> = conn.keys("semaphore:*").unwrap();
    keys.sort();
    assert_eq!(keys, ["semaphore:{gone}:fence", inbox.as_str()]);
    for key in &keys[1..] {
        let ttl: i64 = conn.pttl(key).unwrap();
        assert!(ttl > 0, "{key} expires");
    }
    assert_eq!(
        reset_all(&client).unwrap(),
        0,
        "sent again, it finds nothing"
    );
}

#[test]
fn reset_queue_ends_only_the_named_hold_and_hands_it_to_the_first_in_line() {
    let server = RedisServer::start();
    let client = server.client();
    let holders = semaphore(&client, "s", 2, "holder", secs(2));
    let kept = holders.acquire().unwrap();
    let ended = holders.acquire().unwrap();
    let waiter = in_line(
        &server,
        semaphore(&client, "s", 2, "waiter", secs(60)),
        1,
        1,
    );
    let ended_id = id_of_hold(&client, "s", ended.fencing_token());
    assert_eq!(strip_process(&ended_id), "holder:1");

    let removed = inspect::reset_queue(
        &client,
        Primitive::Semaphore,
        "s",
        Some(&ended_id),
        2,
        IO_TIMEOUT,
    )
    .unwrap();
    assert_eq!(removed, 1);
    assert!(waiter.got.recv_timeout(secs(30)).unwrap().is_some());
    let queue = inspect::queue(&client, Primitive::Semaphore, "s", IO_TIMEOUT).unwrap();
    assert_eq!(
        holders_and_line(&queue),
        (vec![("holder:0", 1), ("waiter:0", 1)], vec![])
    );
    // The ended hold's handle finds out when it gives the permit back.
    assert!(ended.release().is_err());
    kept.release().unwrap();
}

#[cfg(feature = "cluster")]
#[test]
fn on_a_cluster_queues_and_reset_all_reach_the_primitives_of_every_primary() {
    // A cluster of its own: reset_all would reset what other tests hold on a shared one.
    let cluster = crate::support::RedisCluster::start();
    let client = cluster.client();
    // Names whose slots lie on different primaries.
    let names: Vec<String> = (0..12).map(|i| format!("ops-queues-{i}")).collect();
    let primaries: std::collections::HashSet<u16> = names
        .iter()
        .map(|n| {
            cluster
                .primary_for(&format!("semaphore:{{{n}}}:holders"))
                .port
        })
        .collect();
    assert!(primaries.len() > 1, "the names span the primaries");
    let handles: Vec<Semaphore> = names
        .iter()
        .map(|name| Semaphore::new(&client, name.as_str(), 1).unwrap())
        .collect();
    let permits: Vec<_> = handles.iter().map(|s| s.acquire().unwrap()).collect();

    let listed: Vec<String> = inspect::queues(&client, IO_TIMEOUT)
        .unwrap()
        .into_iter()
        .map(|queue| queue.name)
        .collect();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(listed, expected);
    assert_eq!(reset_all(&client).unwrap(), names.len());
    for (permit, semaphore) in permits.into_iter().zip(&handles) {
        assert!(permit.release().is_err(), "{} was reset", semaphore.name());
    }
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_queues_and_queue_show_what_the_blocking_ones_do_and_reset_all_ends_it() {
    use redis_blpop_lock::aio;

    let server = RedisServer::start();
    let client = server.client();
    let permits = semaphore(&client, "db", 2, "holder", secs(2));
    let _permit = permits.acquire_many(2).unwrap();
    let queue = aio::inspect::queue(&client, Primitive::Semaphore, "db", IO_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(holders_and_line(&queue), (vec![("holder:0", 2)], vec![]));
    let all = aio::inspect::queues(&client, IO_TIMEOUT).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(holders_and_line(&all[0]), holders_and_line(&queue));
    assert_eq!(aio::reset_all(&client).await.unwrap(), 1);
    assert!(aio::inspect::queues(&client, IO_TIMEOUT)
        .await
        .unwrap()
        .is_empty());
}
