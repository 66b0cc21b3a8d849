//! The semaphore against real servers: never more holders than permits, first come first
//! served, k permits released wake k waiters, and crashed holders and waiters do not keep
//! the others waiting. The suite run for both APIs (`blocking::` and `aio::`, over [`Api`])
//! comes first; then what the blocking API's threads and processes show.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{handle, Error, Quorum, Semaphore};

use crate::support::{
    both_apis, eventually, lasting_keys, secs, strip_process, Api, ChildProcess, Proxy, RedisServer,
};

/// Long enough for a waiter to join the line on a loaded machine; the tests wait for the
/// server to show it there.
const BLOCK_LIMIT: Duration = Duration::from_secs(10);

/// Longer than any key the queue engine leaves to expire by itself here lasts: a process's
/// heartbeats and inbox (a lapse window, 2 s by default), a wake (10 s).
const EXPIRES_WITHIN: Duration = Duration::from_secs(10);

/// Holds permit(s) of semaphore `args[0]` (`args[1]` permits, expiry `args[2]` ms, renewed
/// when `args[3]` is "renew"), says so, and holds until told (or killed).
pub fn hold(client: &redis::Client, args: &[String]) {
    let permits: u32 = args[1].parse().unwrap();
    let semaphore = Semaphore::builder(client, &args[0], permits)
        .expire(Duration::from_millis(args[2].parse().unwrap()))
        .auto_renewal(args[3] == "renew")
        .build()
        .unwrap();
    let permit = semaphore.acquire().unwrap();
    println!("acquired");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    permit.release().unwrap();
    println!("released");
}

/// Waits for a permit of semaphore `args[0]` (`args[1]` permits), says when it starts to
/// wait (from the outside: in the queue) and when it got one.
/// With `args[2]`, its heartbeat in ms.
pub fn wait(client: &redis::Client, args: &[String]) {
    let permits: u32 = args[1].parse().unwrap();
    let mut builder = Semaphore::builder(client, &args[0], permits);
    if let Some(ms) = args.get(2) {
        builder = builder.heartbeat(Duration::from_millis(ms.parse().unwrap()));
    }
    let semaphore = builder.build().unwrap();
    println!("waiting");
    let permit = semaphore.acquire().unwrap();
    println!("acquired");
    drop(permit);
}

/// Waits until semaphore `s` has `n` waiters in its line, as the server shows it, or
/// `gave_up()` says there is no point.
fn until_in_line(server: &RedisServer, n: u64, gave_up: impl FnMut() -> bool) {
    server.until_queued(Primitive::Semaphore, "s", n, BLOCK_LIMIT, gave_up);
}

/// A thread that takes a permit of `semaphore` within 60 s and reports it on `done`, with
/// its name, then holds it until `release` says so.
fn waiter<A: Api>(
    semaphore: &Arc<handle::Semaphore<A>>,
    name: &'static str,
    done: &mpsc::Sender<&'static str>,
    release: mpsc::Receiver<()>,
) -> thread::JoinHandle<()> {
    let (semaphore, done) = (Arc::clone(semaphore), done.clone());
    thread::spawn(move || {
        let permit = A::try_acquire_for(&semaphore, secs(60)).unwrap().unwrap();
        done.send(name).unwrap();
        let _ = release.recv();
        A::release(permit).unwrap();
    })
}

