//! The bench's `election` cell, on one server (see the top of `bench.rs`): how late a killed
//! leader's standby takes over after the lease's expiry, how soon a watch sees a new leader,
//! and what 1,000 watches in one process cost in connections. The killed leader is this
//! binary re-executed in a role (`child`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::Election;

use super::{opt, percentile, ping, signed_us, Line, Options, ROLE_ENV, WAITER_TIMEOUT};

/// The takeover target: the standby leads at most 10 ms (p99) after the lease's expiry.
const TARGET_TAKEOVER_P99_US: i64 = 10_000;
/// The watch target: a watch sees a change at most 2 round trips (p50) after it.
const TARGET_WATCH_RTTS: f64 = 2.0;
/// Watches in one process for the connection count.
const WATCHES: usize = 1000;

/// The hidden role `election-leader URL NAME EXPIRE_MS`: campaigns with that lease, not
/// renewed, says `leads` and waits to be killed.
pub fn child(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [url, name, expire_ms] = args else {
        return Err("election-leader needs URL NAME EXPIRE_MS".into());
    };
    let client = redis::Client::open(url.as_str())?;
    let election = Election::builder(&client, name.as_str())
        .expire(Duration::from_millis(expire_ms.parse()?))
        .auto_renewal(false)
        .build()?;
    let _leadership = election.campaign("killed")?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "leads")?;
    stdout.flush()?;
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

