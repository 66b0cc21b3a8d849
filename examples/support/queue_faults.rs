//! The bench's fault cells of the queue primitives, on one server: `permit-crash` (how late a
//! crashed holder's permit reaches the next waiter after its expiry), `dead-waiter` (how long
//! a SIGKILLed waiter holds up the one behind it) and `fifo` (grants against arrivals across
//! three processes); see the top of `bench.rs`. The other processes are this binary
//! re-executed in a role (`child`).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_blpop_lock::Semaphore;

use super::{
    opt, percentile, ping, signed_us, tick_phase, CellKind, Impl, Line, Options, TailCell, GOLDEN,
    ROLE_ENV, WAITER_TIMEOUT,
};

/// The `dead-waiter` target: the waiter behind a dead one is served at most one heartbeat
/// interval (the default, 1 s) after the dead one's entry lapsed.
const TARGET_AFTER_LAPSE_US: i64 = 2_000_000;
/// The `fifo` cell: processes, waiters in each, and the gap between two arrivals.
const FIFO_PROCESSES: usize = 3;
const FIFO_WAITERS: usize = 10;
const FIFO_STEP: Duration = Duration::from_millis(1);
/// How long a child may take to start and connect before the `fifo` arrivals begin.
const FIFO_LEAD: Duration = Duration::from_millis(500);
/// How long the bench gives the other processes' waiters to show up in the queue.
const QUEUE_SETUP: Duration = Duration::from_secs(10);

/// The hidden roles, `REDIS_LOCK_BENCH_ROLE=queue-...`, with the URL and semaphore name first:
/// `queue-holder EXPIRE_MS` takes the one permit with that expiry, not renewed, says `held` and
/// waits to be killed; `queue-waiter` waits for the permit until killed; `queue-fifo START_US
/// INDEX` runs [`FIFO_WAITERS`] waiters, waiter j arriving at START_US (µs since the epoch) +
/// (3j + INDEX) steps, and prints `<arrival µs> <grant µs> <id>` for each (the id it holds
/// under in `holders`, which is its id in the queue).
pub fn child(role: &str, args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let [url, name, rest @ ..] = args else {
        return Err("a queue role needs URL NAME ..".into());
    };
    let client = redis::Client::open(url.as_str())?;
    let number = |i: usize| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(rest.get(i).ok_or("a number is missing")?.parse()?)
    };
    match role {
        "queue-holder" => {
            let semaphore = Semaphore::builder(&client, name.as_str(), 1)
                .expire(Duration::from_millis(number(0)?))
                .auto_renewal(false)
                .build()?;
            let _permit = semaphore.acquire()?;
            say("held")?;
            loop {
                thread::sleep(Duration::from_secs(3600));
            }
        }
        "queue-waiter" => {
            let semaphore = Semaphore::new(&client, name.as_str(), 1)?;
            let _permit = semaphore.acquire()?;
            Err("the waiter was served: the holder let go".into())
        }
        "queue-fifo" => fifo_child(&client, name, number(0)?, number(1)?),
        other => Err(format!("unknown queue role {other:?}").into()),
    }
}

fn say(line: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{line}")?;
    stdout.flush()
}

/// This binary in `role` on semaphore `name`, its stdout piped.
fn spawn_child(url: &str, role: &str, name: &str, args: &[String]) -> std::io::Result<Child> {
    Command::new(std::env::current_exe()?)
        .env(ROLE_ENV, role)
        .args([url, name])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
}

/// SIGKILL (on Unix): no release, no leaving the queue, no destructor.
fn kill(child: &mut Child) -> std::io::Result<()> {
    child.kill()?;
    child.wait().map(drop)
}

