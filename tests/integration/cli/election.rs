//! `redis-lock lead` and `leader`, and the operator's view of elections: the command runs
//! while leading and knows its term, candidates lead in turn, a killed leader's command dies
//! with it and its successor leads at the lease's expiry, a reset leader's command is stopped,
//! and the leader is read once or watched.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::Election;

use crate::cli::commands::{
    finish, gone, list_json, read, redis_lock, sleeping, stderr, stdout, Scratch, HUNG,
    NOTES_SIGTERM,
};
use crate::cli::queues::{end, refused_on_a_quorum};
use crate::support::{eventually, ms, secs, send_signal, strip_process, RedisServer};

/// A `redis-lock lead jobs OPTIONS... -- sh -c SCRIPT sh NOTES`: SCRIPT writes to `$1`.
fn lead(server: &RedisServer, options: &[&str], script: &str, notes: &Path) -> Child {
    redis_lock(server)
        .args(["lead", "jobs"])
        .args(options)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(notes)
        .spawn()
        .unwrap()
}

/// The lines a child writes to its stdout, as they come.
struct Lines(Receiver<String>);

impl Lines {
    fn of(child: &mut Child) -> Lines {
        let out = child.stdout.take().expect("a piped stdout");
        let (lines, received) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        Lines(received)
    }

    /// The next line, which a test that did not hang gets well within [`HUNG`].
    fn next(&self) -> String {
        self.0.recv_timeout(HUNG).expect("a line from redis-lock")
    }

    fn next_json(&self) -> serde_json::Value {
        serde_json::from_str(&self.next()).unwrap()
    }

    /// The next line, if it comes within `limit`.
    fn next_within(&self, limit: Duration) -> Option<String> {
        self.0.recv_timeout(limit).ok()
    }
}

#[test]
fn lead_runs_the_command_with_the_term_and_the_info_in_its_environment() {
    let server = RedisServer::start();
    let mut lead = redis_lock(&server)
        .args(["lead", "jobs", "--info", "host-a", "--", "sh", "-c"])
        .arg(r#"echo "$REDIS_LOCK_TERM $REDIS_LOCK_INFO $REDIS_LOCK_FENCE"; exec sleep 60"#)
        .spawn()
        .unwrap();
    let said = Lines::of(&mut lead).next();
    let leader = Election::new(&server.client(), "jobs").unwrap().leader();
    let leader = leader.unwrap().expect("a leader while the command runs");
    // The term is the leadership's fencing token, as every hold's is $REDIS_LOCK_FENCE.
    assert_eq!(said, format!("{0} host-a {0}", leader.term));
    end(lead);
}

#[test]
fn a_second_lead_runs_its_command_only_after_the_first_leaders_command_exits() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let notes = scratch.file("notes");
    // Leads until the test closes its stdin.
    let until_stdin_closes =
        r#"echo "first $REDIS_LOCK_TERM" >> "$1"; read _; echo "first ends" >> "$1""#;
    let mut first = redis_lock(&server)
        .args(["lead", "jobs", "--", "sh", "-c", until_stdin_closes, "sh"])
        .arg(&notes)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(HUNG, "the first to lead", || read(&notes).contains("first"));
    let second = lead(
        &server,
        &[],
        r#"echo "second $REDIS_LOCK_TERM" >> "$1""#,
        &notes,
    );
    server.until_queued(Primitive::Election, "jobs", 1, HUNG, || false);
    drop(first.stdin.take());
    for output in [finish(first), finish(second)] {
        assert!(output.status.success(), "{}", stderr(&output));
    }
    let notes = read(&notes);
    let lines: Vec<(&str, &str)> = (notes.lines())
        .map(|line| line.split_once(' ').unwrap())
        .collect();
    let term = |at: usize| lines[at].1.parse::<u64>().unwrap();
    assert_eq!(
        lines.iter().map(|(who, _)| *who).collect::<Vec<_>>(),
        ["first", "first", "second"],
        "{notes}"
    );
    assert_eq!(lines[1].1, "ends", "{notes}");
    assert!(term(0) < term(2), "{notes}");
}

