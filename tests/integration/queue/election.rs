//! Leader election against real servers: one leader at a time in campaign order, terms that
//! grow, a record anyone can read, watches told of every change without polling, and leaders
//! that crash or pause succeeded at their expiry.

use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::{handle, Blocking, Election, Error, Leader, Quorum, Watched};

use crate::support::{
    both_apis, ms, secs, send_signal, strip_process, Api, ChildProcess, RedisServer,
};

/// Generous: how long a watch may take to report a change on a loaded machine. Reports come
/// within a round trip or two; only a test that failed waits this long.
const TOLD_WITHIN: Duration = Duration::from_secs(5);

/// Election `name` on `server`, on API `A`, its leases lasting `expire`.
fn election_on<A: Api>(server: &RedisServer, name: &str, expire: Duration) -> handle::Election<A> {
    A::election(&server.client(), name)
        .expire(expire)
        .build()
        .unwrap()
}

/// Election `name` on `server`, on the blocking API.
fn election(server: &RedisServer, name: &str, expire: Duration) -> Election {
    election_on::<Blocking>(server, name, expire)
}

/// The watch's next change, within [`TOLD_WITHIN`]: the leader, or `None` for nobody (a
/// watch of a server that answers always knows).
fn next_change<A: Api>(watch: &mut handle::Watch<A>) -> Option<Leader> {
    match next_watched(watch) {
        Watched::Unknown { reason } => panic!("the watch did not know who leads: {reason}"),
        known => known.into_leader(),
    }
}

/// The watch's next change, within [`TOLD_WITHIN`].
fn next_watched<A: Api>(watch: &mut handle::Watch<A>) -> Watched {
    A::changed_for(watch, TOLD_WITHIN)
        .unwrap_or_else(|| panic!("no change reported within {TOLD_WITHIN:?}"))
}

/// Campaigns for election `args[0]` (lease `args[1]` ms, renewed) with info `args[2]`, says
/// when it waits and when it leads (with its term), then says "leading" every 20 ms until its
/// loss notice comes, which it says once before it exits. Killed or stopped by the test.
pub fn candidate(client: &redis::Client, args: &[String]) {
    let election = Election::builder(client, &args[0])
        .expire(Duration::from_millis(args[1].parse().unwrap()))
        .build()
        .unwrap();
    println!("campaigning");
    let leadership = election.campaign(&args[2]).unwrap();
    println!("leads term={}", leadership.term());
    let lost = leadership.lost_token();
    while !lost.wait_timeout(ms(20)) {
        println!("leading");
    }
    println!("lost");
}

both_apis!(
    the_first_candidate_leads_with_its_info_and_anyone_reads_it,
    nobody_leads_an_election_nobody_campaigned_in,
    a_second_candidate_waits_while_the_first_leads,
    candidates_lead_in_the_order_they_campaigned_with_growing_terms,
    a_resigned_leader_leaves_nobody_leading_when_nobody_waits,
    a_dropped_leadership_resigns,
    a_watch_starts_with_the_leader_now_and_reports_each_change,
    a_watch_reports_the_successor_when_a_leader_resigns_to_a_waiting_candidate,
);

fn the_first_candidate_leads_with_its_info_and_anyone_reads_it<A: Api>() {
    let server = RedisServer::start();
    let elected = election_on::<A>(&server, "jobs", secs(10));
    let leadership = A::campaign(&elected, "10.0.0.5:8080").unwrap();
    let reader = election_on::<A>(&server, "jobs", secs(10));
    let leader = A::leader(&reader).unwrap().expect("a leader");
    assert_eq!(leader.info, "10.0.0.5:8080");
    assert_eq!(leader.term, leadership.term());
    assert_eq!(leader.id, leadership.id());
    assert!(leader.since.elapsed().unwrap_or_default() < secs(60));
}