/// A [`waiter`] for each of `names`, in line in that order: each with the sender that tells
/// it to release.
fn in_line<A: Api>(
    server: &RedisServer,
    semaphore: &Arc<handle::Semaphore<A>>,
    names: &[&'static str],
    done: &mpsc::Sender<&'static str>,
) -> Vec<(mpsc::Sender<()>, thread::JoinHandle<()>)> {
    (names.iter().enumerate())
        .map(|(n, name)| {
            let (release, released) = mpsc::channel();
            let thread = waiter(semaphore, name, done, released);
            until_in_line(server, n as u64 + 1, || false);
            (release, thread)
        })
        .collect()
}

both_apis!(
    no_more_holders_than_permits_at_once,
    a_name_and_the_same_name_in_braces_are_two_semaphores,
    a_request_for_many_is_not_passed_by_later_requests_for_one,
    a_try_takes_a_free_permit_at_once,
    a_frozen_server_ends_a_wait_by_its_deadline,
    zero_permits_or_asking_for_more_than_there_are_is_an_error,
    waiters_are_served_in_the_order_they_came,
    permits_released_together_wake_as_many_waiters,
    grants_pushed_together_reach_the_process_in_one_round_trip,
    a_process_sends_its_first_heartbeat_once_it_has_joined,
    a_cancelled_waiter_leaves_the_queue,
    a_frozen_server_ends_a_timed_wait_by_its_deadline_not_its_io_timeout,
    a_crashed_holders_permit_goes_to_a_waiter_soon_after_its_expiry,
    a_killed_waiter_stops_delaying_the_queue_within_its_heartbeats,
    an_acquire_whose_reply_was_lost_holds_exactly_one_permit,
    a_release_whose_reply_was_lost_is_a_release,
    a_renewing_waiter_that_becomes_a_holder_keeps_its_permit_past_its_expiry,
);

fn no_more_holders_than_permits_at_once<A: Api>() {
    let server = RedisServer::start();
    let semaphore = Arc::new(A::semaphore(&server.client(), "s", 3).build().unwrap());
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (semaphore, inside, most) = (semaphore.clone(), inside.clone(), most.clone());
            thread::spawn(move || {
                for _ in 0..10 {
                    let permit = A::acquire(&semaphore).unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(2));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    A::release(permit).unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    assert_eq!(most.load(Ordering::SeqCst), 3);
    // Nothing is left but the fencing counter, and keys that expire by themselves.
    let keys = lasting_keys(&mut server.conn(), "semaphore:*", EXPIRES_WITHIN);
    assert_eq!(keys, ["semaphore:{s}:fence"]);
}

fn a_name_and_the_same_name_in_braces_are_two_semaphores<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let plain = A::semaphore(&client, "x", 1).build().unwrap();
    let braced = A::semaphore(&client, "{x}", 1).build().unwrap();
    let held = A::try_acquire(&plain).unwrap().expect("x is free");
    let other = A::try_acquire(&braced)
        .unwrap()
        .expect("{x} is another semaphore");
    assert!(A::try_acquire(&plain).unwrap().is_none(), "x has 1 permit");
    let mut keys: Vec<String> = server.conn().keys("semaphore:*:holders").unwrap();
    keys.sort();
    assert_eq!(keys, ["semaphore:={x}:holders", "semaphore:{x}:holders"]);
    A::release(held).unwrap();
    A::release(other).unwrap();
}

fn a_request_for_many_is_not_passed_by_later_requests_for_one<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let semaphore = Arc::new(A::semaphore(&client, "s", 2).build().unwrap());
    let one = A::acquire(&semaphore).unwrap();
    let big = {
        let semaphore = semaphore.clone();
        thread::spawn(move || {
            let permits = A::try_acquire_many_for(&semaphore, 2, secs(60)).unwrap();
            permits.is_some()
        })
    };
    until_in_line(&server, 1, || big.is_finished());
    // One permit is free, but the request for two came first.
    let late = A::try_acquire_for(&semaphore, Duration::from_millis(300)).unwrap();
    assert!(late.is_none());
    assert!(A::try_acquire(&semaphore).unwrap().is_none());
    A::release(one).unwrap();
    assert!(big.join().unwrap());
}

fn a_try_takes_a_free_permit_at_once<A: Api>() {
    let server = RedisServer::start();
    let semaphore = A::semaphore(&server.client(), "s", 2).build().unwrap();
    let a = A::try_acquire(&semaphore).unwrap().unwrap();
    let b = A::try_acquire(&semaphore).unwrap().unwrap();
    assert!(A::try_acquire(&semaphore).unwrap().is_none());
    assert_eq!(A::available(&semaphore).unwrap(), 0);
    assert!(b.fencing_token() > a.fencing_token());
    A::release(a).unwrap();
    assert_eq!(A::available(&semaphore).unwrap(), 1);
    A::release(b).unwrap();
}

fn a_frozen_server_ends_a_wait_by_its_deadline<A: Api>() {
    let server = RedisServer::start();
    let semaphore = A::semaphore(&server.client(), "s", 1)
        .io_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let permit = A::acquire(&semaphore).unwrap();
    server.pause();
    let started = Instant::now();
    let waited = A::try_acquire_for(&semaphore, Duration::from_millis(700));
    let took = started.elapsed();
    server.resume();
    assert!(matches!(waited, Err(_) | Ok(None)));
    assert!(took < secs(3), "the wait took {took:?}");
    drop(permit);
}

fn zero_permits_or_asking_for_more_than_there_are_is_an_error<A: Api>() {
    let server = RedisServer::start();
    assert!(matches!(
        A::semaphore(&server.client(), "s", 0).build(),
        Err(Error::InvalidArgument(_))
    ));
    let semaphore = A::semaphore(&server.client(), "s", 2).build().unwrap();
    assert!(matches!(
        A::try_acquire_many(&semaphore, 3),
        Err(Error::InvalidArgument(_))
    ));
}

/// Grants pushed together reach the process's waiters in one round trip of its waiting
/// connection: the `LPOP` behind its `BLPOP` takes those the `BLPOP` did not, where a `BLPOP`
/// each would take a round trip per grant.
/// A process's first heartbeat (an `EVAL` on its waiting connection) runs once it has joined
/// a line, not half a lapse window (here 30 s) after: the hub dates the grants it pops by its
/// heartbeats, and a grant it cannot date costs its waiter another ask.
fn waiters_are_served_in_the_order_they_came<A: Api>() {
    let server = RedisServer::start();
    let semaphore = Arc::new(A::semaphore(&server.client(), "s", 1).build().unwrap());
    let first = A::acquire(&semaphore).unwrap();
    let (done, order) = mpsc::channel();
    let mut releases = Vec::new();
    let mut threads = Vec::new();
    for (n, name) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let (release, released) = mpsc::channel();
        threads.push(waiter(&semaphore, name, &done, released));
        releases.push(release);
        until_in_line(&server, n as u64 + 1, || false);
    }
    A::release(first).unwrap();
    let mut served = Vec::new();
    for release in releases {
        served.push(order.recv_timeout(secs(30)).unwrap());
        release.send(()).unwrap();
    }
    assert_eq!(served, ["a", "b", "c", "d"]);
    for thread in threads {
        thread.join().unwrap();
    }
}
fn permits_released_together_wake_as_many_waiters<A: Api>() {
    let server = RedisServer::start();
    let semaphore = Arc::new(A::semaphore(&server.client(), "s", 3).build().unwrap());
    let all = A::acquire_many(&semaphore, 3).unwrap();
    let (done, woken) = mpsc::channel();
    let releases = in_line(&server, &semaphore, &["a", "b", "c"], &done);
    A::release(all).unwrap();
    let mut names: Vec<_> = (0..3)
        .map(|_| woken.recv_timeout(secs(30)).unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
    for (release, thread) in releases {
        release.send(()).unwrap();
        thread.join().unwrap();
    }
}
fn grants_pushed_together_reach_the_process_in_one_round_trip<A: Api>() {
    let server = RedisServer::start();
    // The holder is of another process (client): the waiters' hub waits alone.
    let holder = A::semaphore(&server.client(), "s", 4).build().unwrap();
    let all = A::acquire_many(&holder, 4).unwrap();
    let semaphore = Arc::new(A::semaphore(&server.client(), "s", 4).build().unwrap());
    let (done, woken) = mpsc::channel();
    let releases = in_line(&server, &semaphore, &["a", "b", "c", "d"], &done);
    let (blpops, lpops) = (server.calls("blpop"), server.calls("lpop"));
    // One script grants all four.
    A::release(all).unwrap();
    let mut names: Vec<_> = (0..4)
        .map(|_| woken.recv_timeout(secs(30)).unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "b", "c", "d"]);
    let blpops = server.calls("blpop") - blpops;
    assert!(blpops < 4, "{blpops} BLPOPs for 4 grants");
    assert!(server.calls("lpop") > lpops, "no LPOP took a grant");
    for (release, thread) in releases {
        release.send(()).unwrap();
        thread.join().unwrap();
    }
}
fn a_process_sends_its_first_heartbeat_once_it_has_joined<A: Api>() {
    let server = RedisServer::start();
    let holder = A::semaphore(&server.client(), "s", 1).build().unwrap();
    let permit = A::acquire(&holder).unwrap();
    let semaphore = A::semaphore(&server.client(), "s", 1)
        .heartbeat(secs(30))
        .build()
        .unwrap();
    let beats = server.calls("eval");
    let (done, woken) = mpsc::channel();
    let releases = in_line(&server, &Arc::new(semaphore), &["a"], &done);
    eventually(secs(10), "the process's first heartbeat", || {
        server.calls("eval") > beats
    });
    A::release(permit).unwrap();
    assert_eq!(woken.recv_timeout(secs(30)).unwrap(), "a");
    for (release, thread) in releases {
        release.send(()).unwrap();
        thread.join().unwrap();
    }
}
fn a_cancelled_waiter_leaves_the_queue<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::semaphore(&client, "s", 1).build().unwrap();
    let permit = A::acquire(&holder).unwrap();
    let token = redis_blpop_lock::CancelToken::new();
    let waiter = A::semaphore(&client, "s", 1)
        .cancel_token(token.clone())
        .build()
        .unwrap();
    let waiting = thread::spawn(move || A::acquire(&waiter).map(drop));
    until_in_line(&server, 1, || waiting.is_finished());
    token.cancel();
    assert!(matches!(
        waiting.join().unwrap(),
        Err(Error::Cancelled { .. })
    ));
    let queued: Vec<String> = server.conn().zrange("semaphore:{s}:queue", 0, -1).unwrap();
    assert!(queued.is_empty(), "{queued:?}");
    drop(permit);
}
fn a_frozen_server_ends_a_timed_wait_by_its_deadline_not_its_io_timeout<A: Api>() {
    let server = RedisServer::start();
    let semaphore = A::semaphore(&server.client(), "s", 1)
        .io_timeout(secs(20))
        .build()
        .unwrap();
    let permit = A::acquire(&semaphore).unwrap();
    server.pause();
    let started = Instant::now();
    let waited = A::try_acquire_for(&semaphore, Duration::from_millis(500));
    let took = started.elapsed();
    server.resume();
    assert!(waited.is_err() || waited.as_ref().unwrap().is_none());
    // The deadline and the grace (250 ms), with room for a loaded machine; not 20 s.
    assert!(took < secs(5), "the wait took {took:?}");
    drop(permit);
}

