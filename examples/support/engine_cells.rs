//! The bench's `engine-cost` cells: what one queue-engine script costs the server, with many
//! holders or many waiters on the semaphore it serves. Redis runs one command at a time, so
//! a script's server time holds up every other client of that server; see the top of
//! `bench.rs`.
//!
//! The holders and waiters are written straight into the engine's keys (as the crate docs'
//! *Keys* table lays them out), with leases and heartbeats an hour long: making 10,000 of them
//! through the engine would itself cost each later one the time being measured.

use std::time::{Duration, Instant};

use redis_blpop_lock::{inspect, Semaphore};

use super::{opt, opt_f, percentile, ping, rtt_multiple, Line, Options};

/// A name's engine keys, for a semaphore without a hash tag of its own.
fn base(name: &str) -> String {
    format!("semaphore:{{{name}}}:")
}

/// The `engine-cost` cells: for each `--holders` count H, a semaphore of H + 1 permits with H
/// live holders, and one handle cycling try-acquire → release on it; then, for each
/// `--waiters` count W, a full semaphore with W live waiters, and one handle trying (each
/// try refused: it never passes a waiter).
pub fn run_engine_cost(
    client: &redis::Client,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<11} {:>7} {:>7} {:>7} {:>9} {:>8} {:>8} {:>6} {:>7}",
            "cell", "holders", "waiters", "calls", "us/call", "cyc_p50", "cyc_p99", "rtt", "x_rtt"
        );
    }
    for &holders in &options.holders {
        engine_cost_cell(client, holders, 0, options.seconds)?.print(options.json);
    }
    for &waiters in options.waiters.as_deref().unwrap_or(&[10_000]) {
        engine_cost_cell(client, 1, waiters, options.seconds)?.print(options.json);
    }
    Ok(())
}

fn engine_cost_cell(
    client: &redis::Client,
    holders: u64,
    waiters: u64,
    seconds: f64,
) -> Result<EngineCostCell, Box<dyn std::error::Error>> {
    let name = format!("bench:engine-cost:{holders}:{waiters}");
    let mut conn = client.get_connection()?;
    let permits = if waiters == 0 { holders + 1 } else { holders };
    let permits = u32::try_from(permits)?;
    fill(&mut conn, &name, holders, waiters)?;
    let semaphore = Semaphore::builder(client, &name, permits)
        .expire(Duration::from_secs(3600))
        .auto_renewal(false)
        .build()?;
    // Its first call loads the scripts: not counted.
    drop(semaphore.try_acquire()?);
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut conn)?;
    let mut cycles = Vec::new();
    let mut pings = Vec::new();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        let start = Instant::now();
        let permit = semaphore.try_acquire()?;
        match (permit, waiters) {
            (Some(permit), 0) => permit.release()?,
            (None, 0) => return Err("a free permit was refused".into()),
            (Some(_), _) => return Err("a try passed a waiter".into()),
            (None, _) => {}
        }
        cycles.push(u64::try_from(start.elapsed().as_micros())?);
        if cycles.len() % 8 == 0 {
            pings.push(ping(&mut conn)?);
        }
    }
    let stats: String = redis::cmd("INFO").arg("commandstats").query(&mut conn)?;
    let (calls, usec) = script_stats(&stats);
    inspect::reset_queue(
        client,
        inspect::Primitive::Semaphore,
        &name,
        None,
        permits,
        Duration::from_secs(60),
    )?;
    let parts = [
        "holders", "held", "queue", "beats", "wants", "tickets", "fence", "count",
    ];
    let keys: Vec<String> = parts.iter().map(|part| base(&name) + part).collect();
    let _: () = redis::cmd("DEL").arg(keys).query(&mut conn)?;
    Ok(EngineCostCell {
        holders,
        waiters,
        calls,
        usec_per_call: (calls > 0).then(|| usec as f64 / calls as f64),
        cycle_p50_us: percentile(&mut cycles, 50.0),
        cycle_p99_us: percentile(&mut cycles, 99.0),
        rtt_p50_us: percentile(&mut pings, 50.0),
    })
}

