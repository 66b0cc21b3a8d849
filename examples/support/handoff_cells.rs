//! The bench's `handoff-path` cell (feature `tracing`): where a plain lock's hand-off spends
//! its time, so that a regression shows where it sits; see the top of `bench.rs`.
//!
//! The library marks two steps of a hand-off with `trace` events of target
//! `redis_lock::handoff`: `popped`, on the hub's thread, when its `BLPOP` brought a release's
//! signal (with the try it carried, if any), and `woken`, on the waiting thread, when it runs
//! again with that news. A subscriber of the bench's own timestamps them where they happen;
//! the contenders timestamp their releases and acquisitions. Hand-off `j` is the `j`-th
//! release and the acquisition after it (the lock is exclusive, so both orders are the
//! holders' order).

use std::sync::{Mutex, OnceLock};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

use super::{opt, percentile, rtt_multiple, Line, Options, Place, PING_EVERY};

/// The two steps the library marks.
#[derive(Clone, Copy, PartialEq)]
enum Step {
    Popped,
    Woken,
}

/// Every step marked, with its thread and time.
static STEPS: OnceLock<Mutex<Vec<(Step, ThreadId, Instant)>>> = OnceLock::new();

/// A subscriber that keeps the hand-off steps, timestamped on the thread that marks them, and
/// nothing else.
struct Steps;