fn spawn_leader(url: &str, name: &str, expire_ms: u64) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .env(ROLE_ENV, "election-leader")
        .args([url, name, &expire_ms.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
}

/// The instant the lease of the one holder in `holders` ends, from `TIME` and its score read
/// in one transaction: at or before the true instant by at most that round trip.
fn lease_end(
    conn: &mut redis::Connection,
    holders: &str,
) -> Result<Instant, Box<dyn std::error::Error>> {
    let sent = Instant::now();
    let ((secs, micros), first): ((u64, u64), Vec<(String, f64)>) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("ZRANGE")
        .arg(holders)
        .arg(0)
        .arg(0)
        .arg("WITHSCORES")
        .query(conn)?;
    let (_, at_ms) = first.first().ok_or("nobody holds the election")?;
    let ahead_us = at_ms * 1000.0 - (secs * 1_000_000 + micros) as f64;
    if !(0.0..1e12).contains(&ahead_us) {
        return Err(format!("the lease ended already ({at_ms})").into());
    }
    Ok(sent + Duration::from_micros(ahead_us as u64))
}

/// The `election` cell: `--trials` takeovers after a killed leader's expiry (`--expire-ms`),
/// as many watched changes, and the connections of 1,000 watches.
pub fn run(
    client: &redis::Client,
    url: &str,
    options: &Options,
) -> Result<ElectionCell, Box<dyn std::error::Error>> {
    let mut conn = client.get_connection()?;
    let name = format!("bench:election:{}:watches", std::process::id());
    let watched = Election::new(&redis::Client::open(url)?, name.as_str())?;
    let mut watches = (0..WATCHES)
        .map(|_| watched.watch())
        .collect::<Result<Vec<_>, _>>()?;
    for watch in &mut watches {
        watch
            .changed_for(WAITER_TIMEOUT)
            .ok_or("a watch never started")?;
    }
    // Less the bench's own: first, while nothing else of the bench is connected.
    let watch_connections = connections(&mut conn)? - 1;
    drop(watches);
    let (mut takeovers, mut seen, mut rtts) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..options.trials {
        let name = format!("bench:election:{}:{i}", std::process::id());
        let standby = Election::new(client, name.as_str())?;
        let mut leader = spawn_leader(url, &name, options.expire_ms)?;
        let mut said = String::new();
        let read = BufReader::new(leader.stdout.take().expect("piped stdout")).read_line(&mut said);
        let expiry = lease_end(&mut conn, &format!("election:{{{name}}}:holders"));
        leader.kill()?;
        leader.wait()?;
        read?;
        if said.trim() != "leads" {
            return Err(format!("the leader did not lead {name} (said {said:?})").into());
        }
        let expiry = expiry?;
        let leadership = standby
            .try_campaign_for("standby", WAITER_TIMEOUT)?
            .ok_or_else(|| format!("the standby did not lead {name} in {WAITER_TIMEOUT:?}"))?;
        takeovers.push(signed_us(Instant::now(), expiry));
        leadership.resign()?;

        // A watch in a process of its own (its own client: its own hub) sees a candidate of
        // another take office; timed from the campaign's start. The campaign is two round
        // trips (its grant, then its announcement, the change): the change runs on the
        // server about one and a half round trips after the start.
        let watched = Election::new(&redis::Client::open(url)?, name.as_str())?;
        let mut watch = watched.watch()?;
        watch
            .changed_for(WAITER_TIMEOUT)
            .ok_or("the watch never started")?;
        let watching = thread::spawn(move || {
            let change = watch.changed_for(WAITER_TIMEOUT);
            (Instant::now(), change)
        });
        let started = Instant::now();
        let leadership = standby.campaign("watched");
        let (at, change) = watching.join().map_err(|_| "the watch panicked")?;
        let leadership = leadership?;
        let change = change.ok_or("the watch missed the change")?;
        if change.leader().map(|l| l.term) != Some(leadership.term()) {
            let saw = format!("the watch saw {change:?}, not term {}", leadership.term());
            return Err(saw.into());
        }
        seen.push(at.saturating_duration_since(started).as_micros() as u64);
        leadership.resign()?;
        rtts.push(ping(&mut conn)?);
    }
    Ok(ElectionCell {
        trials: takeovers.len(),
        expire_ms: options.expire_ms,
        takeover_p50_us: percentile(&mut takeovers, 50.0),
        takeover_p99_us: percentile(&mut takeovers, 99.0),
        seen_p50_us: percentile(&mut seen, 50.0),
        seen_p99_us: percentile(&mut seen, 99.0),
        rtt_p50_us: percentile(&mut rtts, 50.0),
        watch_connections,
    })
}

/// The normal clients connected now, the asking one included.
fn connections(conn: &mut redis::Connection) -> redis::RedisResult<usize> {
    let list: String = redis::cmd("CLIENT")
        .arg(&["LIST", "TYPE", "normal"])
        .query(conn)?;
    Ok(list.lines().count())
}

/// The `election` cell's figures.
pub struct ElectionCell {
    trials: usize,
    expire_ms: u64,
    takeover_p50_us: Option<i64>,
    takeover_p99_us: Option<i64>,
    /// From a campaign's start to a watch in another process reporting it.
    seen_p50_us: Option<u64>,
    seen_p99_us: Option<u64>,
    rtt_p50_us: Option<u64>,
    watch_connections: usize,
}

impl ElectionCell {
    /// A change is seen this long after it happened on the server: the announcement ran
    /// about one and a half round trips after the campaign's start.
    fn seen_after_change_us(&self) -> Option<u64> {
        Some(self.seen_p50_us?.saturating_sub(self.rtt_p50_us? * 3 / 2))
    }

    fn seen_x_rtt(&self) -> Option<f64> {
        let rtt = self.rtt_p50_us.filter(|&r| r > 0)?;
        Some(self.seen_after_change_us()? as f64 / rtt as f64)
    }

    fn meets_target(&self) -> Option<bool> {
        let takeover = self.takeover_p99_us? <= TARGET_TAKEOVER_P99_US;
        Some(takeover && self.seen_x_rtt()? <= TARGET_WATCH_RTTS)
    }
}

impl Line for ElectionCell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"cell":"election","impl":"ours","trials":{},"expire_ms":{},"#,
                r#""takeover_p50_us":{},"takeover_p99_us":{},"seen_p50_us":{},"seen_p99_us":{},"#,
                r#""seen_after_change_x_rtt":{},"rtt_p50_us":{},"watches":{},"#,
                r#""watch_connections":{},"meets_target":{}}}"#
            ),
            self.trials,
            self.expire_ms,
            self.takeover_p50_us
                .map_or("null".into(), |v| v.to_string()),
            self.takeover_p99_us
                .map_or("null".into(), |v| v.to_string()),
            opt(self.seen_p50_us),
            opt(self.seen_p99_us),
            self.seen_x_rtt()
                .map_or("null".into(), |x| format!("{x:.2}")),
            opt(self.rtt_p50_us),
            WATCHES,
            self.watch_connections,
            self.meets_target().map_or("null".into(), |m| m.to_string()),
        )
    }

    fn row(&self) -> String {
        format!(
            "election: {} trials, lease {} ms: takeover after expiry p50 {} / p99 {} µs \
             (target ≤ {TARGET_TAKEOVER_P99_US}); a watch sees a new leader {} / {} µs after \
             its campaign started (≈ {} × RTT after the change, target ≤ {TARGET_WATCH_RTTS}; \
             RTT {} µs); {WATCHES} watches: {} connections",
            self.trials,
            self.expire_ms,
            self.takeover_p50_us.map_or("-".into(), |v| v.to_string()),
            self.takeover_p99_us.map_or("-".into(), |v| v.to_string()),
            opt(self.seen_p50_us),
            opt(self.seen_p99_us),
            self.seen_x_rtt().map_or("-".into(), |x| format!("{x:.2}")),
            opt(self.rtt_p50_us),
            self.watch_connections,
        )
    }
}