fn nobody_leads_an_election_nobody_campaigned_in<A: Api>() {
    let server = RedisServer::start();
    let election = election_on::<A>(&server, "jobs", secs(10));
    assert_eq!(A::leader(&election).unwrap(), None);
}

fn a_second_candidate_waits_while_the_first_leads<A: Api>() {
    let server = RedisServer::start();
    let first = election_on::<A>(&server, "jobs", secs(10));
    let _leading = A::campaign(&first, "a").unwrap();
    let second = election_on::<A>(&server, "jobs", secs(10));
    assert!(A::try_campaign_for(&second, "b", ms(200))
        .unwrap()
        .is_none());
}

fn candidates_lead_in_the_order_they_campaigned_with_growing_terms<A: Api>() {
    let server = RedisServer::start();
    let first = A::campaign(&election_on::<A>(&server, "jobs", secs(10)), "0").unwrap();
    let mut waiting = Vec::new();
    for i in 1..=3 {
        let candidate = election_on::<A>(&server, "jobs", secs(10));
        waiting.push(thread::spawn(move || {
            let leadership = A::campaign(&candidate, &i.to_string()).unwrap();
            let led = (i, leadership.term(), Instant::now());
            A::resign(leadership).unwrap();
            led
        }));
        server.until_queued(Primitive::Election, "jobs", i, secs(10), || false);
    }
    let first_term = first.term();
    A::resign(first).unwrap();
    let mut led: Vec<(u64, u64, Instant)> =
        waiting.into_iter().map(|t| t.join().unwrap()).collect();
    led.sort_by_key(|(_, _, at)| *at);
    assert_eq!(led.iter().map(|(i, ..)| *i).collect::<Vec<_>>(), [1, 2, 3]);
    let terms: Vec<u64> = led.iter().map(|(_, term, _)| *term).collect();
    assert!(
        first_term < terms[0] && terms[0] < terms[1] && terms[1] < terms[2],
        "{terms:?}"
    );
}

fn a_resigned_leader_leaves_nobody_leading_when_nobody_waits<A: Api>() {
    let server = RedisServer::start();
    let election = election_on::<A>(&server, "jobs", secs(10));
    A::resign(A::campaign(&election, "a").unwrap()).unwrap();
    assert_eq!(A::leader(&election).unwrap(), None);
}

fn a_dropped_leadership_resigns<A: Api>() {
    let server = RedisServer::start();
    let election = election_on::<A>(&server, "jobs", secs(10));
    drop(A::campaign(&election, "a").unwrap());
    assert_eq!(A::leader(&election).unwrap(), None);
    let next = A::try_campaign_for(&election, "b", Duration::ZERO).unwrap();
    assert!(next.is_some());
}

fn a_watch_starts_with_the_leader_now_and_reports_each_change<A: Api>() {
    let server = RedisServer::start();
    let watcher = election_on::<A>(&server, "jobs", secs(10));
    let mut watch = A::watch(&watcher).unwrap();
    assert_eq!(next_change::<A>(&mut watch), None);
    let candidate = election_on::<A>(&server, "jobs", secs(10));
    let a = A::campaign(&candidate, "a").unwrap();
    let seen = next_change::<A>(&mut watch).expect("a leader");
    assert_eq!((seen.info.as_str(), seen.term), ("a", a.term()));
    A::resign(a).unwrap();
    assert_eq!(next_change::<A>(&mut watch), None);
    let b = A::campaign(&candidate, "b").unwrap();
    let seen = next_change::<A>(&mut watch).expect("a leader");
    assert_eq!((seen.info.as_str(), seen.term), ("b", b.term()));
}