#[cfg(target_os = "linux")]
#[test]
fn a_sigkilled_leads_command_dies_with_it_and_the_next_candidate_leads_at_the_lease_expiry() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (mut first, command) = sleeping(&server, &scratch, &["lead", "jobs", "--expire", "2"]);
    let second = redis_lock(&server)
        .args(["lead", "jobs", "--expire", "2", "--", "true"])
        .spawn()
        .unwrap();
    server.until_queued(Primitive::Election, "jobs", 1, HUNG, || false);
    // The lease ends no sooner than this long after `read_at`.
    let read_at = Instant::now();
    let queue = inspect::queue(&server.client(), Primitive::Election, "jobs", secs(5)).unwrap();
    let lease = queue.holders[0].ttl.expect("a lease");
    first.kill().unwrap();
    first.wait().unwrap();
    eventually(secs(1), "the command to die with redis-lock", || {
        gone(&command)
    });
    let output = finish(second);
    assert!(output.status.success(), "{}", stderr(&output));
    // A millisecond for the server's rounding of the lease.
    assert!(
        read_at.elapsed() + ms(1) >= lease,
        "led after {:?}, before the lease of {lease:?} ended",
        read_at.elapsed()
    );
}

#[test]
fn reset_election_stops_the_leaders_command_and_lead_exits_75() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let notes = scratch.file("notes");
    // A 1 s lease is renewed, and so finds the reset, every 2/3 s.
    let leading = lead(&server, &["--expire", "1"], NOTES_SIGTERM, &notes);
    eventually(HUNG, "the command to start", || {
        read(&notes).contains("started")
    });
    let reset = redis_lock(&server)
        .args(["reset", "--election", "jobs"])
        .output()
        .unwrap();
    assert!(reset.status.success(), "{}", stderr(&reset));
    assert_eq!(
        stdout(&reset),
        "election \"jobs\": ended the leader's term (the first candidate in line, if any, leads \
         next)\n"
    );
    let output = finish(leading);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("lost the leadership of election \"jobs\""),
        "{}",
        stderr(&output)
    );
    assert!(read(&notes).contains("term"), "the command got no SIGTERM");
}

#[test]
fn a_signal_while_campaigning_runs_nothing_and_leaves_the_line() {
    let server = RedisServer::start();
    let election = Election::new(&server.client(), "jobs").unwrap();
    let _leading = election.campaign("a").unwrap();
    let waiting = redis_lock(&server)
        .args(["lead", "jobs", "--", "echo", "ran"])
        .spawn()
        .unwrap();
    server.until_queued(Primitive::Election, "jobs", 1, HUNG, || false);
    send_signal(waiting.id(), "TERM");
    let output = finish(waiting);
    assert_eq!(output.status.code(), Some(128 + 15), "{}", stderr(&output));
    assert_eq!(stdout(&output), "", "the command ran");
    assert!(
        stderr(&output).contains("interrupted while waiting for the leadership"),
        "{}",
        stderr(&output)
    );
    // It left the line on its way out, not at its lapse.
    let queue = inspect::queue(&server.client(), Primitive::Election, "jobs", secs(5)).unwrap();
    assert!(queue.waiters.is_empty(), "{:?}", queue.waiters);
}

/// What `redis-lock leader jobs OPTIONS...` printed, once it exited with `code`.
fn leader(server: &RedisServer, options: &[&str], code: i32) -> String {
    let output = redis_lock(server)
        .args(["leader", "jobs"])
        .args(options)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(code), "{}", stderr(&output));
    stdout(&output)
}