fn a_crashed_holders_permit_goes_to_a_waiter_soon_after_its_expiry<A: Api>() {
    let server = RedisServer::start();
    let mut holder = ChildProcess::spawn(
        "queue::semaphore::hold",
        &server.url(),
        &["s", "1", "1500", "-"],
    );
    holder.expect_line("acquired");
    holder.child.kill().unwrap();
    let left: Vec<(String, f64)> = server
        .conn()
        .zrange_withscores("semaphore:{s}:holders", 0, 0)
        .unwrap();
    let time: (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    let server_now_ms = time.0 * 1000 + time.1 / 1000;
    let expires_at =
        Instant::now() + Duration::from_millis((left[0].1 as u64).saturating_sub(server_now_ms));
    let semaphore = A::semaphore(&server.client(), "s", 1).build().unwrap();
    let permit = A::try_acquire_for(&semaphore, secs(60)).unwrap();
    assert!(permit.is_some());
    let late = Instant::now().saturating_duration_since(expires_at);
    assert!(
        late < Duration::from_millis(750),
        "took it {late:?} after the expiry"
    );
}

fn a_killed_waiter_stops_delaying_the_queue_within_its_heartbeats<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = A::semaphore(&client, "s", 1).build().unwrap();
    let permit = A::acquire(&holder).unwrap();
    // A waiter process, first in line, killed while it waits.
    let mut dead = ChildProcess::spawn("queue::semaphore::wait", &server.url(), &["s", "1"]);
    dead.expect_line("waiting");
    until_in_line(&server, 1, || false);
    let live = Arc::new(
        A::semaphore(&client, "s", 1)
            .heartbeat(Duration::from_millis(500))
            .build()
            .unwrap(),
    );
    let next = {
        let live = live.clone();
        thread::spawn(move || A::try_acquire_for(&live, secs(60)).unwrap().map(A::release))
    };
    until_in_line(&server, 2, || next.is_finished());
    dead.child.kill().unwrap();
    let killed = Instant::now();
    A::release(permit).unwrap();
    assert!(next.join().unwrap().is_some());
    // The dead waiter's default heartbeat is 1 s: it lapses 2 s after its last one.
    let waited = killed.elapsed();
    assert!(waited < secs(8), "the queue was held up {waited:?}");
}

