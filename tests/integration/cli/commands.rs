//! The `redis-lock` binary, run as a user would run it, against a private redis-server.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::Commands;
use redis_blpop_lock::{Election, Lock, Semaphore};

use crate::support::{eventually, send_signal, strip_process, tries_run, RedisServer};

/// A bound for things that take milliseconds, generous for a loaded machine; a test that
/// hits it has hung.
pub(crate) const HUNG: Duration = Duration::from_secs(60);
/// A woken waiter must start well before this; one that missed its wake-up would try again
/// only after the lock's 5 s longest block.
const WOKEN_WITHIN: Duration = Duration::from_secs(3);

/// `sh -c` scripts for the command under the lock; `$1` is a file they write to.
/// Marks its start, then sleeps until SIGTERM, which it notes before exiting 0.
pub(crate) const NOTES_SIGTERM: &str = r#"trap 'echo term >> "$1"; kill $!; exit 0' TERM
echo started >> "$1"; sleep 60 & wait"#;
/// Same, but after noting SIGTERM it dies of it, as a command without a handler would.
const DIES_OF_SIGTERM: &str = r#"trap 'echo term >> "$1"; kill $!; trap - TERM; kill -TERM $$' TERM
echo started >> "$1"; sleep 60 & wait"#;

pub(crate) fn redis_lock(server: &RedisServer) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    cmd.arg("--url")
        .arg(server.url())
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for `child` to exit (failing the test if it hangs) and collects its output.
pub(crate) fn finish(mut child: Child) -> Output {
    eventually(HUNG, "redis-lock to exit", || {
        child.try_wait().expect("wait for redis-lock").is_some()
    });
    child
        .wait_with_output()
        .expect("collect redis-lock's output")
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn held(server: &RedisServer, name: &str) -> bool {
    server.conn().exists(format!("lock:{name}")).unwrap()
}

/// A scratch directory, removed on drop.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    pub(crate) fn new() -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "redis-lock-cli-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(crate) fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// A one-line error from redis-lock itself: no clap usage block, no panic, no backtrace.
fn assert_one_line_error(output: &Output) {
    let text = stderr(output);
    assert!(!output.status.success(), "succeeded: {text}");
    assert!(!text.contains("panicked"), "{text}");
    assert_eq!(text.lines().count(), 1, "not one line: {text}");
    assert!(text.starts_with("redis-lock: "), "{text}");
}

#[test]
fn two_runs_on_one_name_never_overlap() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let marks = scratch.file("marks");
    let runs: Vec<Child> = (0..4)
        .map(|_| {
            redis_lock(&server)
                .args(["run", "l", "--", "sh", "-c"])
                .arg(r#"echo start >> "$1"; sleep 0.2; echo end >> "$1""#)
                .arg("sh")
                .arg(&marks)
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let output = finish(run);
        assert!(output.status.success(), "{}", stderr(&output));
    }
    let marks = read(&marks);
    let expected: Vec<&str> = ["start", "end"].repeat(4);
    assert_eq!(marks.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn no_wait_while_held_exits_with_the_conflict_code_and_names_the_owner() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let holder = Lock::builder(&server.client(), "l")
        .id("holder-42")
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let ran = scratch.file("ran");
    for (extra, code) in [(&[][..], 1), (&["--conflict-exit-code", "42"][..], 42)] {
        let output = redis_lock(&server)
            .args(["run", "l", "--no-wait"])
            .args(extra)
            .args(["--", "touch"])
            .arg(&ran)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(code), "{}", stderr(&output));
        assert!(stderr(&output).contains("holder-42"), "{}", stderr(&output));
        assert!(!ran.exists(), "the command ran");
    }
}

#[test]
fn a_waiting_run_starts_soon_after_the_holders_command_ends() {
    let server = RedisServer::start();
    // The holder's command ends when the test closes its standard input.
    let mut holder = redis_lock(&server)
        .args(["run", "l", "--", "sh", "-c", "read line"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(HUNG, "the holder to take the lock", || held(&server, "l"));
    let waiter = redis_lock(&server)
        .args(["run", "l", "--", "true"])
        .spawn()
        .unwrap();
    server.until_blocked(1, HUNG, || false);
    let ended = Instant::now();
    let mut stdin = holder.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    assert!(finish(holder).status.success());
    let output = finish(waiter);
    assert!(output.status.success(), "{}", stderr(&output));
    let after = ended.elapsed();
    assert!(
        after < WOKEN_WITHIN,
        "the waiter finished {after:?} after the holder"
    );
}

#[test]
fn sigterm_to_run_reaches_the_command_and_releases_the_lock() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let notes = scratch.file("notes");
    let run = redis_lock(&server)
        .args(["run", "l", "--", "sh", "-c", DIES_OF_SIGTERM, "sh"])
        .arg(&notes)
        .spawn()
        .unwrap();
    eventually(HUNG, "the command to start", || {
        read(&notes).contains("started")
    });
    send_signal(run.id(), "TERM");
    let output = finish(run);
    assert_eq!(output.status.code(), Some(128 + 15), "{}", stderr(&output));
    assert!(read(&notes).contains("term"), "the command got no SIGTERM");
    assert!(!held(&server, "l"), "the lock was not released");
}

#[test]
fn a_signal_while_waiting_exits_without_running_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let holder = Lock::builder(&server.client(), "l")
        .id("holder")
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let ran = scratch.file("ran");
    let waiter = redis_lock(&server)
        .args(["run", "l", "--", "touch"])
        .arg(&ran)
        .spawn()
        .unwrap();
    server.until_blocked(1, HUNG, || false);
    send_signal(waiter.id(), "TERM");
    let output = finish(waiter);
    assert_eq!(output.status.code(), Some(128 + 15), "{}", stderr(&output));
    assert!(!ran.exists(), "the command ran");
    assert_eq!(holder.owner_id().unwrap().as_deref(), Some("holder"));
}

/// SIGTERM to a waiting run, and the holder's release 0–3 ms later: the run's pipelined try
/// may land after the signal. Whatever the race, the run leaves no lock behind and its wake-up
/// reaches the next waiter.
#[test]
fn a_run_interrupted_as_the_lock_frees_leaves_no_lock_and_passes_the_wakeup_on() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let client = server.client();
    for attempt in 0..16u64 {
        let holder = Lock::new(&client, "l").unwrap();
        holder.acquire().unwrap();
        let ran = scratch.file(&format!("ran-{attempt}"));
        let run = redis_lock(&server)
            .args(["run", "l", "--id", "run", "--", "touch"])
            .arg(&ran)
            .spawn()
            .unwrap();
        server.until_blocked(1, HUNG, || false);
        let patient = Lock::new(&client, "l").unwrap();
        let since = tries_run(&server);
        let next = std::thread::spawn(move || {
            let got = patient.acquire_timeout(Duration::from_secs(20));
            (patient, got, Instant::now())
        });
        // The run's waiting connection, and this process's.
        server.until_waiting(1, since, HUNG, || next.is_finished());
        server.until_blocked(2, HUNG, || next.is_finished());
        send_signal(run.id(), "TERM");
        std::thread::sleep(Duration::from_millis(attempt % 4));
        let released = Instant::now();
        holder.release().unwrap();
        let output = finish(run);
        match output.status.code() {
            // Interrupted while waiting: nothing ran.
            Some(143) => assert!(!ran.exists(), "the command ran"),
            // The lock came first; the command ran and the lock was released after it.
            Some(0) => assert!(ran.exists()),
            other => panic!("exit {other:?}: {}", stderr(&output)),
        }
        let (patient, got, at) = next.join().unwrap();
        assert!(got.unwrap(), "the next waiter never got the lock");
        assert!(
            at.duration_since(released) < WOKEN_WITHIN,
            "the next waiter got the lock {:?} after the release: the run kept it, or its \
             wake-up was swallowed",
            at.duration_since(released)
        );
        patient.release().unwrap();
        assert!(!held(&server, "l"));
    }
}

/// A `redis-lock run l --expire SECS` whose command, `sleep 60`, has started; with its pid.
fn run_sleeping(server: &RedisServer, scratch: &Scratch, expire: &str) -> (Child, String) {
    sleeping(server, scratch, &["run", "l", "--expire", expire])
}

/// A `redis-lock ARGS...` whose command, `sleep 60`, has started; with its pid.
pub(crate) fn sleeping(server: &RedisServer, scratch: &Scratch, args: &[&str]) -> (Child, String) {
    let script = r#"echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 60"#;
    noting_pid(server, scratch, args, script)
}

/// A `redis-lock run l --expire SECS -- sh -c SCRIPT`, once SCRIPT has written a pid to the
/// file `$1`; with that pid.
fn run_noting_pid(
    server: &RedisServer,
    scratch: &Scratch,
    expire: &str,
    script: &str,
) -> (Child, String) {
    noting_pid(server, scratch, &["run", "l", "--expire", expire], script)
}

/// A `redis-lock ARGS... -- sh -c SCRIPT`, once SCRIPT has written a pid to the file `$1`;
/// with that pid.
fn noting_pid(
    server: &RedisServer,
    scratch: &Scratch,
    args: &[&str],
    script: &str,
) -> (Child, String) {
    let pid_file = scratch.file("pid");
    let run = redis_lock(server)
        .args(args)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(&pid_file)
        // An orphaned `sleep` must not keep the test's pipes open.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually(HUNG, "the command to start", || pid_file.exists());
    (run, read(&pid_file).trim().to_string())
}

#[test]
fn a_sigkilled_holders_lock_frees_after_its_expiry_for_the_next_run() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (mut holder, command) = run_sleeping(&server, &scratch, "1");
    holder.kill().unwrap();
    holder.wait().unwrap();
    let output = redis_lock(&server)
        .args(["run", "l", "--timeout", "30", "--", "true"])
        .output()
        .unwrap();
    let _ = Command::new("kill").arg(command).status();
    assert!(output.status.success(), "{}", stderr(&output));
}

