//! The bench's `loss-notice` cell: how soon a holder is told that its lock was taken away
//! (`lost_token()`, `when_lost()`); see the top of `bench.rs`.

use std::thread;
use std::time::{Duration, Instant};

use redis_blpop_lock::{Error, Lock, LockBuilder};

use super::{opt, percentile, ping, Impl, Line, Options, GOLDEN};

/// How often the blocking trial looks at its token: the figure's resolution.
const LOOK_EVERY: Duration = Duration::from_micros(50);
/// The target's slack over one renewal interval, in microseconds.
const SLACK_US: u64 = 10_000;

/// The `loss-notice` cell for each impl asked for that has a loss notice (`ours`, and with
/// the `tokio` feature `ours-async`).
pub fn run_loss_notice(
    client: &redis::Client,
    options: &Options,
) -> Result<(), Box<dyn std::error::Error>> {
    if !options.json {
        println!(
            "{:<11} {:<10} {:>9} {:>6} {:>9} {:>9} {:>9} {:>10} {:>6}",
            "cell", "impl", "expire", "trials", "p50_ms", "p99_ms", "max_ms", "target_ms", "rtt"
        );
    }
    for &imp in &options.impls {
        match imp {
            Impl::Ours => run_cell(client, imp, options, told_blocking)?.print(options.json),
            #[cfg(feature = "tokio")]
            Impl::OursAsync => run_cell(client, imp, options, told_async)?.print(options.json),
            other => eprintln!("({}: no loss notice to time)", other.name()),
        }
    }
    Ok(())
}

/// One trial: the lock `name` held with expiry `expire` and renewed, reset by another handle
/// `pause` after the grant; how long after the reset's reply the holder was told.
type Trial = fn(&redis::Client, &str, Duration, Duration) -> Result<Duration, String>;

/// `--trials` trials of `trial`, the reset of trial i at `frac(i × 0.618…)` of a renewal
/// interval after the grant: the notice comes with the next renewal, so a fixed phase would
/// time one distance to it only.
fn run_cell(
    client: &redis::Client,
    imp: Impl,
    options: &Options,
    trial: Trial,
) -> Result<NoticeCell, Box<dyn std::error::Error>> {
    let expire = Duration::from_millis(options.expire_ms);
    let interval = expire * 2 / 3;
    let mut conn = client.get_connection()?;
    let (mut samples, mut rtts) = (Vec::new(), Vec::new());
    for i in 0..options.trials {
        let name = format!(
            "bench:loss-notice:{}:{}:{i}",
            imp.name(),
            std::process::id()
        );
        let pause = interval.mul_f64((i as f64 * GOLDEN).fract());
        samples.push(trial(client, &name, expire, pause)?.as_micros() as u64);
        let _: () = redis::cmd("DEL")
            .arg(format!("lock:{name}"))
            .query(&mut conn)?;
        rtts.push(ping(&mut conn)?);
    }
    Ok(NoticeCell {
        imp,
        expire_ms: options.expire_ms,
        trials: samples.len(),
        p50_us: percentile(&mut samples, 50.0),
        p99_us: percentile(&mut samples, 99.0),
        max_us: samples.iter().copied().max(),
        target_p99_us: interval.as_micros() as u64 + SLACK_US,
        rtt_p50_us: percentile(&mut rtts, 50.0),
    })
}

/// How long a trial waits for the notice before it calls it missing.
fn limit(expire: Duration) -> Duration {
    expire * 2 + Duration::from_secs(1)
}

/// A trial's holder: the lock `name` with expiry `expire`, renewed.
fn holder<K>(builder: LockBuilder<K>, expire: Duration) -> LockBuilder<K> {
    builder.expire(expire).auto_renewal(true)
}

/// What a trial says when `reset` found nothing: the holder had lost the lock before.
fn held_until_reset(name: &str, reset: bool) -> Result<(), String> {
    match reset {
        true => Ok(()),
        false => Err(format!("{name}: nothing to reset")),
    }
}