/// Writes `holders` live holders of 1 unit each, and `waiters` live waiters of 1 unit each,
/// into the engine's keys of `name`.
fn fill(
    conn: &mut redis::Connection,
    name: &str,
    holders: u64,
    waiters: u64,
) -> Result<(), Box<dyn std::error::Error>> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn)?;
    let in_an_hour = secs * 1000 + micros / 1000 + 3_600_000;
    let base = base(name);
    for from in (0..holders).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in from..(from + 1000).min(holders) {
            let id = format!("bench-holder:{i}");
            pipe.zadd(base.clone() + "holders", &id, in_an_hour)
                .ignore();
            pipe.hset(base.clone() + "held", &id, format!("1:{}", i + 1))
                .ignore();
        }
        pipe.query::<()>(conn)?;
    }
    for from in (0..waiters).step_by(1000) {
        let mut pipe = redis::pipe();
        for i in from..(from + 1000).min(waiters) {
            let id = format!("bench-waiter:{i}");
            pipe.zadd(base.clone() + "queue", &id, i + 1).ignore();
            pipe.zadd(base.clone() + "beats", &id, in_an_hour).ignore();
            pipe.hset(base.clone() + "wants", &id, "1:3600000").ignore();
        }
        pipe.query::<()>(conn)?;
    }
    if waiters > 0 {
        let _: () = redis::cmd("SET")
            .arg(base + "tickets")
            .arg(waiters)
            .query(conn)?;
    }
    Ok(())
}

/// The scripts' calls and server time since the last `CONFIG RESETSTAT`, from `INFO
/// commandstats` (`EVALSHA`, and `EVAL` should a script have been sent whole).
fn script_stats(info: &str) -> (u64, u64) {
    let mut total = (0, 0);
    for line in info.lines() {
        let Some(rest) = line
            .strip_prefix("cmdstat_evalsha:")
            .or_else(|| line.strip_prefix("cmdstat_eval:"))
        else {
            continue;
        };
        for field in rest.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => total.0 += n.parse::<u64>().unwrap_or(0),
                Some(("usec", n)) => total.1 += n.parse::<u64>().unwrap_or(0),
                _ => {}
            }
        }
    }
    total
}

/// An `engine-cost` cell's figures.
struct EngineCostCell {
    holders: u64,
    waiters: u64,
    /// Script calls the cell made (acquires and releases, or tries).
    calls: u64,
    /// The server's time per script call, in µs.
    usec_per_call: Option<f64>,
    cycle_p50_us: Option<u64>,
    cycle_p99_us: Option<u64>,
    rtt_p50_us: Option<u64>,
}

impl Line for EngineCostCell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"cell":"engine-cost","holders":{},"waiters":{},"calls":{},"#,
                r#""script_us_per_call":{},"cycle_p50_us":{},"cycle_p99_us":{},"#,
                r#""rtt_p50_us":{},"cycle_p50_rtt":{}}}"#
            ),
            self.holders,
            self.waiters,
            self.calls,
            opt_f(self.usec_per_call),
            opt(self.cycle_p50_us),
            opt(self.cycle_p99_us),
            opt(self.rtt_p50_us),
            opt_f(rtt_multiple(self.cycle_p50_us, self.rtt_p50_us)),
        )
    }

    fn row(&self) -> String {
        let dash = |v: Option<u64>| v.map_or("-".to_string(), |v| v.to_string());
        format!(
            "{:<11} {:>7} {:>7} {:>7} {:>9} {:>8} {:>8} {:>6} {:>7}",
            "engine-cost",
            self.holders,
            self.waiters,
            self.calls,
            opt_f(self.usec_per_call),
            dash(self.cycle_p50_us),
            dash(self.cycle_p99_us),
            dash(self.rtt_p50_us),
            opt_f(rtt_multiple(self.cycle_p50_us, self.rtt_p50_us)),
        )
    }
}