#[test]
fn reset_all_with_yes_frees_locks_and_wakes_waiters() {
    let server = RedisServer::start();
    let client = server.client();
    let holders: Vec<Lock> = ["a", "b"]
        .iter()
        .map(|name| Lock::new(&client, *name).unwrap())
        .collect();
    for holder in &holders {
        holder.acquire().unwrap();
    }
    let waiter = redis_lock(&server)
        .args(["run", "a", "--", "true"])
        .spawn()
        .unwrap();
    server.until_blocked(1, HUNG, || false);
    let reset_at = Instant::now();
    let output = redis_lock(&server)
        .args(["reset-all", "--yes"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "reset 2 holds\n");
    let waited = finish(waiter);
    assert!(waited.status.success(), "{}", stderr(&waited));
    let after = reset_at.elapsed();
    assert!(
        after < WOKEN_WITHIN,
        "the waiter finished {after:?} after reset-all"
    );
    assert!(!held(&server, "b"));
}

#[test]
fn reset_all_without_yes_off_a_terminal_refuses() {
    let server = RedisServer::start();
    let holder = Lock::new(&server.client(), "l").unwrap();
    holder.acquire().unwrap();
    let output = redis_lock(&server).arg("reset-all").output().unwrap();
    assert_one_line_error(&output);
    assert!(stderr(&output).contains("--yes"), "{}", stderr(&output));
    assert!(held(&server, "l"));
}

#[test]
fn reset_frees_one_lock_and_says_whether_there_was_one() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let other = Lock::new(&client, "other").unwrap();
    other.acquire().unwrap();
    let output = redis_lock(&server).args(["reset", "l"]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("was held"));
    assert!(!held(&server, "l"));
    assert!(held(&server, "other"));
    let output = redis_lock(&server).args(["reset", "l"]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("was not held"));
}