/// The instant server time `at_ms` falls on, read as `TIME` + `score_of`'s reply in one
/// transaction; at or before the true instant, by at most the round trip (returned too).
fn server_instant(
    conn: &mut redis::Connection,
    key: &str,
    member: &str,
) -> Result<(Instant, u64), Box<dyn std::error::Error>> {
    let sent = Instant::now();
    let ((secs, micros), at_ms): ((u64, u64), Option<f64>) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("ZSCORE")
        .arg(key)
        .arg(member)
        .query(conn)?;
    let rtt = sent.elapsed().as_micros() as u64;
    let at_ms = at_ms.ok_or_else(|| format!("no {member} in {key}"))?;
    let now_us = secs * 1_000_000 + micros;
    let ahead_us = at_ms * 1000.0 - now_us as f64;
    if !(0.0..1e12).contains(&ahead_us) {
        return Err(format!("{key}'s {member} is past or never ({at_ms})").into());
    }
    Ok((sent + Duration::from_micros(ahead_us as u64), rtt))
}

/// Waits (1 ms apart: this is the bench setting up, not a lock wait) until queue `key` has
/// `n` waiters; its members in ticket order.
fn queue_of(
    conn: &mut redis::Connection,
    key: &str,
    n: usize,
) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let until = Instant::now() + QUEUE_SETUP;
    loop {
        let queue: Vec<String> = redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).query(conn)?;
        if queue.len() >= n {
            return Ok(queue);
        }
        if Instant::now() > until {
            return Err(format!("{key} has {} waiters, not {n}", queue.len()).into());
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// The `permit-crash` cell: `--trials` trials on a fresh one-permit semaphore each. A holder
/// process takes the permit with expiry E (`--expire-ms`, renewal off), the bench reads the
/// lease's expiry (`TIME` + the holder's score in `holders`), SIGKILLs the holder, and a
/// waiter arriving at a spread point before the expiry times `try_acquire_for(10 s)`.
/// lateness = grant − expiry.
pub fn run_permit_crash(
    client: &redis::Client,
    url: &str,
    options: &Options,
    server_hz: Option<u64>,
) -> Result<TailCell, Box<dyn std::error::Error>> {
    let mut conn = client.get_connection()?;
    let (mut samples, mut read_rtts, mut rtts) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..options.trials {
        let name = format!("bench:permit-crash:{}:{i}", std::process::id());
        let waiter = Semaphore::new(client, name.as_str(), 1)?;
        thread::sleep(tick_phase(i, server_hz));
        let mut holder = spawn_child(url, "queue-holder", &name, &[options.expire_ms.to_string()])?;
        let mut said = String::new();
        let stdout = holder.stdout.take().expect("piped stdout");
        let read = BufReader::new(stdout).read_line(&mut said);
        let holders = format!("semaphore:{{{name}}}:holders");
        let id: Option<String> = redis::cmd("ZRANGE")
            .arg(&holders)
            .arg(0)
            .arg(0)
            .query::<Vec<String>>(&mut conn)?
            .pop();
        let expiry = id.map(|id| server_instant(&mut conn, &holders, &id));
        kill(&mut holder)?;
        read?;
        if said.trim() != "held" {
            return Err(format!("the holder did not take {name} (said {said:?})").into());
        }
        let (expiry, read_rtt) = expiry.ok_or("the holder is not in holders")??;
        let spread = (i as f64 * GOLDEN).fract() * 0.9;
        thread::sleep(
            expiry
                .saturating_duration_since(Instant::now())
                .mul_f64(spread),
        );
        let permit = waiter
            .try_acquire_for(WAITER_TIMEOUT)?
            .ok_or_else(|| format!("the waiter did not get {name} in {WAITER_TIMEOUT:?}"))?;
        let got = Instant::now();
        permit.release()?;
        samples.push(signed_us(got, expiry));
        read_rtts.push(read_rtt);
        rtts.push(ping(&mut conn)?);
    }
    Ok(TailCell::new(
        CellKind::PermitCrash,
        Impl::Ours,
        options.expire_ms,
        samples,
        &read_rtts,
        rtts,
        server_hz,
        None,
    ))
}

/// The `dead-waiter` cell: `--trials` trials on a fresh one-permit semaphore each. The bench
/// holds the permit; a waiter process queues, then a waiter in the bench behind it; the
/// process is SIGKILLed and the bench lets go at once, so the permit is pushed to the dead
/// waiter. Timed: how long the live waiter waited from the kill (`delay`), and how long after
/// the dead waiter's process lapsed (its score in `beats`, read after the kill) it was served.
pub fn run_dead_waiter(
    client: &redis::Client,
    url: &str,
    options: &Options,
) -> Result<DeadWaiterCell, Box<dyn std::error::Error>> {
    let mut conn = client.get_connection()?;
    let (mut delays, mut after_lapse, mut rtts) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..options.trials {
        let name = format!("bench:dead-waiter:{}:{i}", std::process::id());
        let queue = format!("semaphore:{{{name}}}:queue");
        let holder = Semaphore::new(client, name.as_str(), 1)?;
        let held = holder.acquire()?;
        let mut dead = spawn_child(url, "queue-waiter", &name, &[])?;
        let first = queue_of(&mut conn, &queue, 1)?.remove(0);
        let (delay, lapse) = thread::scope(|s| {
            let live = s.spawn(|| {
                let live = Semaphore::new(client, name.as_str(), 1)?;
                let permit = live.try_acquire_for(WAITER_TIMEOUT * 3)?;
                let got = Instant::now();
                permit
                    .ok_or("the live waiter was never served")?
                    .release()?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(got)
            });
            let setup = (|| {
                queue_of(&mut conn, &queue, 2)?;
                kill(&mut dead)?;
                let killed = Instant::now();
                // The heartbeat is its process's: the part of its id after the `@`.
                let process = first.rsplit_once('@').map_or(first.as_str(), |(_, p)| p);
                let lapse =
                    server_instant(&mut conn, &format!("semaphore:{{{name}}}:beats"), process);
                held.release()?;
                Ok::<_, Box<dyn std::error::Error>>((killed, lapse?.0))
            })();
            let got = live.join().map_err(|_| "the live waiter panicked")?;
            let (killed, lapse) = setup?;
            let got = got.map_err(|e| e.to_string())?;
            Ok::<_, Box<dyn std::error::Error>>((got - killed, signed_us(got, lapse)))
        })?;
        delays.push(delay.as_micros() as i64);
        after_lapse.push(lapse);
        rtts.push(ping(&mut conn)?);
    }
    Ok(DeadWaiterCell::new(delays, after_lapse, rtts))
}

/// A `dead-waiter` cell's figures, in signed microseconds.
pub struct DeadWaiterCell {
    trials: usize,
    delay_p50_us: Option<i64>,
    delay_max_us: Option<i64>,
    after_lapse_p50_us: Option<i64>,
    after_lapse_max_us: Option<i64>,
    rtt_p50_us: Option<u64>,
}

impl DeadWaiterCell {
    fn new(mut delays: Vec<i64>, mut after_lapse: Vec<i64>, mut rtts: Vec<u64>) -> Self {
        DeadWaiterCell {
            trials: delays.len(),
            delay_p50_us: percentile(&mut delays, 50.0),
            delay_max_us: delays.iter().copied().max(),
            after_lapse_p50_us: percentile(&mut after_lapse, 50.0),
            after_lapse_max_us: after_lapse.iter().copied().max(),
            rtt_p50_us: percentile(&mut rtts, 50.0),
        }
    }

    fn meets_target(&self) -> Option<bool> {
        self.after_lapse_max_us
            .map(|most| most <= TARGET_AFTER_LAPSE_US)
    }
}

/// `None` as `null`, else the number.
fn opt_i(value: Option<i64>) -> String {
    value.map_or("null".to_string(), |v| v.to_string())
}

impl Line for DeadWaiterCell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"cell":"dead-waiter","impl":"ours","trials":{},"delay_p50_us":{},"#,
                r#""delay_max_us":{},"after_lapse_p50_us":{},"after_lapse_max_us":{},"#,
                r#""target_after_lapse_us":{},"meets_target":{},"rtt_p50_us":{}}}"#
            ),
            self.trials,
            opt_i(self.delay_p50_us),
            opt_i(self.delay_max_us),
            opt_i(self.after_lapse_p50_us),
            opt_i(self.after_lapse_max_us),
            TARGET_AFTER_LAPSE_US,
            self.meets_target()
                .map_or("null".to_string(), |m| m.to_string()),
            opt(self.rtt_p50_us),
        )
    }

    fn row(&self) -> String {
        let ms = |v: Option<i64>| v.map_or("-".to_string(), |v| format!("{:.1}", v as f64 / 1e3));
        format!(
            "dead-waiter ours  trials {}  delay p50 {} ms, max {} ms  after the lapse p50 {} ms, max {} ms (target <= {} ms: {})  rtt {} us",
            self.trials,
            ms(self.delay_p50_us),
            ms(self.delay_max_us),
            ms(self.after_lapse_p50_us),
            ms(self.after_lapse_max_us),
            TARGET_AFTER_LAPSE_US / 1000,
            self.meets_target().map_or("-".to_string(), |m| m.to_string()),
            opt(self.rtt_p50_us),
        )
    }
}

