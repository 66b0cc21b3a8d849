//! Redlock under real faults: a server of the quorum killed and restarted empty under a holder,
//! and a holder process frozen with `SIGSTOP` past its validity. The soak in which worker
//! processes are `SIGKILL`ed and quorum servers killed and restarted at random is in the slow
//! group (`tests/slow/quorum_soak.rs`).
//!
//! What is checked strictly is safety: no two critical sections overlap while their holders'
//! `lost()` says false. Time bounds are generous and only prove progress.
//!
//! Redlock's published caveat: a server that restarts empty has forgotten the locks it held,
//! and with it a second majority can form while the first holder's lock is still valid (A
//! holds on servers 1-3; 3 restarts empty; B takes 3, 4, 5). The remedy is to keep a
//! restarted server out for longer than the longest expiry, so that every validity it voted
//! for has ended by the time it is back. The tests here follow it: a server is restarted only
//! after more than the locks' expiry has passed since it died.

use std::thread;
use std::time::Instant;

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{
    eventually, field, ms, now_ns, quorum_of, secs, servers, urls, ChildProcess, RedisServer,
};
use crate::topology::quorum::{five_with_frozen, holding, quorum};

/// A handle of lock `q` on `servers` whose try ended `OutcomeUnknown`.
fn unsure_after_a_try(servers: &[RedisServer]) -> Lock {
    let lock = Lock::builder(&quorum(servers), "q")
        .expire(secs(10))
        .build()
        .unwrap();
    let tried = lock.try_acquire();
    assert!(
        matches!(tried, Err(Error::OutcomeUnknown { .. })),
        "{tried:?}"
    );
    lock
}

/// How many `SET`s `server` has run: here, the tries at a lock.
fn sets_run(server: &RedisServer) -> u64 {
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    let stats: String = info.get("cmdstat_set").unwrap_or_default();
    let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="));
    calls.and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// Resumes the three frozen servers of `servers`, which run the try of `id` queued there,
/// and sees the background settle give it back within 2 s, nobody calling the handle: then
/// another handle takes the lock, long before the 10 s expiry.
fn resume_and_see_it_given_back(servers: &[RedisServer], id: &str) {
    for server in &servers[..3] {
        server.resume();
    }
    let resumed = Instant::now();
    let at_resume = holding(servers, "q", id);
    eventually(
        secs(2),
        format_args!("the handle's id to leave the majority ({at_resume} of 5 had it)"),
        || holding(servers, "q", id) < 3,
    );
    println!("given back {:?} after the resume", resumed.elapsed());
    for server in &servers[..3] {
        assert_eq!(sets_run(server), 2, "the warm-up's try and the late one");
    }
    let other = Lock::builder(&quorum(servers), "q")
        .expire(secs(10))
        .build()
        .unwrap();
    assert!(
        other.try_acquire().unwrap(),
        "the lock is free for another handle"
    );
    other.release().unwrap();
}

/// A try whose replies a frozen majority held back ends `OutcomeUnknown`; the servers run it
/// when they resume, and the handle's id then holds the lock on a majority until the
/// background settle gives it back.
#[test]
fn a_try_that_lands_after_its_call_ended_is_given_back_without_another_call() {
    let servers = five_with_frozen(3);
    let lock = unsure_after_a_try(&servers);
    resume_and_see_it_given_back(&servers, lock.id());
}

/// The same with the async API, whose background settle is a task.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_try_that_lands_after_its_call_ended_is_given_back_by_a_task() {
    let servers = five_with_frozen(3);
    let lock = redis_blpop_lock::aio::Lock::builder(&quorum(&servers), "q")
        .expire(secs(10))
        .build()
        .unwrap();
    let tried = lock.try_acquire().await;
    assert!(
        matches!(tried, Err(Error::OutcomeUnknown { .. })),
        "{tried:?}"
    );
    let id = lock.id().to_string();
    tokio::task::spawn_blocking(move || resume_and_see_it_given_back(&servers, &id))
        .await
        .unwrap();
}

/// A try of this handle is queued on four frozen servers of five. One resumes and runs it, and
/// a release then reaches that one and the fifth only: two answers of five cannot tell that
/// the rest do not hold the key (or are about to), so the release is not done. The other
/// three resume and run the try: the handle's own id holds the lock on a majority. Its next
/// try must take that for what it is, never `AlreadyAcquired` for its whole expiry, and the
/// settle of the release must not give back the lock the handle now holds.
#[test]
fn a_handles_own_late_try_on_a_majority_is_never_read_as_already_acquired() {
    let servers = five_with_frozen(4);
    let lock = unsure_after_a_try(&servers);
    servers[0].resume();
    let released = lock.release();
    println!("a release answered by two servers of five: {released:?}");
    for server in &servers[1..4] {
        server.resume();
    }
    let again = lock.try_acquire();
    assert!(
        matches!(again, Ok(true)),
        "the handle's own late try was in the key: {again:?}"
    );
    // The background settle of the release was under way: it gives back nothing now that
    // the handle holds the lock (a step lasts well under this, pauses included).
    thread::sleep(secs(1));
    assert!(holding(&servers, "q", lock.id()) >= 3 && !lock.lost());
    lock.release().unwrap();
    assert_eq!(holding(&servers, "q", lock.id()), 0);
}