fn an_acquire_whose_reply_was_lost_holds_exactly_one_permit<A: Api>() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let semaphore = A::semaphore(&proxy.client(), "s", 2)
        .id("me")
        .build()
        .unwrap();
    proxy.drop_reply_to("me:0");
    let permit = A::try_acquire(&semaphore).unwrap().expect("granted");
    let holders: Vec<String> = server
        .conn()
        .zrange("semaphore:{s}:holders", 0, -1)
        .unwrap();
    let holders: Vec<&str> = holders.iter().map(|id| strip_process(id)).collect();
    assert_eq!(holders, ["me:0"]);
    assert_eq!(A::available(&semaphore).unwrap(), 1);
    A::release(permit).unwrap();
    assert_eq!(A::available(&semaphore).unwrap(), 2);
}

fn a_release_whose_reply_was_lost_is_a_release<A: Api>() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let semaphore = A::semaphore(&proxy.client(), "s", 1)
        .id("me")
        .auto_renewal(false)
        .build()
        .unwrap();
    let permit = A::acquire(&semaphore).unwrap();
    proxy.drop_reply_to("me:0");
    A::release(permit).unwrap();
    let holders: Vec<String> = server
        .conn()
        .zrange("semaphore:{s}:holders", 0, -1)
        .unwrap();
    assert!(holders.is_empty(), "{holders:?}");
}

