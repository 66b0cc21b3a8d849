//! `redis-lock top`: the held locks, read again every interval, with how many were taken
//! between reads, and the semaphores, fair locks, read-write locks and elections in use, as
//! `list` shows them.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis_blpop_lock::inspect::{self, Held, Queue};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::place::Place;
use crate::queues;
use crate::render::{json_string, json_ttl};
use crate::{exit, Failure, Outcome};

/// Moves the cursor home and clears the screen, so each refresh replaces the last.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// How `top` shows each refresh.
#[derive(Clone, Copy)]
pub(crate) enum Shape {
    /// A table, the screen cleared first when stdout is a terminal.
    Table,
    /// One JSON object per line.
    Json,
}

/// Shows the held locks and the queue primitives in use every `interval` until `count`
/// refreshes were shown (forever without it), a signal says stop, or stdout goes away.
pub(crate) fn top(place: &Place, interval: Duration, count: Option<u64>, shape: Shape) -> Outcome {
    let (stopping, stop) = mpsc::channel();
    on_stop_signals(stopping, ())?;
    let clear = matches!(shape, Shape::Table) && std::io::stdout().is_terminal();
    let mut rate = Rate::default();
    let mut shown = 0;
    loop {
        let held =
            inspect::holders(place.backend(), place.io_timeout()).map_err(|e| place.failure(e))?;
        // The reads `list` makes and no more: an election shows its leader's id and term, not
        // the info `leader` shows, which would cost a round trip per election and refresh.
        let primitives = queues::list(place)?;
        let taken = rate.update(&held);
        let text = match shape {
            Shape::Table => table(&held, &primitives, &rate, taken, clear),
            Shape::Json => json(&held, &primitives, &rate, taken),
        };
        let mut stdout = std::io::stdout().lock();
        if stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .is_err()
        {
            // Nobody is reading any more (`redis-lock top --json | head -1`).
            return Ok(0);
        }
        drop(stdout);
        shown += 1;
        if count.is_some_and(|count| shown >= count) {
            return Ok(0);
        }
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            // A signal (stopping `top` is what Ctrl-C is for), or its thread gone.
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return Ok(0),
        }
    }
}

/// Sends `stop` to `events` at each SIGINT, SIGTERM and SIGHUP, so that a wait (between
/// refreshes, for a change) ends at once and the command exits 0 instead of being killed
/// mid-line.
pub(crate) fn on_stop_signals<T: Clone + Send + 'static>(
    events: Sender<T>,
    stop: T,
) -> Result<(), Failure> {
    let os = |e: std::io::Error| Failure::new(exit::OS, format!("cannot handle signals: {e}"));
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(os)?;
    thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for _ in signals.forever() {
                if events.send(stop.clone()).is_err() {
                    break;
                }
            }
        })
        .map_err(os)?;
    Ok(())
}

/// Acquisitions seen from one refresh to the next: a lock that appeared, or whose owner or
/// fencing token changed. One taken and freed between two refreshes is not seen, so this is
/// a lower bound. Locks only: the queue primitives came to `top` later, and counting their
/// holders would change what these numbers meant to whoever already reads them.
#[derive(Default)]
struct Rate {
    /// When the last refresh was read, and each lock's owner and token then; `None` before
    /// the first.
    last: Option<(Instant, Owners)>,
    /// Acquisitions per second between the last two refreshes.
    per_sec: Option<f64>,
    /// Acquisitions seen since `top` started.
    total: u64,
}

/// Each held lock's owner and fencing token, by name.
type Owners = BTreeMap<String, (String, Option<u64>)>;

impl Rate {
    /// Takes in a refresh; returns how many acquisitions it saw.
    fn update(&mut self, held: &[Held]) -> u64 {
        let now = Instant::now();
        let owners: Owners = held
            .iter()
            .map(|h| (h.name.clone(), (h.id.clone(), h.token)))
            .collect();
        let mut taken = 0;
        if let Some((at, last)) = &self.last {
            taken = owners
                .iter()
                .filter(|(name, owner)| last.get(*name) != Some(owner))
                .count() as u64;
            self.total += taken;
            self.per_sec = Some(taken as f64 / now.duration_since(*at).as_secs_f64().max(1e-3));
        }
        self.last = Some((now, owners));
        taken
    }
}

/// One refresh as a table under a line of totals, then each queue primitive's lines as `list`
/// shows them (no blank line among them, so that one ends each refresh), with a blank line
/// after it off a terminal. Names and owners are quoted, so no control characters reach the
/// terminal.
fn table(held: &[Held], primitives: &[Queue], rate: &Rate, taken: u64, clear: bool) -> String {
    let rows: Vec<[String; 4]> = held
        .iter()
        .map(|h| {
            [
                format!("{:?}", h.name),
                format!("{:?}", h.id),
                h.ttl
                    .map_or_else(|| "none".into(), |t| format!("{:.3} s", t.as_secs_f64())),
                h.token.map_or_else(|| "-".into(), |t| t.to_string()),
            ]
        })
        .collect();
    let header = ["NAME", "OWNER", "TTL", "TOKEN"].map(String::from);
    let mut widths = header.each_ref().map(|h| h.len());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let per_sec = rate
        .per_sec
        .map_or_else(|| "-".into(), |r| format!("{r:.2}"));
    let plural = if held.len() == 1 { "" } else { "s" };
    let mut text = if clear {
        CLEAR.to_string()
    } else {
        String::new()
    };
    text.push_str(&format!(
        "{} lock{plural} held; acquisitions: {taken} since the last refresh ({per_sec}/s), \
         {} in all\n",
        held.len(),
        rate.total
    ));
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    for queue in primitives {
        text.push_str(&queues::text(queue));
        text.push('\n');
    }
    if !clear {
        text.push('\n');
    }
    text
}

/// One refresh as a line of JSON: {"time":..,"locks":[{"name":..,"owner":..,
/// "ttl_ms":..|null,"token":..|null},..],"acquisitions":..,"acquisitions_per_sec":..|null,
/// "acquisitions_total":..,"queues":[..]}, each of "queues" as `status --json` prints that
/// primitive. "queues" came later, so it goes last: the fields before it keep their place.
fn json(held: &[Held], primitives: &[Queue], rate: &Rate, taken: u64) -> String {
    let time = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let locks: Vec<String> = held
        .iter()
        .map(|h| {
            format!(
                "{{\"name\":{},\"owner\":{},\"ttl_ms\":{},\"token\":{}}}",
                json_string(&h.name),
                json_string(&h.id),
                json_ttl(h.ttl),
                h.token.map_or_else(|| "null".into(), |t| t.to_string())
            )
        })
        .collect();
    let per_sec = rate
        .per_sec
        .map_or_else(|| "null".into(), |r| format!("{r:.3}"));
    let primitives: Vec<String> = primitives.iter().map(queues::json_queue).collect();
    format!(
        "{{\"time\":{}.{:03},\"locks\":[{}],\"acquisitions\":{taken},\
         \"acquisitions_per_sec\":{per_sec},\"acquisitions_total\":{},\"queues\":[{}]}}\n",
        time / 1000,
        time % 1000,
        locks.join(","),
        rate.total,
        primitives.join(",")
    )
}