fn describe(result: Result<(), Error>) -> String {
    match result {
        Ok(()) => "ok".to_string(),
        Err(Error::NotAcquired { .. }) => "not-acquired".to_string(),
        Err(e) => format!("error:{e}"),
    }
}

#[test]
fn a_server_restarted_empty_is_retaken_by_the_holders_renewal() {
    let mut servers = servers(5);
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(secs(2))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    assert_eq!(holding(&servers, "q", lock.id()), 5);
    // Down for longer than the expiry (the caveat's remedy), then back with no keys at all.
    servers[2].restart_after(ms(2500));
    assert!(!lock.lost(), "lost while one server of five was down");
    eventually(
        secs(15),
        "the renewal to take the key again on the restarted server",
        || {
            assert!(!lock.lost(), "lost while the restarted server was empty");
            holding(&servers[2..3], "q", lock.id()) == 1
        },
    );
    assert_eq!(holding(&servers, "q", lock.id()), 5);
    assert!(!lock.lost());
    lock.release().unwrap();
    assert_eq!(holding(&servers, "q", lock.id()), 0);
}

/// A try of this handle can leave its key behind on one server: the server answers after the
/// per-server timeout, the try is lost and given back, and the give-back (on another
/// connection) runs there before the try does. The key then holds the handle's own id for up
/// to an expiry. With two servers of five down, the next try of that handle finds the other
/// two free and its own key on the third: the lock is free (nobody else holds it anywhere),
/// and the acquire must take it, not say this id holds it already.
#[test]
fn a_leftover_key_of_its_own_on_one_server_does_not_stop_a_handle_taking_a_free_lock() {
    let mut servers = servers(5);
    servers[1].kill();
    servers[3].kill();
    let lock = Lock::builder(&quorum(&servers), "q")
        .expire(secs(2))
        .build()
        .unwrap();
    let _: () = servers[0]
        .conn()
        .pset_ex("lock:q", lock.id(), 2000)
        .unwrap();
    let got = lock.acquire_timeout(secs(10));
    assert!(
        matches!(got, Ok(true)),
        "a free lock with a leftover key of the handle's own on one of three live servers: \
         {got:?}"
    );
    let live = [0, 2, 4].map(|i| holding(std::slice::from_ref(&servers[i]), "q", lock.id()));
    assert_eq!(live, [1, 1, 1], "held on every live server");
    lock.release().unwrap();
}

/// Takes lock "l" on the quorum at `args` (1 s expiry, auto-renewal), prints when it entered,
/// and works until its handle says the lock is lost (30 s at most). Then prints whether it
/// was told, the last instant at which it still counted itself the holder, and what its
/// release said.
pub fn paused_holder(_client: &redis::Client, args: &[String]) {
    let lock = Lock::builder(&quorum_of(args), "l")
        .expire(ms(1000))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let entered = now_ns();
    println!("acquired {entered}");
    let give_up = Instant::now() + secs(30);
    let mut last_valid = entered;
    // The time is taken before asking: a `false` answer means the lock was still valid then.
    // A stop between the two only makes `last_valid` earlier.
    while Instant::now() < give_up {
        let now = now_ns();
        if lock.lost() {
            break;
        }
        last_valid = now;
        thread::sleep(ms(5));
    }
    let lost = lock.lost();
    let release = describe(lock.release());
    println!("report lost={lost} last_valid={last_valid} release={release}");
}

#[test]
fn a_holder_paused_past_its_validity_learns_it_is_lost_and_the_next_holder_does_not_overlap() {
    let servers = servers(5);
    let urls = urls(&servers);
    let args: Vec<&str> = urls.iter().map(String::as_str).collect();
    let mut child = ChildProcess::spawn("topology::quorum_faults::paused_holder", &urls[0], &args);
    let entered: u128 = child.expect_line("acquired")["acquired ".len()..]
        .parse()
        .unwrap();
    // The whole process stops: its renewal thread too.
    child.signal("STOP");
    let next = Lock::builder(&quorum(&servers), "l")
        .expire(secs(30))
        .build()
        .unwrap();
    let got = next.acquire_timeout(secs(30));
    let next_entered = now_ns();
    // A majority at least; the rest may have still held the stopped holder's key an instant
    // longer when the vote reached them.
    let held = holding(&servers, "l", next.id());
    child.signal("CONT");
    assert!(
        got.unwrap(),
        "the stopped holder's lock never expired for the next"
    );
    let report = child.expect_line("report");
    assert_eq!(field(&report, "lost"), "true", "{report}");
    let last_valid: u128 = field(&report, "last_valid").parse().unwrap();
    assert!(entered <= last_valid, "{report}");
    assert!(
        last_valid < next_entered,
        "the stopped holder counted itself the holder {} µs into the next holder's section: \
         {report}",
        (last_valid - next_entered) / 1000
    );
    // Its release, owner-checked on every server, left the next holder's keys alone.
    assert_eq!(field(&report, "release"), "not-acquired", "{report}");
    assert!(held >= 3, "the next holder won with {held} of 5");
    assert_eq!(holding(&servers, "l", next.id()), held);
    child.wait_success();
    next.release().unwrap();
}