impl Subscriber for Steps {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "redis_lock::handoff"
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let at = Instant::now();
        let mut step = StepField(None);
        event.record(&mut step);
        if let (Some(step), Some(steps)) = (step.0, STEPS.get()) {
            steps
                .lock()
                .unwrap()
                .push((step, thread::current().id(), at));
        }
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// The `step` field of an event.
struct StepField(Option<Step>);

impl Visit for StepField {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "step" {
            self.0 = match value {
                "popped" => Some(Step::Popped),
                "woken" => Some(Step::Woken),
                _ => None,
            };
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

/// One contender's cycles: when each acquire returned, each release was called and returned,
/// and its round trips.
#[derive(Default)]
struct Contender {
    acquired: Vec<(ThreadId, Instant)>,
    released: Vec<(Instant, Instant)>,
    pings: Vec<u64>,
}

/// The `handoff-path` cell for each concurrency and hold asked for (`ours`, threads only: a
/// task's wake is marked on whichever worker runs it).
pub fn run(place: &Place, options: &Options) -> Result<(), Box<dyn std::error::Error>> {
    STEPS.get_or_init(Mutex::default);
    tracing::subscriber::set_global_default(Steps)
        .map_err(|_| "the handoff-path cell needs the process's tracing subscriber")?;
    if !options.json {
        println!(
            "{:<12} {:>4} {:>7} {:>7} {:>6} {:>11} {:>11} {:>11} {:>11} {:>11} {:>5} {:>6}",
            "cell",
            "conc",
            "hold_ms",
            "total",
            "woken%",
            "release",
            "pop",
            "wake",
            "acquired",
            "handoff",
            "rtt",
            "x_rtt"
        );
    }
    for &concurrency in options.concurrency.as_deref().unwrap_or(&[6]) {
        for &hold_ms in &options.hold_ms {
            run_cell(place, concurrency, hold_ms, options.seconds)?.print(options.json);
        }
    }
    Ok(())
}

fn run_cell(
    place: &Place,
    concurrency: usize,
    hold_ms: u64,
    seconds: f64,
) -> Result<PathCell, Box<dyn std::error::Error>> {
    let name = format!("bench:handoff-path:{concurrency}:{hold_ms}");
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let hold = Duration::from_millis(hold_ms);
    STEPS.get().expect("set by run").lock().unwrap().clear();
    let contenders: Vec<Contender> = thread::scope(|s| {
        let workers: Vec<_> = (0..concurrency)
            .map(|_| s.spawn(|| contend(place, &name, hold, end)))
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().map_err(|_| "a contender panicked".to_string())?)
            .collect::<Result<_, String>>()
    })?;
    let steps = std::mem::take(&mut *STEPS.get().expect("set by run").lock().unwrap());
    Ok(PathCell::new(concurrency, hold_ms, contenders, &steps))
}

/// One contender: acquire, hold, release until `end`, timestamped.
fn contend(place: &Place, name: &str, hold: Duration, end: Instant) -> Result<Contender, String> {
    let lock =
        (place.lock(name).expire(Duration::from_secs(10)).build()).map_err(|e| e.to_string())?;
    let mut pinger = place.pinger(name)?;
    let mut seen = Contender::default();
    let me = thread::current().id();
    while Instant::now() < end {
        lock.acquire().map_err(|e| e.to_string())?;
        seen.acquired.push((me, Instant::now()));
        if !hold.is_zero() {
            thread::sleep(hold);
        }
        let releasing = Instant::now();
        lock.release().map_err(|e| e.to_string())?;
        seen.released.push((releasing, Instant::now()));
        if seen.acquired.len() % PING_EVERY as usize == 0 {
            let ping = super::run_blocking(pinger.ping());
            seen.pings.push(ping.map_err(|e| e.to_string())?);
        }
    }
    Ok(seen)
}

/// A `handoff-path` line: the hand-offs to a woken waiter, split into their steps, each in
/// microseconds from the step before (the release's reply and the pop from the release's
/// call: the pop may come first).
struct PathCell {
    concurrency: usize,
    hold_ms: u64,
    acquisitions: usize,
    /// The share of hand-offs that went to a waiter woken by the hub; the others went to a
    /// contender that tried by itself first (the releaser again, or one just arriving).
    woken_pct: f64,
    release: (Option<u64>, Option<u64>),
    pop: (Option<u64>, Option<u64>),
    wake: (Option<u64>, Option<u64>),
    acquired: (Option<u64>, Option<u64>),
    handoff: (Option<u64>, Option<u64>),
    rtt_p50_us: Option<u64>,
}

impl PathCell {
    fn new(
        concurrency: usize,
        hold_ms: u64,
        contenders: Vec<Contender>,
        steps: &[(Step, ThreadId, Instant)],
    ) -> PathCell {
        let mut acquired: Vec<(ThreadId, Instant)> = Vec::new();
        let mut released: Vec<(Instant, Instant)> = Vec::new();
        let mut pings: Vec<u64> = Vec::new();
        for c in contenders {
            acquired.extend(c.acquired);
            released.extend(c.released);
            pings.extend(c.pings);
        }
        acquired.sort_by_key(|(_, at)| *at);
        released.sort_by_key(|(called, _)| *called);
        let pops: Vec<Instant> = (steps.iter())
            .filter(|(step, ..)| *step == Step::Popped)
            .map(|(.., at)| *at)
            .collect();
        let us = |from: Instant, to: Instant| to.saturating_duration_since(from).as_micros() as u64;
        let (mut release, mut pop, mut wake, mut taken, mut total) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut handoffs = 0;
        // Release j frees the lock for acquisition j + 1.
        for (&(called, returned), &(by, got)) in released.iter().zip(acquired.iter().skip(1)) {
            if got < called {
                continue;
            }
            handoffs += 1;
            let popped = pops.iter().find(|&&at| at >= called && at <= got);
            let woken = (steps.iter())
                .filter(|(step, on, at)| *step == Step::Woken && *on == by && *at <= got)
                .filter(|(.., at)| popped.is_some_and(|popped| at >= popped))
                .map(|(.., at)| *at)
                .next_back();
            let (Some(&popped), Some(woken)) = (popped, woken) else {
                continue;
            };
            release.push(us(called, returned));
            pop.push(us(called, popped));
            wake.push(us(popped, woken));
            taken.push(us(woken, got));
            total.push(us(called, got));
        }
        let woken_pct = 100.0 * total.len() as f64 / handoffs.max(1) as f64;
        let p = |v: &mut Vec<u64>| (percentile(v, 50.0), percentile(v, 99.0));
        PathCell {
            concurrency,
            hold_ms,
            acquisitions: acquired.len(),
            woken_pct,
            release: p(&mut release),
            pop: p(&mut pop),
            wake: p(&mut wake),
            acquired: p(&mut taken),
            handoff: p(&mut total),
            rtt_p50_us: percentile(&mut pings, 50.0),
        }
    }
}

impl Line for PathCell {
    fn json(&self) -> String {
        let pair = |name: &str, (p50, p99): (Option<u64>, Option<u64>)| {
            format!(
                r#""{name}_p50_us":{},"{name}_p99_us":{}"#,
                opt(p50),
                opt(p99)
            )
        };
        format!(
            r#"{{"cell":"handoff-path","impl":"ours","concurrency":{},"hold_ms":{},"acquisitions":{},"woken_pct":{:.1},{},{},{},{},{},"rtt_p50_us":{},"handoff_p50_rtt":{}}}"#,
            self.concurrency,
            self.hold_ms,
            self.acquisitions,
            self.woken_pct,
            pair("release", self.release),
            pair("pop", self.pop),
            pair("wake", self.wake),
            pair("acquired", self.acquired),
            pair("handoff", self.handoff),
            opt(self.rtt_p50_us),
            super::opt_f(rtt_multiple(self.handoff.0, self.rtt_p50_us)),
        )
    }

    fn row(&self) -> String {
        let pair = |(p50, p99): (Option<u64>, Option<u64>)| format!("{}/{}", opt(p50), opt(p99));
        format!(
            "{:<12} {:>4} {:>7} {:>7} {:>6.1} {:>11} {:>11} {:>11} {:>11} {:>11} {:>5} {:>6}",
            "handoff-path",
            self.concurrency,
            self.hold_ms,
            self.acquisitions,
            self.woken_pct,
            pair(self.release),
            pair(self.pop),
            pair(self.wake),
            pair(self.acquired),
            pair(self.handoff),
            opt(self.rtt_p50_us),
            super::opt_f(rtt_multiple(self.handoff.0, self.rtt_p50_us)),
        )
    }
}