fn a_renewing_waiter_that_becomes_a_holder_keeps_its_permit_past_its_expiry<A: Api>() {
    let server = RedisServer::start();
    let client = server.client();
    let semaphore = |name| {
        A::semaphore(&client, name, 1)
            .expire(secs(1))
            .heartbeat(Duration::from_millis(200))
            .build()
            .unwrap()
    };
    let holder = semaphore("s");
    let permit = A::acquire(&holder).unwrap();
    let waiter = Arc::new(semaphore("s"));
    let waiting = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let permit = A::try_acquire_for(&waiter, secs(60)).unwrap().unwrap();
            // Three expiries after the hand-off, the pushed grant was claimed and renewed.
            thread::sleep(Duration::from_millis(3000));
            let lost = permit.lost();
            let token = permit.fencing_token();
            (lost, token, A::release(permit))
        })
    };
    until_in_line(&server, 1, || waiting.is_finished());
    // Longer than the waiter's expiry and lapse window: its lease starts at the grant.
    thread::sleep(Duration::from_millis(1500));
    A::release(permit).unwrap();
    let (lost, token, released) = waiting.join().unwrap();
    // In this order: a permit not reported lost must still be the holder's at its release.
    assert!(!lost, "a permit taken after a wait was reported lost");
    assert!(token.is_some());
    released.expect("released as the holder, as lost() said");
}

#[test]
fn a_semaphore_on_a_quorum_is_refused_with_the_reason() {
    let servers: Vec<_> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = Quorum::new(servers.iter().map(RedisServer::client)).unwrap();
    match Semaphore::new(&quorum, "s", 2) {
        Err(Error::Unsupported(why)) => assert!(why.contains("independent servers"), "{why}"),
        other => panic!("not refused: {:?}", other.map(|s| s.permits())),
    }
}

#[test]
fn a_stopped_waiter_that_lapsed_rejoins_behind_and_never_holds_what_it_was_not_granted() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Semaphore::new(&client, "s", 1).unwrap();
    let permit = holder.acquire().unwrap();
    let mut stopped =
        ChildProcess::spawn("queue::semaphore::wait", &server.url(), &["s", "1", "200"]);
    stopped.expect_line("waiting");
    until_in_line(&server, 1, || false);
    let line = || -> Vec<String> { server.conn().zrange("semaphore:{s}:queue", 0, -1).unwrap() };
    let stopped_id = line().remove(0);
    stopped.signal("STOP");
    // Its entry lapses 400 ms after its last heartbeat; a waiter that comes later is first.
    thread::sleep(Duration::from_millis(1200));
    let next = Arc::new(Semaphore::new(&client, "s", 1).unwrap());
    let (got, taken) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let later = {
        let next = next.clone();
        thread::spawn(move || {
            let permit = next.try_acquire_for(secs(60)).unwrap().unwrap();
            got.send(()).unwrap();
            released.recv().unwrap();
            permit.release().unwrap();
        })
    };
    // The stopped waiter's lapsed entry stays in the queue until a script purges it: the later
    // one is in line once the queue holds another id.
    eventually(BLOCK_LIMIT, "the later waiter in line", || {
        line().iter().any(|id| *id != stopped_id) || later.is_finished()
    });
    permit.release().unwrap();
    taken.recv_timeout(secs(30)).unwrap();
    stopped.signal("CONT");
    // Back, it finds itself out of the queue and joins behind the holder: it does not hold.
    let state = || -> Vec<String> {
        server
            .conn()
            .zrange("semaphore:{s}:holders", 0, -1)
            .unwrap()
    };
    thread::sleep(Duration::from_millis(500));
    assert_eq!(state().len(), 1, "two holders of one permit: {:?}", state());
    release.send(()).unwrap();
    later.join().unwrap();
    stopped.expect_line("acquired");
    stopped.wait_success();
}