fn a_watch_reports_the_successor_when_a_leader_resigns_to_a_waiting_candidate<A: Api>() {
    let server = RedisServer::start();
    let first = A::campaign(&election_on::<A>(&server, "jobs", secs(10)), "a").unwrap();
    let mut watch = A::watch(&election_on::<A>(&server, "jobs", secs(10))).unwrap();
    assert_eq!(
        next_change::<A>(&mut watch).map(|l| l.info),
        Some("a".into())
    );
    let second = election_on::<A>(&server, "jobs", secs(10));
    let waiting = thread::spawn(move || A::campaign(&second, "b"));
    server.until_queued(Primitive::Election, "jobs", 1, secs(10), || {
        waiting.is_finished()
    });
    A::resign(first).unwrap();
    // Kept until the watch has spoken: its resignation would be a change of its own, and the
    // watch reports the state it finds, which may be the later one.
    let successor = waiting.join().unwrap().unwrap();
    // Never "nobody" in between: the successor was granted before the resignation ended.
    let seen = next_change::<A>(&mut watch).expect("the successor");
    assert_eq!((seen.info.as_str(), seen.term), ("b", successor.term()));
}

/// Pushes the word an operator's reset pushes ("reset": ask again, read the leader) to the
/// inbox of every process with a heartbeat in election `name`.
fn wake_every_process(server: &RedisServer, name: &str) {
    let mut conn = server.client().get_connection().unwrap();
    let beats: Vec<String> = redis::cmd("KEYS")
        .arg(format!("*{{{name}}}:beats"))
        .query(&mut conn)
        .unwrap();
    let [beats] = &beats[..] else {
        panic!("one election's heartbeats, found {beats:?}")
    };
    let processes: Vec<String> = redis::cmd("ZRANGE")
        .arg(beats)
        .arg(0)
        .arg(-1)
        .query(&mut conn)
        .unwrap();
    assert!(!processes.is_empty(), "no process has a heartbeat");
    let signals = beats.trim_end_matches("beats").to_owned() + "signal:";
    for process in processes {
        let _: i64 = redis::cmd("LPUSH")
            .arg(format!("{signals}{process}"))
            .arg("reset")
            .query(&mut conn)
            .unwrap();
    }
}

/// A successor slow to announce itself (its replies held up 400 ms, as on a loaded machine or
/// a slow link) is still no "nobody" in between: the watch waits for it as long as its
/// requests may take.
#[test]
fn a_watch_waits_for_a_slow_successor_rather_than_report_nobody() {
    let server = RedisServer::start();
    let proxy = crate::support::Proxy::start(server.port);
    let first = election(&server, "jobs", secs(10)).campaign("a").unwrap();
    let mut watch = election(&server, "jobs", secs(10)).watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    let second = Election::builder(&proxy.client(), "jobs")
        .expire(secs(10))
        .build()
        .unwrap();
    let waiting = thread::spawn(move || second.campaign("b"));
    server.until_queued(Primitive::Election, "jobs", 1, secs(10), || {
        waiting.is_finished()
    });
    proxy.hold_replies(true);
    first.resign().unwrap();
    // The watching process reads during the hand-over, as at an operator's reset, which
    // pushes "reset" to every live process's inbox: it finds the successor granted, not
    // announced.
    wake_every_process(&server, "jobs");
    thread::sleep(Duration::from_millis(400));
    proxy.hold_replies(false);
    // Kept until the watch has spoken, as above.
    let successor = waiting.join().unwrap().unwrap();
    let seen = next_change(&mut watch).expect("the successor, never nobody");
    assert_eq!((seen.info.as_str(), seen.term), ("b", successor.term()));
}

#[test]
fn a_watch_of_a_leader_that_crashed_with_nobody_in_line_reports_nobody_at_its_expiry() {
    let server = RedisServer::start();
    let mut leader = ChildProcess::spawn(
        "queue::election::candidate",
        &server.url(),
        &["jobs", "500", "a"],
    );
    leader.expect_line("leads");
    let mut watch = election(&server, "jobs", secs(10)).watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    send_signal(leader.pid(), "KILL");
    let killed = Instant::now();
    assert_eq!(next_change(&mut watch), None);
    // At the lease's end (500 ms at most after the last renewal), not before.
    assert!(
        killed.elapsed() < secs(3),
        "reported {:?} after the kill",
        killed.elapsed()
    );
}