/// A trial of the blocking API: its renewal scheduler finds the reset; the bench looks at
/// the token every [`LOOK_EVERY`].
fn told_blocking(
    client: &redis::Client,
    name: &str,
    expire: Duration,
    pause: Duration,
) -> Result<Duration, String> {
    let e = |e: Error| e.to_string();
    let lock = holder(Lock::builder(client, name), expire)
        .build()
        .map_err(e)?;
    let guard = lock.lock().map_err(e)?;
    let lost = guard.lost_token();
    thread::sleep(pause);
    held_until_reset(
        name,
        Lock::new(client, name).map_err(e)?.reset().map_err(e)?,
    )?;
    let reset = Instant::now();
    while !lost.is_cancelled() {
        if reset.elapsed() > limit(expire) {
            return Err(format!("{name}: no loss notice in {:?}", limit(expire)));
        }
        thread::sleep(LOOK_EVERY);
    }
    Ok(reset.elapsed())
}

/// A trial of the async API on the bench's runtime: its renewal task finds the reset, and
/// `when_lost()` resolves.
#[cfg(feature = "tokio")]
fn told_async(
    client: &redis::Client,
    name: &str,
    expire: Duration,
    pause: Duration,
) -> Result<Duration, String> {
    use redis_blpop_lock::aio;
    let e = |e: Error| e.to_string();
    super::async_cells::runtime().block_on(async {
        let lock = holder(aio::Lock::builder(client, name), expire)
            .build()
            .map_err(e)?;
        let guard = lock.lock().await.map_err(e)?;
        tokio::time::sleep(pause).await;
        let other = aio::Lock::new(client, name).map_err(e)?;
        held_until_reset(name, other.reset().await.map_err(e)?)?;
        let reset = Instant::now();
        tokio::time::timeout(limit(expire), guard.when_lost())
            .await
            .map_err(|_| format!("{name}: no loss notice in {:?}", limit(expire)))?;
        Ok(reset.elapsed())
    })
}

/// A `loss-notice` cell's figures: from the reset's reply to the notice, in µs.
struct NoticeCell {
    imp: Impl,
    expire_ms: u64,
    trials: usize,
    p50_us: Option<u64>,
    p99_us: Option<u64>,
    max_us: Option<u64>,
    /// One renewal interval (two thirds of the expiry) + [`SLACK_US`].
    target_p99_us: u64,
    rtt_p50_us: Option<u64>,
}

impl NoticeCell {
    fn meets_target(&self) -> Option<bool> {
        self.p99_us.map(|p99| p99 <= self.target_p99_us)
    }
}

impl Line for NoticeCell {
    fn json(&self) -> String {
        format!(
            concat!(
                r#"{{"cell":"loss-notice","impl":"{}","expire_ms":{},"trials":{},"#,
                r#""notice_p50_us":{},"notice_p99_us":{},"notice_max_us":{},"#,
                r#""target_p99_us":{},"meets_target":{},"rtt_p50_us":{}}}"#
            ),
            self.imp.name(),
            self.expire_ms,
            self.trials,
            opt(self.p50_us),
            opt(self.p99_us),
            opt(self.max_us),
            self.target_p99_us,
            self.meets_target()
                .map_or("null".to_string(), |m| m.to_string()),
            opt(self.rtt_p50_us),
        )
    }

    fn row(&self) -> String {
        let ms = |v: Option<u64>| v.map_or("-".to_string(), |v| format!("{:.1}", v as f64 / 1e3));
        let verdict = match self.meets_target() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "-",
        };
        format!(
            "{:<11} {:<10} {:>9} {:>6} {:>9} {:>9} {:>9} {:>10} {:>6}",
            "loss-notice",
            self.imp.name(),
            format!("{} ms", self.expire_ms),
            self.trials,
            ms(self.p50_us),
            ms(self.p99_us),
            ms(self.max_us),
            format!("{} {verdict}", ms(Some(self.target_p99_us))),
            self.rtt_p50_us.map_or("-".to_string(), |v| v.to_string()),
        )
    }
}