/// Microseconds since the epoch: the one clock the processes share.
fn epoch_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// The `queue-fifo` role: [`FIFO_WAITERS`] threads, each with a handle of its own.
fn fifo_child(
    client: &redis::Client,
    name: &str,
    start_us: u64,
    index: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let samples = thread::scope(|s| {
        let waiters: Vec<_> = (0..FIFO_WAITERS as u64)
            .map(|j| {
                s.spawn(move || {
                    let semaphore = Semaphore::new(client, name, 1).map_err(|e| e.to_string())?;
                    // Connected before it arrives: a connect (several ms on a busy machine)
                    // between the arrival and the ticket would be the client's delay, not
                    // the queue's order.
                    semaphore.available().map_err(|e| e.to_string())?;
                    let mut conn = client.get_connection().map_err(|e| e.to_string())?;
                    let holders = format!("semaphore:{{{name}}}:holders");
                    let step = FIFO_STEP.as_micros() as u64;
                    let at = start_us + (FIFO_PROCESSES as u64 * j + index) * step;
                    thread::sleep(Duration::from_micros(at.saturating_sub(epoch_us())));
                    let arrival = epoch_us();
                    let permit = semaphore.acquire().map_err(|e| e.to_string())?;
                    let granted = epoch_us();
                    // The only holder of the one permit: this waiter.
                    let ids: Vec<String> = redis::cmd("ZRANGE")
                        .arg(&holders)
                        .arg(0)
                        .arg(-1)
                        .query(&mut conn)
                        .map_err(|e| e.to_string())?;
                    permit.release().map_err(|e| e.to_string())?;
                    Ok::<_, String>((arrival, granted, ids.join(",")))
                })
            })
            .collect();
        super::join_all(waiters.into_iter().map(|w| w.join()))
    })?;
    for (arrival, granted, id) in samples {
        say(&format!("{arrival} {granted} {id}"))?;
    }
    Ok(())
}