#[test]
fn a_killed_leaders_standbys_take_over_in_order_with_growing_terms() {
    let server = RedisServer::start();
    let url = server.url();
    let mut leader = ChildProcess::spawn("queue::election::candidate", &url, &["jobs", "400", "0"]);
    leader.expect_line("leads");
    let mut standbys = Vec::new();
    for i in 1..=3 {
        let mut standby = ChildProcess::spawn(
            "queue::election::candidate",
            &url,
            &["jobs", "400", &i.to_string()],
        );
        standby.expect_line("campaigning");
        server.until_queued(Primitive::Election, "jobs", i, secs(10), || false);
        standbys.push(standby);
    }
    let mut watch = election(&server, "jobs", secs(10)).watch().unwrap();
    let mut last = next_change(&mut watch).expect("the first leader");
    assert_eq!(last.info, "0");
    send_signal(leader.pid(), "KILL");
    for (i, standby) in standbys.iter_mut().enumerate() {
        let line = standby.expect_line("leads");
        let term: u64 = line
            .trim_start_matches("leads term=")
            .trim()
            .parse()
            .unwrap();
        let seen = next_change(&mut watch)
            .unwrap_or_else(|| panic!("no successor after standby {i}: {line}"));
        assert_eq!(seen.info, (i + 1).to_string());
        assert_eq!(seen.term, term);
        assert!(
            seen.term > last.term,
            "term {} after {}",
            seen.term,
            last.term
        );
        last = seen;
        send_signal(standby.pid(), "KILL");
    }
    assert_eq!(next_change(&mut watch), None);
}

#[test]
fn a_leader_paused_past_its_expiry_is_told_at_once_that_it_lost_and_never_leads_again() {
    let server = RedisServer::start();
    let mut leader = ChildProcess::spawn(
        "queue::election::candidate",
        &server.url(),
        &["jobs", "300", "a"],
    );
    leader.expect_line("leads");
    send_signal(leader.pid(), "STOP");
    let successor = election(&server, "jobs", secs(10));
    let next = successor.campaign("b").unwrap();
    send_signal(leader.pid(), "CONT");
    // Lines written before the pause may still be in the pipe; the next one that is not
    // "leading" must be "lost", and nothing follows it.
    let mut line = leader.expect_line("l");
    while line.trim() == "leading" {
        line = leader.expect_line("l");
    }
    assert_eq!(line.trim(), "lost");
    assert!(!next.lost());
    assert_eq!(
        successor.leader().unwrap().map(|l| l.info),
        Some("b".into())
    );
}

#[test]
fn a_watch_reports_nobody_after_a_server_restart_lost_the_election() {
    let mut server = RedisServer::start();
    let candidate = election(&server, "jobs", secs(10));
    let leadership = candidate.campaign("a").unwrap();
    let mut watch = election(&server, "jobs", secs(10)).watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    server.restart_after(ms(100));
    // It may not have known who leads while the server was away.
    let mut after = next_watched(&mut watch);
    if !after.is_known() {
        after = next_watched(&mut watch);
    }
    assert_eq!(after, Watched::Nobody);
    drop(leadership);
    let again = candidate.campaign("b").unwrap();
    let seen = next_change(&mut watch).expect("the new leader");
    assert_eq!((seen.info.as_str(), seen.term), ("b", again.term()));
}

/// The lease and I/O timeout of the elections of a server that dies.
const LEASE: Duration = Duration::from_secs(1);
const IO_TIMEOUT: Duration = Duration::from_millis(500);

/// How soon a watch says it does not know who leads once the server is gone: the I/O timeout
/// plus the lease, and a second of slack for a loaded machine.
const UNKNOWN_WITHIN: Duration = Duration::from_millis(500 + 1000 + 1000);