#[test]
fn leader_says_no_leader_and_exits_1_when_nobody_leads() {
    let server = RedisServer::start();
    assert_eq!(leader(&server, &[], 1), "election \"jobs\": no leader\n");
    let json: serde_json::Value = serde_json::from_str(&leader(&server, &["--json"], 1)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"name": "jobs", "known": true, "led": false, "id": null,
                           "info": null, "term": null, "since": null, "since_ms": null,
                           "reason": null})
    );
}

#[test]
fn leader_shows_the_leaders_info_term_and_since_and_exits_0() {
    let server = RedisServer::start();
    let election = Election::new(&server.client(), "jobs").unwrap();
    let leadership = election.campaign("10.0.0.5:8080").unwrap();
    let since = election.leader().unwrap().expect("a leader").since;
    let since_ms = since.duration_since(std::time::UNIX_EPOCH).unwrap();
    let json: serde_json::Value = serde_json::from_str(&leader(&server, &["--json"], 0)).unwrap();
    let rfc3339 = json["since"].as_str().expect("since, as text");
    assert_eq!(
        json,
        serde_json::json!({"name": "jobs", "known": true, "led": true, "id": leadership.id(),
                           "info": "10.0.0.5:8080", "term": leadership.term(),
                           "since": rfc3339, "since_ms": since_ms.as_millis() as u64,
                           "reason": null})
    );
    // RFC 3339 in UTC, to the millisecond, of the same instant.
    assert!(
        rfc3339.len() == 24 && rfc3339.ends_with('Z') && rfc3339.as_bytes()[10] == b'T',
        "{rfc3339}"
    );
    assert!(
        rfc3339.ends_with(&format!(".{:03}Z", since_ms.subsec_millis())),
        "{rfc3339}"
    );
    assert_eq!(
        leader(&server, &[], 0),
        format!(
            "election \"jobs\": led by \"10.0.0.5:8080\" in term {} since {rfc3339}\n",
            leadership.term()
        )
    );
}

#[test]
fn leader_watch_prints_the_leader_now_then_a_line_at_each_change() {
    let server = RedisServer::start();
    let mut watch = redis_lock(&server)
        .args(["leader", "jobs", "--watch", "--json"])
        .spawn()
        .unwrap();
    let lines = Lines::of(&mut watch);
    assert_eq!(lines.next_json()["led"], false);
    let election = Election::new(&server.client(), "jobs").unwrap();
    let leadership = election.campaign("host-a").unwrap();
    let led = lines.next_json();
    assert_eq!(
        (&led["led"], &led["info"], &led["term"]),
        (
            &serde_json::json!(true),
            &serde_json::json!("host-a"),
            &serde_json::json!(leadership.term())
        )
    );
    leadership.resign().unwrap();
    assert_eq!(lines.next_json()["led"], false);
    send_signal(watch.id(), "INT");
    let output = finish(watch);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
}