/// The `fifo` cell: `--trials` rounds on a fresh one-permit semaphore each. The bench holds
/// the permit while [`FIFO_PROCESSES`] processes' waiters arrive, interleaved, a step apart,
/// then lets go; they are served one by one. An inversion is a pair served in the other
/// order than they arrived (each waiter's clock read just before its acquire); the target
/// counts only those that arrived more than one round trip apart (`rtt_p50_us`, measured in
/// the cell). A queue inversion is a pair served in the other order than their tickets (the
/// queue as the bench read it before letting go): the engine's own order, whatever the
/// clients' timing.
pub fn run_fifo(
    client: &redis::Client,
    url: &str,
    options: &Options,
) -> Result<FifoCell, Box<dyn std::error::Error>> {
    let mut conn = client.get_connection()?;
    let mut rtts: Vec<u64> = (0..100)
        .map(|_| ping(&mut conn))
        .collect::<Result<_, _>>()?;
    let rtt_us = percentile(&mut rtts, 50.0).unwrap_or(0);
    let mut cell = FifoCell {
        rounds: options.trials,
        waiters: 0,
        inversions: 0,
        beyond_rtt: 0,
        widest_us: 0,
        queue_inversions: 0,
        rtt_p50_us: rtt_us,
    };
    for round in 0..options.trials {
        let name = format!("bench:fifo:{}:{round}", std::process::id());
        let holder = Semaphore::new(client, name.as_str(), 1)?;
        let held = holder.acquire()?;
        let start_us = epoch_us() + FIFO_LEAD.as_micros() as u64;
        let mut children = (0..FIFO_PROCESSES)
            .map(|p| {
                let args = [start_us.to_string(), p.to_string()];
                spawn_child(url, "queue-fifo", &name, &args)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let queued = queue_of(
            &mut conn,
            &format!("semaphore:{{{name}}}:queue"),
            FIFO_PROCESSES * FIFO_WAITERS,
        );
        held.release()?;
        let tickets = queued?;
        let mut samples = Vec::new();
        for child in &mut children {
            let stdout = child.stdout.take().expect("piped stdout");
            for line in BufReader::new(stdout).lines() {
                let line = line?;
                let mut words = line.split(' ');
                let mut number = || words.next().and_then(|n| n.parse::<u64>().ok());
                let (arrival, granted) = (number(), number());
                let ticket = words
                    .next()
                    .and_then(|id| tickets.iter().position(|queued| queued == id));
                match (arrival, granted, ticket) {
                    (Some(arrival), Some(granted), Some(ticket)) => samples.push(Sample {
                        arrival,
                        granted,
                        ticket,
                    }),
                    _ => return Err(format!("a fifo waiter said {line:?}").into()),
                }
            }
            if !child.wait()?.success() {
                return Err("a fifo process failed".into());
            }
        }
        cell.count(&samples);
    }
    Ok(cell)
}

/// One `fifo` waiter: its arrival and grant (µs since the epoch), and its place in the queue.
struct Sample {
    arrival: u64,
    granted: u64,
    ticket: usize,
}

/// A `fifo` cell's counts.
pub struct FifoCell {
    rounds: usize,
    waiters: usize,
    /// Pairs served in the other order than they arrived.
    inversions: u64,
    /// Of those, pairs that arrived more than one RTT apart: the target is none.
    beyond_rtt: u64,
    /// The widest arrival gap of an inverted pair.
    widest_us: u64,
    /// Pairs served in the other order than their tickets.
    queue_inversions: u64,
    rtt_p50_us: u64,
}

impl FifoCell {
    /// Adds one round's samples.
    fn count(&mut self, samples: &[Sample]) {
        self.waiters += samples.len();
        for (i, a) in samples.iter().enumerate() {
            for b in &samples[i + 1..] {
                let served_first = |x: &Sample, y: &Sample| x.granted < y.granted;
                let (first, second) = if a.ticket < b.ticket { (a, b) } else { (b, a) };
                self.queue_inversions += u64::from(served_first(second, first));
                let (first, second) = if a.arrival <= b.arrival {
                    (a, b)
                } else {
                    (b, a)
                };
                if served_first(second, first) {
                    let gap = second.arrival - first.arrival;
                    self.inversions += 1;
                    self.beyond_rtt += u64::from(gap > self.rtt_p50_us);
                    self.widest_us = self.widest_us.max(gap);
                }
            }
        }
    }
}

impl FifoCell {
    /// The figures, named as in the JSON line.
    fn figures(&self) -> [(&'static str, String); 10] {
        [
            ("processes", FIFO_PROCESSES.to_string()),
            ("rounds", self.rounds.to_string()),
            ("waiters", self.waiters.to_string()),
            ("step_us", FIFO_STEP.as_micros().to_string()),
            ("inversions", self.inversions.to_string()),
            ("inversions_beyond_rtt", self.beyond_rtt.to_string()),
            ("widest_inversion_us", self.widest_us.to_string()),
            ("queue_inversions", self.queue_inversions.to_string()),
            ("rtt_p50_us", self.rtt_p50_us.to_string()),
            ("meets_target", (self.beyond_rtt == 0).to_string()),
        ]
    }
}

impl Line for FifoCell {
    fn json(&self) -> String {
        let figures: Vec<String> = (self.figures().iter())
            .map(|(name, value)| format!(r#""{name}":{value}"#))
            .collect();
        format!(r#"{{"cell":"fifo","impl":"ours",{}}}"#, figures.join(","))
    }

    fn row(&self) -> String {
        let figures: Vec<String> = (self.figures().iter())
            .map(|(name, value)| format!("{name} {value}"))
            .collect();
        format!("fifo ours  {}", figures.join(", "))
    }
}