/// A handle on election "jobs" with a [`LEASE`] and an [`IO_TIMEOUT`].
fn short_lived(server: &RedisServer) -> Election {
    Election::builder(&server.client(), "jobs")
        .expire(LEASE)
        .io_timeout(IO_TIMEOUT)
        .build()
        .unwrap()
}

#[test]
fn a_watch_says_once_that_it_does_not_know_when_the_server_is_killed_then_nobody_after_a_restart() {
    let mut server = RedisServer::start();
    let leadership = short_lived(&server).campaign("a").unwrap();
    let mut watch = short_lived(&server).watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    server.kill();
    let killed = Instant::now();
    let change = (watch.changed_for(UNKNOWN_WITHIN))
        .unwrap_or_else(|| panic!("nothing said within {UNKNOWN_WITHIN:?} of the kill"));
    let after = killed.elapsed();
    assert!(
        matches!(&change, Watched::Unknown { reason } if !reason.is_empty()),
        "{change:?} after the kill"
    );
    eprintln!("unknown {after:?} after the kill: {change:?}");
    // Once, however long the server stays away: past the leader's own loss notice.
    assert!(leadership.lost_token().wait_timeout(secs(5)));
    drop(leadership);
    assert_eq!(watch.changed_for(LEASE + IO_TIMEOUT), None);
    server.start_again();
    assert_eq!(next_watched(&mut watch), Watched::Nobody);
    let again = short_lived(&server).campaign("b").unwrap();
    let seen = next_change(&mut watch).expect("the new leader");
    assert_eq!((seen.info.as_str(), seen.term), ("b", again.term()));
}

#[test]
fn a_watch_of_a_frozen_server_says_it_does_not_know_within_the_lease_and_the_io_timeout() {
    let server = RedisServer::start();
    let leadership = short_lived(&server).campaign("a").unwrap();
    let mut watch = short_lived(&server).watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    // Connections stay open, and nothing answers.
    server.pause();
    let frozen = Instant::now();
    let change = (watch.changed_for(UNKNOWN_WITHIN))
        .unwrap_or_else(|| panic!("nothing said within {UNKNOWN_WITHIN:?} of the freeze"));
    let after = frozen.elapsed();
    server.resume();
    assert!(!change.is_known(), "{change:?} after the freeze");
    eprintln!("unknown {after:?} after the freeze: {change:?}");
    // The server answers again: whoever leads now (the lease ran on meanwhile).
    let change = next_watched(&mut watch);
    assert!(change.is_known(), "{change:?} after the server came back");
    drop(leadership);
}

#[test]
fn a_thousand_watches_in_a_process_share_its_one_waiting_connection() {
    let server = RedisServer::start();
    let election = election(&server, "jobs", secs(10));
    let mut watches: Vec<_> = (0..1000).map(|_| election.watch().unwrap()).collect();
    for watch in &mut watches {
        assert_eq!(next_change(watch), None);
    }
    let leadership = election.campaign("a").unwrap();
    for watch in &mut watches {
        assert_eq!(next_change(watch).map(|l| l.term), Some(leadership.term()));
    }
    // The hub's connection, and the one the campaign and reads share.
    let list: String = redis::cmd("CLIENT")
        .arg(&["LIST", "TYPE", "normal"])
        .query(&mut server.conn())
        .unwrap();
    // Less the connection that asked.
    let clients = list.lines().count() - 1;
    assert!(clients <= 3, "{clients} connections for 1,000 watches");
}

#[test]
fn a_leaders_id_ends_in_its_process() {
    let server = RedisServer::start();
    let election = Election::builder(&server.client(), "jobs")
        .id("node-a")
        .build()
        .unwrap();
    let leadership = election.campaign("").unwrap();
    assert_eq!(strip_process(leadership.id()), "node-a:0");
}

#[test]
fn an_election_is_refused_on_a_quorum() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let clients: Vec<redis::Client> = servers.iter().map(RedisServer::client).collect();
    let quorum = Quorum::new(clients).unwrap();
    assert!(matches!(
        Election::new(&quorum, "jobs"),
        Err(Error::Unsupported(_))
    ));
}