#[test]
fn status_json_shows_the_holder_and_its_ttl() {
    let server = RedisServer::start();
    // An id that needs escaping in JSON.
    let id = "we\"ird\\id\n\u{1}é";
    let holder = Lock::builder(&server.client(), "l")
        .id(id)
        .expire(Duration::from_secs(30))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let output = redis_lock(&server)
        .args(["status", "l", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["name"], "l");
    assert_eq!(status["held"], true);
    assert_eq!(status["owner"], id);
    let ttl = status["ttl_ms"].as_u64().expect("a TTL");
    assert!(ttl > 0 && ttl <= 30_000, "ttl {ttl}");
}

#[test]
fn status_of_a_free_lock_says_free() {
    let server = RedisServer::start();
    let output = redis_lock(&server).args(["status", "l"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("free"));
    let output = redis_lock(&server)
        .args(["status", "l", "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        status,
        serde_json::json!({"name": "l", "held": false, "owner": null, "ttl_ms": null})
    );
}

#[test]
fn bad_usage_gets_a_one_line_error() {
    let server = RedisServer::start();
    for args in [
        &["frobnicate"][..],
        &["run", "l", "--"],
        &["run", "l", "true"],
        &["run", "l", "--expire", "soon", "--", "true"],
        &["--url", "not a url", "status", "l"],
    ] {
        let output = redis_lock(&server).args(args).output().unwrap();
        assert_one_line_error(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
    }
    assert!(!held(&server, "l"));
}

#[test]
fn an_unreachable_server_gets_a_one_line_error() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    for args in [
        &["status", "l"][..],
        &["run", "l", "--", "true"],
        &["top", "--count", "1"],
    ] {
        let output = assert_cmd::Command::new(env!("CARGO_BIN_EXE_redis-lock"))
            .arg("--url")
            .arg(format!("redis://127.0.0.1:{port}/"))
            .args(args)
            .output()
            .unwrap();
        assert_one_line_error(&output);
        assert_eq!(output.status.code(), Some(69), "{args:?}");
    }
}

#[test]
fn a_command_that_is_not_found_exits_127_and_releases_the_lock() {
    let server = RedisServer::start();
    let output = redis_lock(&server)
        .args(["run", "l", "--", "/nonexistent/command"])
        .output()
        .unwrap();
    assert_one_line_error(&output);
    assert_eq!(output.status.code(), Some(127));
    assert!(!held(&server, "l"));
}

#[test]
fn the_commands_exit_code_is_passed_through() {
    let server = RedisServer::start();
    let mut cmd = assert_cmd::Command::from_std(redis_lock(&server));
    cmd.args(["run", "l", "--", "sh", "-c", "exit 7"])
        .assert()
        .code(7);
    assert!(!held(&server, "l"));
}

#[test]
fn run_passes_the_fencing_token_to_its_command_as_redis_lock_fence() {
    let server = RedisServer::start();
    let fence = |options: &[&str]| {
        let output = (redis_lock(&server).args(["run", "job"]).args(options))
            .args(["--", "sh", "-c", r#"echo "${REDIS_LOCK_FENCE-none}""#])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    // python-redis-lock's lock has a token only when asked for.
    assert_eq!(fence(&[]), "none");
    let tokens: Vec<u64> = [fence(&["--fencing"]), fence(&["--fencing"])]
        .map(|t| t.parse().unwrap())
        .to_vec();
    assert!(tokens[0] < tokens[1], "{tokens:?}");
    let counter: u64 = server.conn().get("lock-fence:job").unwrap();
    assert_eq!(counter, tokens[1]);
    // Every other hold has one.
    for options in [
        &["--fair"][..],
        &["--permits", "2"],
        &["--read"],
        &["--write"],
    ] {
        let token = fence(options);
        assert!(
            token.parse::<u64>().is_ok_and(|t| t > 0),
            "{options:?}: {token}"
        );
    }
}

/// Runs `sh -c SCRIPT sh NOTES` under `redis-lock run l --expire 1 OPTIONS`, resets the lock
/// once SCRIPT has noted its start in NOTES, and waits for the run to exit; with how long it
/// took after the reset. A 1 s expiry is renewed, and so finds the reset, every 2/3 s.
fn reset_while_running(options: &[&str], script: &str, notes: &Path) -> (Duration, Output) {
    let server = RedisServer::start();
    let run = redis_lock(&server)
        .args(["run", "l", "--expire", "1"])
        .args(options)
        .args(["--", "sh", "-c", script, "sh"])
        .arg(notes)
        .spawn()
        .unwrap();
    eventually(HUNG, "the command to start", || {
        read(notes).contains("started")
    });
    let reset = Instant::now();
    assert!(Lock::new(&server.client(), "l").unwrap().reset().unwrap());
    let output = finish(run);
    (reset.elapsed(), output)
}

#[test]
fn a_run_whose_lock_is_reset_sees_the_loss_and_stops_its_command() {
    let scratch = Scratch::new();
    let notes = scratch.file("notes");
    let (_, output) = reset_while_running(&[], NOTES_SIGTERM, &notes);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(stderr(&output).contains("lost lock"), "{}", stderr(&output));
    assert!(read(&notes).contains("term"), "the command got no SIGTERM");
}

/// `redis-lock` with no `--url`: the test gives where the locks live.
fn redis_lock_at(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redis-lock"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[test]
fn with_cluster_the_url_is_a_seed_node_for_run_status_and_reset() {
    let cluster = crate::support::RedisCluster::start();
    let seed = cluster.seed_url();
    let at = ["--cluster", "--url", seed.as_str()];
    let holder = redis_lock_at(&at)
        .args(["run", "cli-cluster", "--expire", "3", "--", "sleep", "60"])
        .spawn()
        .unwrap();
    let primary = cluster.primary_for("lock:{cli-cluster}");
    eventually(HUNG, "the run to take the lock", || {
        primary.conn().exists("lock:{cli-cluster}").unwrap()
    });
    let status = redis_lock_at(&at)
        .args(["status", "cli-cluster", "--json"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", stderr(&status));
    let json: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(json["held"], true, "{json}");
    let reset = redis_lock_at(&at)
        .args(["reset-all", "--yes"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&reset.stdout).trim(),
        "reset 1 hold"
    );
    let output = finish(holder);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
}

#[test]
fn with_sentinel_the_run_takes_the_lock_on_the_named_primary() {
    let set = crate::support::SentinelSet::start();
    let urls = set.sentinel_urls();
    let mut args = vec![];
    for url in &urls {
        args.extend(["--sentinel", url.as_str()]);
    }
    args.extend(["--service", set.service()]);
    let output = redis_lock_at(&args)
        .args(["run", "cli-sentinel", "--", "sh", "-c"])
        .arg(format!(
            "redis-cli -p {} get lock:cli-sentinel",
            set.primary().port
        ))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let owner = String::from_utf8_lossy(&output.stdout);
    assert!(
        owner
            .trim()
            .ends_with(&format!(":{}", owner_suffix(&owner))),
        "the lock's id was on the primary: {owner:?}"
    );
}

#[test]
fn sentinel_without_a_service_is_a_usage_error() {
    let output = redis_lock_at(&["--sentinel", "redis://127.0.0.1:1/"])
        .args(["status", "x"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

/// `redis-lock` over a quorum: `--url` once per server.
pub(crate) fn redis_lock_over(servers: &[RedisServer]) -> Command {
    let mut cmd = redis_lock_at(&[]);
    for server in servers {
        cmd.arg("--url").arg(server.url());
    }
    cmd
}

#[test]
fn a_run_over_three_urls_holds_the_lock_on_every_server_while_it_runs() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // The command ends when the test closes its standard input.
    let mut run = redis_lock_over(&servers)
        .args(["run", "q", "--", "sh", "-c", "read line"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    eventually(HUNG, "the run to take the lock on every server", || {
        servers.iter().all(|s| held(s, "q"))
    });
    let mut stdin = run.stdin.take().unwrap();
    writeln!(stdin, "go").unwrap();
    drop(stdin);
    let output = finish(run);
    assert!(output.status.success(), "{}", stderr(&output));
    for server in &servers {
        assert!(!held(server, "q"), "still held on port {}", server.port);
    }
}

#[test]
fn status_json_over_a_quorum_with_a_dead_server_shows_the_lock_and_that_server_unreachable() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = redis_blpop_lock::Quorum::new(servers.iter().map(RedisServer::client)).unwrap();
    let holder = Lock::builder(&quorum, "q")
        .id("holder")
        .expire(Duration::from_secs(30))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    servers[1].kill();
    let output = redis_lock_over(&servers)
        .args(["status", "q", "--json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["owner"], "holder", "{status}");
    let entries = status["servers"].as_array().expect("a servers array");
    assert_eq!(entries.len(), 3, "{status}");
    for (entry, server) in entries.iter().zip(&servers) {
        assert_eq!(entry["server"], format!("127.0.0.1:{}/0", server.port));
    }
    let dead = &entries[1];
    assert_eq!(dead["held"], serde_json::Value::Null, "{status}");
    assert!(dead["error"].is_string(), "{status}");
    for live in [&entries[0], &entries[2]] {
        assert_eq!(live["held"], true, "{status}");
        assert_eq!(live["owner"], "holder", "{status}");
        assert_eq!(live["error"], serde_json::Value::Null, "{status}");
    }
}

#[test]
fn url_given_twice_is_a_usage_error() {
    let output = redis_lock_at(&[
        "--url",
        "redis://127.0.0.1:1/",
        "--url",
        "redis://127.0.0.1:2/",
    ])
    .args(["status", "q"])
    .output()
    .unwrap();
    assert_one_line_error(&output);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("at least 3"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn urls_split_around_the_subcommand_are_a_usage_error() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // clap would keep only the two after `status`.
    let output = redis_lock_at(&["--url", &servers[0].url(), "status", "q"])
        .args(["--url", &servers[1].url(), "--url", &servers[2].url()])
        .output()
        .unwrap();
    assert_one_line_error(&output);
    assert_eq!(output.status.code(), Some(2));
}

/// Whether process `pid` is gone: exited, or a zombie nobody has reaped yet (in a container
/// whose first process does not reap, an orphan stays one).
pub(crate) fn gone(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

#[cfg(target_os = "linux")]
#[test]
fn the_command_dies_with_a_sigkilled_run_before_its_lock_could_expire() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let (mut run, pid) = run_sleeping(&server, &scratch, "5");
    assert!(!gone(&pid));
    run.kill().unwrap();
    run.wait().unwrap();
    eventually(
        Duration::from_secs(1),
        "the command to die with redis-lock",
        || gone(&pid),
    );
    // Its lock (5 s) had not yet expired: nobody else could have started the job.
    assert!(
        held(&server, "l"),
        "the lock expired before the command died"
    );
    let _ = Command::new("kill").arg(&pid).status();
}

/// The random part of a default owner id, `HOST:PID:RANDOM`.
fn owner_suffix(owner: &str) -> String {
    owner
        .trim()
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A `redis-lock run` holding lock `name` until it is killed.
fn run_holding(server: &RedisServer, name: &str) -> Child {
    let run = redis_lock(server)
        .args(["run", name, "--", "sleep", "60"])
        .spawn()
        .unwrap();
    eventually(HUNG, "the run to take the lock", || held(server, name));
    run
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `list --json` at `cmd`'s place, parsed.
pub(crate) fn list_json(mut cmd: Command) -> serde_json::Value {
    let output = cmd.args(["list", "--json"]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn an_unreachable_server_is_named_and_what_happened_said_in_words() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let output = redis_lock_at(&["--url", &format!("redis://127.0.0.1:{port}/")])
        .args(["status", "l"])
        .output()
        .unwrap();
    assert_one_line_error(&output);
    assert_eq!(output.status.code(), Some(69));
    let text = stderr(&output);
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("refused the connection"), "{text}");
}

#[test]
fn io_timeout_bounds_a_frozen_server_and_the_error_says_so() {
    let server = RedisServer::start();
    server.pause();
    for args in [&["status", "l"][..], &["list"], &["run", "l", "--", "true"]] {
        let started = Instant::now();
        let output = redis_lock(&server)
            .args(["--io-timeout", "0.5"])
            .args(args)
            .output()
            .unwrap();
        let took = started.elapsed();
        assert_one_line_error(&output);
        assert_eq!(output.status.code(), Some(69), "{args:?}");
        let expected = format!("no reply from 127.0.0.1:{} in 0.5 s", server.port);
        assert!(stderr(&output).contains(&expected), "{}", stderr(&output));
        // The default is 5 s: well under it, the option took effect.
        assert!(took < Duration::from_secs(4), "{args:?} took {took:?}");
    }
    server.resume();
}

#[test]
fn a_bad_url_is_echoed_with_its_password_masked() {
    let output = redis_lock_at(&["--url", "redis://app:s3cret@127.0.0.1:notaport/"])
        .args(["status", "l"])
        .output()
        .unwrap();
    assert_one_line_error(&output);
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(
        text.contains("\"redis://app:***@127.0.0.1:notaport/\""),
        "{text}"
    );
    assert!(!text.contains("s3cret"), "{text}");
}

#[test]
fn without_verbose_a_lost_lock_is_told_once_in_redis_locks_voice() {
    let server = RedisServer::start();
    for (verbose, lines) in [(&[][..], 1), (&["-v"][..], 2)] {
        let run = redis_lock(&server)
            .args(verbose)
            .args(["run", "l", "--expire", "1", "--", "sleep", "60"])
            .spawn()
            .unwrap();
        eventually(HUNG, "the run to take the lock", || held(&server, "l"));
        assert!(Lock::new(&server.client(), "l").unwrap().reset().unwrap());
        let output = finish(run);
        assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
        let text = stderr(&output);
        let theirs = text
            .lines()
            .filter(|l| !l.starts_with("redis-lock: "))
            .count();
        if verbose.is_empty() {
            assert_eq!(text.lines().count(), lines, "{text}");
            assert_eq!(theirs, 0, "the library spoke: {text}");
        } else {
            assert!(theirs >= 1, "-v shows the library's lines: {text}");
        }
    }
}

#[test]
fn status_exits_0_when_held_and_1_when_free() {
    let server = RedisServer::start();
    let free = redis_lock(&server).args(["status", "l"]).output().unwrap();
    assert_eq!(free.status.code(), Some(1), "{}", stderr(&free));
    let holder = Lock::new(&server.client(), "l").unwrap();
    holder.acquire().unwrap();
    for json in [&[][..], &["--json"]] {
        let output = redis_lock(&server)
            .args(["status", "l"])
            .args(json)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
}

#[test]
fn list_shows_every_held_lock_with_its_owner_and_ttl() {
    let server = RedisServer::start();
    let client = server.client();
    let expiring = Lock::builder(&client, "a")
        .id("one")
        .expire(Duration::from_secs(30))
        .build()
        .unwrap();
    expiring.acquire().unwrap();
    let forever = Lock::builder(&client, "b").id("two").build().unwrap();
    forever.acquire().unwrap();
    // Not a lock: left out.
    let _: () = server.conn().rpush("lock:c", 1).unwrap();
    let list = list_json(redis_lock(&server));
    let ttl = list[0]["ttl_ms"].as_u64().expect("a TTL");
    assert!(ttl > 0 && ttl <= 30_000, "ttl {ttl}");
    assert_eq!(
        list,
        serde_json::json!([
            {"kind": "lock", "name": "a", "owner": "one", "ttl_ms": ttl},
            {"kind": "lock", "name": "b", "owner": "two", "ttl_ms": null},
        ])
    );
    let output = redis_lock(&server).arg("list").output().unwrap();
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.contains("lock \"a\": held by \"one\", expires in"),
        "{text}"
    );
    assert!(
        text.contains("lock \"b\": held by \"two\", with no expiry"),
        "{text}"
    );
}

#[test]
fn list_on_a_cluster_finds_the_locks_of_every_primary() {
    let cluster = crate::support::RedisCluster::shared();
    let client = redis::cluster::ClusterClient::new(vec![cluster.seed_url()]).unwrap();
    // Names whose slots lie on different primaries.
    let names: Vec<String> = (0..30).map(|i| format!("cli-list-{i}")).collect();
    let locks: Vec<Lock> = names
        .iter()
        .map(|name| {
            let lock = Lock::builder(&client, name.as_str())
                .id("cluster-holder")
                .expire(Duration::from_secs(60))
                .build()
                .unwrap();
            lock.acquire().unwrap();
            lock
        })
        .collect();
    let primaries: std::collections::HashSet<u16> = names
        .iter()
        .map(|n| cluster.primary_for(&format!("lock:{{{n}}}")).port)
        .collect();
    assert!(primaries.len() > 1, "the names span the primaries");
    let seed = cluster.seed_url();
    let list = list_json(redis_lock_at(&["--cluster", "--url", &seed]));
    for lock in &locks {
        lock.release().unwrap();
    }
    let listed: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["owner"] == "cluster-holder")
        .map(|h| h["name"].as_str().unwrap())
        .collect();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed, expected);
}

#[test]
fn list_on_a_quorum_shows_what_a_majority_holds() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    // "q" on a majority, "minority" on one server only.
    for server in &servers[..2] {
        let _: () = server.conn().set("lock:q", "holder").unwrap();
    }
    let _: () = servers[2].conn().set("lock:q", "other").unwrap();
    let _: () = servers[0].conn().set("lock:minority", "stray").unwrap();
    let list = list_json(redis_lock_over(&servers));
    assert_eq!(
        list,
        serde_json::json!([{"kind": "lock", "name": "q", "owner": "holder", "ttl_ms": null}])
    );
}

#[test]
fn list_behind_sentinel_reads_the_named_primary() {
    let set = crate::support::SentinelSet::start();
    let _: () = set.primary().conn().set("lock:s", "holder").unwrap();
    let mut args = vec![];
    let urls = set.sentinel_urls();
    for url in &urls {
        args.extend(["--sentinel", url.as_str()]);
    }
    args.extend(["--service", set.service()]);
    let list = list_json(redis_lock_at(&args));
    assert_eq!(
        list,
        serde_json::json!([{"kind": "lock", "name": "s", "owner": "holder", "ttl_ms": null}])
    );
}

#[test]
fn the_default_owner_id_names_the_host_and_the_pid_and_differs_per_run() {
    let server = RedisServer::start();
    let host = String::from_utf8(Command::new("hostname").output().unwrap().stdout).unwrap();
    let mut suffixes = vec![];
    for name in ["a", "b"] {
        let mut run = run_holding(&server, name);
        let owner: String = server.conn().get(format!("lock:{name}")).unwrap();
        assert!(
            owner.starts_with(&format!("{}:{}:", host.trim(), run.id())),
            "{owner:?}"
        );
        suffixes.push(owner_suffix(&owner));
        run.kill().unwrap();
        run.wait().unwrap();
    }
    assert!(suffixes[0].len() >= 16, "{suffixes:?}");
    assert_ne!(suffixes[0], suffixes[1]);
}

#[test]
fn a_key_that_is_not_a_lock_exits_65_and_reset_force_deletes_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let ran = scratch.file("ran");
    let _: () = server.conn().rpush("lock:l", 1).unwrap();
    let run = redis_lock(&server)
        .args(["run", "l", "--", "touch"])
        .arg(&ran)
        .output()
        .unwrap();
    let status = redis_lock(&server).args(["status", "l"]).output().unwrap();
    let reset = redis_lock(&server).args(["reset", "l"]).output().unwrap();
    for output in [&run, &status, &reset] {
        assert_one_line_error(output);
        assert_eq!(output.status.code(), Some(65), "{}", stderr(output));
        assert!(
            stderr(output).contains("reset --force"),
            "{}",
            stderr(output)
        );
    }
    assert!(!ran.exists(), "the command ran");
    let kind: String = redis::cmd("TYPE")
        .arg("lock:l")
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(kind, "list", "a reset without --force changed it");
    let forced = redis_lock(&server)
        .args(["reset", "l", "--force"])
        .output()
        .unwrap();
    assert!(forced.status.success(), "{}", stderr(&forced));
    assert!(
        stdout(&forced).contains("not a lock; deleted it"),
        "{}",
        stdout(&forced)
    );
    assert!(!held(&server, "l"));
    let run = redis_lock(&server)
        .args(["run", "l", "--", "true"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", stderr(&run));
}

#[test]
fn reset_force_never_deletes_a_valid_lock_it_did_not_read() {
    let server = RedisServer::start();
    let holder = Lock::builder(&server.client(), "l")
        .id("holder")
        .build()
        .unwrap();
    holder.acquire().unwrap();
    // A forced clear of a key that is a lock deletes nothing.
    assert!(!redis_blpop_lock::inspect::clear_corrupt(
        &server.client(),
        "l",
        Duration::from_secs(5)
    )
    .unwrap());
    assert_eq!(holder.owner_id().unwrap().as_deref(), Some("holder"));
    // `reset --force` on a lock is a reset: owner-checked.
    let output = redis_lock(&server)
        .args(["reset", "l", "--force"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).contains("was held"), "{}", stdout(&output));
    assert!(!held(&server, "l"));
}

#[test]
fn reset_does_not_claim_to_have_woken_a_waiter() {
    let server = RedisServer::start();
    let holder = Lock::new(&server.client(), "l").unwrap();
    holder.acquire().unwrap();
    let output = redis_lock(&server).args(["reset", "l"]).output().unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("was held; released it"), "{text}");
    assert!(!text.contains("woke"), "nobody waited: {text}");
}

#[test]
fn negative_numbers_get_a_clear_error() {
    let server = RedisServer::start();
    for (option, value) in [
        ("--timeout", "-1"),
        ("--expire", "-2.5"),
        ("--io-timeout", "-1"),
        ("--conflict-exit-code", "-1"),
        ("--max-hold", "-1"),
        ("--kill-after", "-0.5"),
    ] {
        let output = redis_lock(&server)
            .args(["run", "l", option, value, "--", "true"])
            .output()
            .unwrap();
        assert_one_line_error(&output);
        assert_eq!(output.status.code(), Some(2));
        let text = stderr(&output);
        assert!(text.contains(option), "{text}");
        assert!(!text.contains("-- -1"), "told to write `-- -1`: {text}");
    }
    assert!(!held(&server, "l"));
}

#[test]
fn a_command_that_cannot_be_started_exits_126() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let script = scratch.file("not-executable");
    fs::write(&script, "#!/bin/sh\ntrue\n").unwrap();
    let output = redis_lock(&server)
        .args(["run", "l", "--"])
        .arg(&script)
        .output()
        .unwrap();
    assert_one_line_error(&output);
    assert_eq!(output.status.code(), Some(126));
    assert!(!held(&server, "l"));
}

/// Exit 75 also when the loss is found only as the command ends: reset while it ran, before
/// any renewal noticed. Its work may have overlapped another holder's, so its own code (0)
/// would mislead.
#[test]
fn a_lock_lost_before_the_command_ended_exits_75_even_unnoticed_until_the_release() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let go = scratch.file("go");
    let run = redis_lock(&server)
        .args(["run", "l", "--expire", "60", "--", "sh", "-c"])
        .arg(r#"while [ ! -e "$1" ]; do sleep 0.05; done"#)
        .arg("sh")
        .arg(&go)
        .spawn()
        .unwrap();
    eventually(HUNG, "the run to take the lock", || held(&server, "l"));
    assert!(Lock::new(&server.client(), "l").unwrap().reset().unwrap());
    fs::write(&go, "").unwrap();
    let output = finish(run);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("was lost before the command ended"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn off_a_terminal_a_signal_to_run_reaches_the_commands_whole_process_group() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    // A script whose child runs in the background: without a group of its own, SIGTERM
    // to the script alone would leave the child running.
    let script = r#"sleep 60 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; wait"#;
    let (run, child) = run_noting_pid(&server, &scratch, "30", script);
    send_signal(run.id(), "TERM");
    let output = finish(run);
    assert_eq!(output.status.code(), Some(128 + 15));
    eventually(HUNG, "the command's own child to get the SIGTERM", || {
        gone(&child)
    });
    assert!(!held(&server, "l"));
}

/// `top --json` lines, parsed, read as `top` prints them.
fn json_lines(child: &mut Child) -> impl Iterator<Item = serde_json::Value> + '_ {
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .lines()
        .map(|line| serde_json::from_str(&line.unwrap()).unwrap())
}

/// The names in one `top --json` refresh.
fn top_names(refresh: &serde_json::Value) -> Vec<&str> {
    refresh["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect()
}

#[test]
fn top_json_shows_a_lock_taken_between_refreshes_with_its_token_and_a_positive_rate() {
    let server = RedisServer::start();
    let client = server.client();
    // A second apart, so a loaded machine still takes the lock before the last refresh.
    let mut top = redis_lock(&server)
        .args(["top", "--json", "--count", "3", "--interval", "1"])
        .spawn()
        .unwrap();
    let mut lines = json_lines(&mut top);
    let first = lines.next().expect("a first refresh");
    assert_eq!(top_names(&first), Vec::<&str>::new());
    assert_eq!(first["acquisitions_per_sec"], serde_json::Value::Null);
    let lock = Lock::builder(&client, "job").fencing(true).build().unwrap();
    let guard = lock.lock().unwrap();
    let later: Vec<serde_json::Value> = lines.collect();
    assert_eq!(later.len(), 2, "--count 3 shows three refreshes");
    let seen = later
        .iter()
        .find(|refresh| top_names(refresh) == ["job"])
        .expect("a refresh shows the lock");
    assert_eq!(
        seen["locks"][0],
        serde_json::json!({
            "name": "job",
            "owner": lock.id(),
            "ttl_ms": seen["locks"][0]["ttl_ms"],
            "token": guard.fencing_token(),
        })
    );
    assert_eq!(seen["acquisitions"], 1);
    assert!(seen["acquisitions_per_sec"].as_f64().unwrap() > 0.0);
    assert_eq!(later[1]["acquisitions_total"], 1);
    assert!(finish(top).status.success());
}

#[test]
fn top_on_a_quorum_shows_what_a_majority_holds() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for server in &servers[..2] {
        let _: () = server.conn().set("lock:q", "holder").unwrap();
    }
    let _: () = servers[0].conn().set("lock:minority", "stray").unwrap();
    let output = redis_lock_over(&servers)
        .args(["top", "--json", "--count", "1"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let refresh: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        refresh["locks"],
        serde_json::json!([{"name": "q", "owner": "holder", "ttl_ms": null, "token": null}])
    );
}

/// What `top --count 1 ARGS...` shows while semaphore "backups" has a holder and election
/// "scheduler" a leader, with the permit's fencing token and the leader's id and term.
fn top_over_a_semaphore_and_an_election(args: &[&str]) -> (Output, Option<u64>, String, u64) {
    let server = RedisServer::start();
    let client = server.client();
    let backups = Semaphore::builder(&client, "backups", 2)
        .id("holder")
        .build()
        .unwrap();
    let permit = backups.acquire().unwrap();
    let election = Election::new(&client, "scheduler").unwrap();
    let leadership = election.campaign("web-3:8080").unwrap();
    let output = redis_lock(&server)
        .args(["top", "--count", "1"])
        .args(args)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let leader = leadership.id().to_string();
    (output, permit.fencing_token(), leader, leadership.term())
}

#[test]
fn top_shows_a_held_semaphore_and_an_elections_leader_with_its_term_after_the_locks() {
    let (output, token, leader, term) = top_over_a_semaphore_and_an_election(&[]);
    let text = stdout(&output);
    let token = token.expect("a permit has a fencing token");
    let lines: Vec<&str> = text.lines().collect();
    // The locks' table, empty, then each primitive's lines as `list` prints them.
    assert_eq!(
        lines[0..2],
        [
            "0 locks held; acquisitions: 0 since the last refresh (-/s), 0 in all",
            "NAME  OWNER  TTL  TOKEN"
        ],
        "{text}"
    );
    assert_eq!(
        lines[2], "semaphore \"backups\": 1 holder, 0 waiting",
        "{text}"
    );
    assert!(lines[3].starts_with("  held by \"holder:0@"), "{text}");
    assert!(
        lines[3].ends_with(&format!(", 1 permit, token {token}")),
        "{text}"
    );
    assert_eq!(
        lines[4], "election \"scheduler\": 1 leader, 0 waiting",
        "{text}"
    );
    assert!(
        lines[5].starts_with(&format!("  held by \"{leader}\", expires in ")),
        "{text}"
    );
    assert!(lines[5].ends_with(&format!(", term {term}")), "{text}");
    // Off a terminal the refresh ends with a blank line, and there is nothing else.
    assert_eq!(lines[6..], [""], "{text}");
}

#[test]
fn top_json_adds_the_queue_primitives_as_status_json_prints_them() {
    let (output, token, leader, term) = top_over_a_semaphore_and_an_election(&["--json"]);
    let refresh: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let queues = &refresh["queues"];
    let holder = queues[0]["holders"][0]["id"]
        .as_str()
        .expect("a holder's id");
    assert_eq!(strip_process(holder), "holder:0");
    let ttl = |at: usize| {
        queues[at]["holders"][0]["ttl_ms"]
            .as_u64()
            .expect("a lease")
    };
    assert_eq!(
        refresh,
        serde_json::json!({
            "time": refresh["time"],
            // The fields `top --json` had before the queue primitives, unchanged.
            "locks": [], "acquisitions": 0, "acquisitions_per_sec": null,
            "acquisitions_total": 0,
            "queues": [
                {"kind": "semaphore", "name": "backups", "held": true, "used": 1,
                 "holders": [{"id": holder, "units": 1, "ttl_ms": ttl(0), "token": token}],
                 "waiters": []},
                // An election's fencing token is its leader's term.
                {"kind": "election", "name": "scheduler", "held": true, "used": 1,
                 "holders": [{"id": leader, "units": 1, "ttl_ms": ttl(1), "token": term}],
                 "waiters": []},
            ],
        })
    );
}

#[test]
fn top_off_a_terminal_prints_plain_blocks_without_escape_codes() {
    let server = RedisServer::start();
    let _: () = server.conn().set("lock:job", "holder").unwrap();
    let output = redis_lock(&server)
        .args(["top", "--count", "2", "--interval", "0.1"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(!text.contains('\x1b'), "{text:?}");
    let blocks: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(blocks.len(), 2, "{text}");
    for block in blocks {
        assert!(block.starts_with("1 lock held;"), "{block}");
        assert!(block.contains("\"job\"  \"holder\"  none"), "{block}");
    }
}

#[test]
fn top_ends_cleanly_on_sigint() {
    let server = RedisServer::start();
    let mut top = redis_lock(&server).args(["top", "--json"]).spawn().unwrap();
    json_lines(&mut top).next().expect("a first refresh");
    send_signal(top.id(), "INT");
    let output = finish(top);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(stderr(&output), "");
}

/// Ignores SIGTERM, and so does its `sleep` (an ignored signal stays ignored across exec),
/// once it has noted its start and its pid in the file `$1`.
const IGNORES_SIGTERM: &str = r#"trap "" TERM; echo "started $$" >> "$1"; exec sleep 30"#;

/// Resets the lock of a run whose command ignores SIGTERM, and checks that the run SIGKILLed
/// it `kill_after` later and exited 75.
fn assert_sigkilled_after_a_reset(options: &[&str], kill_after: Duration) {
    let scratch = Scratch::new();
    let (took, output) = reset_while_running(options, IGNORES_SIGTERM, &scratch.file("notes"));
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("sending SIGKILL"),
        "{}",
        stderr(&output)
    );
    // The SIGTERM comes after the reset, and the SIGKILL `kill_after` after it; the command
    // would sleep 30 s otherwise.
    assert!(took >= kill_after, "SIGKILLed {took:?} after the reset");
    assert!(
        took < kill_after + Duration::from_secs(10),
        "SIGKILLed {took:?} after the reset"
    );
}

#[test]
fn a_command_ignoring_sigterm_on_a_lost_lock_is_sigkilled_kill_after_later() {
    assert_sigkilled_after_a_reset(&["--kill-after", "1"], Duration::from_secs(1));
}

#[test]
fn a_command_ignoring_sigterm_on_a_lost_lock_is_sigkilled_5_s_later_by_default() {
    assert_sigkilled_after_a_reset(&[], Duration::from_secs(5));
}

#[test]
fn max_hold_sends_sigterm_after_its_limit_exits_75_and_frees_the_lock() {
    let server = RedisServer::start();
    let started = Instant::now();
    let run = redis_lock(&server)
        .args(["run", "l", "--max-hold", "1", "--", "sleep", "30"])
        .spawn()
        .unwrap();
    let output = finish(run);
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(
        text.contains("--max-hold 1.000 s; sending SIGTERM"),
        "{text}"
    );
    assert!(!text.contains("SIGKILL"), "SIGTERM was not enough: {text}");
    assert!(took >= Duration::from_secs(1), "stopped after {took:?}");
    assert!(took < Duration::from_secs(20), "stopped after {took:?}");
    assert!(!held(&server, "l"), "the lock was not released");
}

#[test]
fn a_command_that_exits_on_sigterm_is_not_sigkilled_while_it_cleans_up() {
    let scratch = Scratch::new();
    let notes = scratch.file("notes");
    // Its clean-up (0.5 s) fits well within --kill-after; a SIGKILL would cut it short.
    let script = r#"trap 'echo TERM >> "$1"; sleep 0.5; echo cleaned up >> "$1"; exit 0' TERM
echo started >> "$1"; sleep 30 & wait"#;
    let (_, output) = reset_while_running(&["--kill-after", "3"], script, &notes);
    assert_eq!(output.status.code(), Some(75), "{}", stderr(&output));
    assert_eq!(read(&notes), "started\nTERM\ncleaned up\n");
    assert!(!stderr(&output).contains("SIGKILL"), "{}", stderr(&output));
}

#[test]
fn a_sigterm_passed_on_to_the_command_starts_no_sigkill_timer() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let notes = scratch.file("notes");
    let mut run = redis_lock(&server)
        .args([
            "run",
            "l",
            "--kill-after",
            "0.2",
            "--",
            "sh",
            "-c",
            IGNORES_SIGTERM,
            "sh",
        ])
        .arg(&notes)
        .spawn()
        .unwrap();
    eventually(HUNG, "the command to start", || {
        read(&notes).ends_with('\n')
    });
    let command = read(&notes).trim().replace("started ", "");
    send_signal(run.id(), "TERM");
    // Five times --kill-after: a timer started by the SIGTERM would have fired.
    std::thread::sleep(Duration::from_secs(1));
    assert!(!gone(&command), "the command was killed");
    assert!(run.try_wait().unwrap().is_none(), "redis-lock exited");
    send_signal(command.parse().unwrap(), "KILL");
    let output = finish(run);
    assert_eq!(output.status.code(), Some(128 + 9), "{}", stderr(&output));
    assert!(!stderr(&output).contains("SIGKILL"), "{}", stderr(&output));
    assert!(!held(&server, "l"), "the lock was not released");
}

#[test]
fn max_hold_0_is_refused_with_a_usage_error() {
    let server = RedisServer::start();
    let scratch = Scratch::new();
    let ran = scratch.file("ran");
    let output = redis_lock(&server)
        .args(["run", "l", "--max-hold", "0", "--", "touch"])
        .arg(&ran)
        .output()
        .unwrap();
    assert_one_line_error(&output);
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(text.contains("--max-hold"), "{text}");
    assert!(text.contains("zero"), "{text}");
    assert!(!ran.exists(), "the command ran");
    assert!(!held(&server, "l"));
}