#[test]
fn leader_watch_says_the_leader_is_unknown_when_the_server_dies_and_shows_it_again_after() {
    let mut server = RedisServer::start();
    let leadership = Election::builder(&server.client(), "jobs")
        .expire(secs(1))
        .io_timeout(ms(500))
        .build()
        .unwrap()
        .campaign("host-a")
        .unwrap();
    let watch = |json: bool| {
        let mut watch = redis_lock(&server)
            .args(["--io-timeout", "0.5", "leader", "jobs", "--watch"])
            .args(json.then_some("--json"))
            .spawn()
            .unwrap();
        let lines = Lines::of(&mut watch);
        (watch, lines)
    };
    let (text, text_lines) = watch(false);
    let (json, json_lines) = watch(true);
    assert!(text_lines.next().contains("led by \"host-a\""));
    let led = json_lines.next_json();
    assert_eq!(
        (&led["known"], &led["led"]),
        (&true.into(), &true.into()),
        "{led}"
    );
    server.kill();
    let killed = Instant::now();
    // The I/O timeout plus the lease, and some slack for a loaded machine.
    let within = ms(500) + secs(1) + secs(2);
    let said = text_lines
        .next_within(within)
        .expect("a line once the server is gone");
    let text_after = killed.elapsed();
    assert!(
        said.starts_with("election \"jobs\": leader unknown ("),
        "{said}"
    );
    let said = json_lines
        .next_within(within)
        .expect("a JSON line once the server is gone");
    let json_after = killed.elapsed();
    let unknown: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(
        (
            &unknown["name"],
            &unknown["known"],
            &unknown["led"],
            &unknown["term"]
        ),
        (
            &"jobs".into(),
            &false.into(),
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ),
        "{unknown}"
    );
    assert!(
        unknown["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{unknown}"
    );
    eprintln!("the unknown lines came {text_after:?} and {json_after:?} after the kill");
    assert!(leadership.lost_token().wait_timeout(secs(5)));
    // Once: nothing more while the server stays away.
    assert_eq!(text_lines.next_within(ms(500)), None);
    server.start_again();
    assert_eq!(text_lines.next(), "election \"jobs\": no leader");
    let nobody = json_lines.next_json();
    assert_eq!(
        (&nobody["known"], &nobody["led"], &nobody["reason"]),
        (&true.into(), &false.into(), &serde_json::Value::Null),
        "{nobody}"
    );
    drop(leadership);
    for watch in [text, json] {
        send_signal(watch.id(), "INT");
        let output = finish(watch);
        assert!(output.status.success(), "{}", stderr(&output));
    }
}

#[test]
fn status_election_shows_the_leader_with_its_term_and_the_candidates_in_line() {
    let server = RedisServer::start();
    let client = server.client();
    let election = |id: &str| Election::builder(&client, "jobs").id(id).build().unwrap();
    let leadership = election("leader").campaign("a").unwrap();
    let candidate = election("candidate");
    let waiting = thread::spawn(move || candidate.campaign("b").map(|next| next.term()));
    server.until_queued(Primitive::Election, "jobs", 1, HUNG, || false);
    let queue = inspect::queue(&client, Primitive::Election, "jobs", secs(5)).unwrap();
    let candidate_id = &queue.waiters[0].id;
    assert_eq!(strip_process(candidate_id), "candidate:0");

    let output = redis_lock(&server)
        .args(["status", "--election", "jobs"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "election \"jobs\": 1 leader, 1 waiting", "{text}");
    let held_by = format!("  held by \"{}\", expires in ", leadership.id());
    assert!(lines[1].starts_with(&held_by), "{text}");
    assert!(
        lines[1].ends_with(&format!(", term {}", leadership.term())),
        "{text}"
    );
    assert!(
        lines[2].starts_with(&format!("  waiting 1: \"{candidate_id}\", lapses in ")),
        "{text}"
    );
    let term = leadership.term();
    leadership.resign().unwrap();
    let next = waiting.join().unwrap().unwrap();
    assert!(term < next, "{term} then {next}");
}

#[test]
fn list_shows_an_election_with_a_leader() {
    let server = RedisServer::start();
    let election = Election::new(&server.client(), "jobs").unwrap();
    let leadership = election.campaign("a").unwrap();
    let text = stdout(&redis_lock(&server).arg("list").output().unwrap());
    assert!(
        text.contains("election \"jobs\": 1 leader, 0 waiting\n"),
        "{text}"
    );
    let list = list_json(redis_lock(&server));
    assert_eq!(list[0]["kind"], "election", "{list}");
    assert_eq!(list[0]["holders"][0]["token"], leadership.term(), "{list}");
}

#[test]
fn an_election_on_a_quorum_is_refused_with_a_clear_message() {
    refused_on_a_quorum(
        &[
            &["lead", "jobs", "--", "true"],
            &["leader", "jobs"],
            &["status", "--election", "jobs"],
            &["reset", "--election", "jobs"],
        ],
        "redis-lock: not supported: election \"jobs\": semaphores, read-write locks, fair locks \
         and elections do not live on a quorum",
    );
}