#[test]
fn an_operators_reset_of_the_leader_tells_the_watchers_that_nobody_leads() {
    let server = RedisServer::start();
    let leadership = election(&server, "jobs", ms(600)).campaign("a").unwrap();
    let mut watch = election(&server, "jobs", secs(10)).watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    let removed = inspect::reset_queue(
        &server.client(),
        Primitive::Election,
        "jobs",
        None,
        1,
        secs(5),
    )
    .unwrap();
    assert_eq!(removed, 1);
    assert_eq!(next_change(&mut watch), None);
    // Its next renewal (within 400 ms) finds the office gone.
    assert!(leadership.lost_token().wait_timeout(secs(5)));
    assert!(leadership.lost());
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_watch_reports_a_blocking_candidates_leadership() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let watcher = redis_blpop_lock::aio::Election::new(&server.client(), "jobs").unwrap();
    let candidate = election(&server, "jobs", secs(10));
    runtime.block_on(async {
        let mut watch = watcher.watch().await.unwrap();
        let first = tokio::time::timeout(TOLD_WITHIN, watch.changed()).await;
        assert_eq!(first.unwrap(), Watched::Nobody);
        let leadership = tokio::task::spawn_blocking(move || candidate.campaign("a").unwrap())
            .await
            .unwrap();
        let seen = tokio::time::timeout(TOLD_WITHIN, watch.changed()).await;
        assert_eq!(
            seen.unwrap().leader().map(|l| l.term),
            Some(leadership.term())
        );
    });
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_watch_says_once_that_it_does_not_know_when_the_server_is_killed_then_nobody() {
    let mut server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let leadership = short_lived(&server).campaign("a").unwrap();
    let watcher = redis_blpop_lock::aio::Election::builder(&server.client(), "jobs")
        .expire(LEASE)
        .io_timeout(IO_TIMEOUT)
        .build()
        .unwrap();
    let mut watch = runtime.block_on(async {
        let mut watch = watcher.watch().await.unwrap();
        let first = tokio::time::timeout(TOLD_WITHIN, watch.changed()).await;
        assert_eq!(
            first.unwrap().into_leader().map(|l| l.info),
            Some("a".into())
        );
        watch
    });
    server.kill();
    let killed = Instant::now();
    runtime.block_on(async {
        let change = tokio::time::timeout(UNKNOWN_WITHIN, watch.changed()).await;
        let change =
            change.unwrap_or_else(|_| panic!("nothing said within {UNKNOWN_WITHIN:?} of the kill"));
        let after = killed.elapsed();
        assert!(!change.is_known(), "{change:?} after the kill");
        eprintln!("unknown {after:?} after the kill: {change:?}");
        // Once, however long the server stays away.
        let more = tokio::time::timeout(LEASE + IO_TIMEOUT, watch.changed()).await;
        assert!(more.is_err(), "{more:?} after the first unknown");
    });
    assert!(leadership.lost_token().wait_timeout(secs(5)));
    drop(leadership);
    server.start_again();
    runtime.block_on(async {
        let change = tokio::time::timeout(TOLD_WITHIN, watch.changed()).await;
        assert_eq!(change.unwrap(), Watched::Nobody);
    });
}

#[test]
fn reset_all_tells_an_elections_watchers_that_nobody_leads() {
    let server = RedisServer::start();
    let leadership = election(&server, "jobs", secs(30)).campaign("a").unwrap();
    let mut watch = election(&server, "jobs", secs(30)).watch().unwrap();
    assert_eq!(next_change(&mut watch).map(|l| l.info), Some("a".into()));
    assert_eq!(redis_blpop_lock::reset_all(&server.client()).unwrap(), 1);
    // Long before the 30 s lease would have ended.
    assert_eq!(next_change(&mut watch), None);
    drop(leadership);
}
