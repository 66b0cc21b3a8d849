//! `status`, `list`, `top` and `reset` for the semaphores, fair locks, read-write locks and
//! elections: their holders and their line of waiters.

use std::fmt::Write as _;

use clap::Args;
use redis_blpop_lock::inspect::{self, Primitive, Queue};
use redis_blpop_lock::Error;

use crate::place::Place;
use crate::render::{held_by, json_string, json_ttl, seconds};
use crate::{exit, Failure, Outcome};

/// Which queue primitive `status` or `reset` means (none: the lock).
#[derive(Args)]
#[group(multiple = false)]
pub(crate) struct Which {
    /// NAME is a semaphore (`run --permits`): keys semaphore:{NAME}:*
    /// (semaphore:=NAME:* when NAME has a {tag} of its own).
    #[arg(long)]
    semaphore: bool,
    /// NAME is a fair lock (`run --fair`): keys fair-lock:{NAME}:*
    /// (fair-lock:=NAME:* when NAME has a {tag} of its own).
    #[arg(long)]
    fair: bool,
    /// NAME is a read-write lock (`run --read` / `--write`): keys rwlock:{NAME}:*
    /// (rwlock:=NAME:* when NAME has a {tag} of its own).
    #[arg(long)]
    rwlock: bool,
    /// NAME is a leader election (`lead`): keys election:{NAME}:*
    /// (election:=NAME:* when NAME has a {tag} of its own).
    #[arg(long)]
    election: bool,
}

impl Which {
    /// The primitive chosen, `None` for the lock.
    pub(crate) fn primitive(&self) -> Option<Primitive> {
        [
            (self.semaphore, Primitive::Semaphore),
            (self.fair, Primitive::FairLock),
            (self.rwlock, Primitive::RwLock),
            (self.election, Primitive::Election),
        ]
        .into_iter()
        .find_map(|(chosen, kind)| chosen.then_some(kind))
    }
}

/// Refused on a quorum, as their handles are there: reading one server, or each, would say
/// "free" of something that cannot exist.
pub(crate) fn not_on_a_quorum(place: &Place, kind: Primitive, name: &str) -> Result<(), Failure> {
    if place.quorum_servers().is_empty() {
        return Ok(());
    }
    Err(place.failure(Error::Unsupported(format!(
        "{} {name:?}: semaphores, read-write locks, fair locks and elections do not live on a \
         quorum of independent servers; use one primary, with replicas or Sentinel",
        kind.word()
    ))))
}

/// The holders and the line of one primitive; exits 0 when it is held, 1 when it is free.
pub(crate) fn status(place: &Place, kind: Primitive, name: &str, json: bool) -> Outcome {
    not_on_a_quorum(place, kind, name)?;
    let queue = inspect::queue(place.backend(), kind, name, place.io_timeout())
        .map_err(|e| place.failure(e))?;
    if json {
        out!("{}", json_queue(&queue));
    } else {
        place.warn_evicting();
        show(&queue);
    }
    Ok(if queue.holders.is_empty() {
        exit::FREE
    } else {
        0
    })
}

/// Every primitive with a holder or a waiter, which `list` and each refresh of `top` show after
/// the locks.
pub(crate) fn list(place: &Place) -> Result<Vec<Queue>, Failure> {
    inspect::queues(place.backend(), place.io_timeout()).map_err(|e| place.failure(e))
}

/// Prints a primitive's lines ([`text`]).
pub(crate) fn show(queue: &Queue) {
    out!("{}", text(queue));
}

/// A primitive's lines, as `status`, `list` and `top` show them: its state, then a line per
/// holder and per waiter, in order (no newline after the last). An election's holder is its
/// leader, and its fencing token the leader's term.
pub(crate) fn text(queue: &Queue) -> String {
    let kind = queue.kind;
    let election = kind == Primitive::Election;
    let state = match (queue.holders.len(), queue.waiters.len()) {
        (0, _) if election => "no leader".to_string(),
        (0, _) => "free".to_string(),
        (1, waiting) if election => format!("1 leader, {waiting} waiting"),
        (1, waiting) => format!("1 holder, {waiting} waiting"),
        (held, waiting) => format!("{held} holders, {waiting} waiting"),
    };
    let mut text = format!("{} {:?}: {state}", kind.word(), queue.name);
    let token = if election { "term" } else { "token" };
    for holder in &queue.holders {
        let _ = write!(
            text,
            "\n  {}{}, {token} {}",
            held_by(&holder.id, holder.ttl),
            then(&kind.units(holder.units)),
            holder.token
        );
    }
    for (at, waiter) in queue.waiters.iter().enumerate() {
        let _ = write!(
            text,
            "\n  waiting {}: {:?}{}, lapses in {} unless it heartbeats",
            at + 1,
            waiter.id,
            then(&kind.units(waiter.units)),
            seconds(waiter.lapses_in)
        );
    }
    text
}

/// ", TEXT", or nothing for no text.
fn then(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        format!(", {text}")
    }
}

/// {"kind":..,"name":..,"held":..,"used":..,"holders":[{"id":..,"units":..,"ttl_ms":..|null,
/// "token":..},..],"waiters":[{"id":..,"units":..,"lapses_in_ms":..},..]}
pub(crate) fn json_queue(queue: &Queue) -> String {
    let holders: Vec<String> = queue
        .holders
        .iter()
        .map(|h| {
            format!(
                "{{\"id\":{},\"units\":{},\"ttl_ms\":{},\"token\":{}}}",
                json_string(&h.id),
                h.units,
                json_ttl(h.ttl),
                h.token
            )
        })
        .collect();
    let waiters: Vec<String> = queue
        .waiters
        .iter()
        .map(|w| {
            format!(
                "{{\"id\":{},\"units\":{},\"lapses_in_ms\":{}}}",
                json_string(&w.id),
                w.units,
                w.lapses_in.as_millis()
            )
        })
        .collect();
    let mut line = format!(
        "{{\"kind\":\"{}\",\"name\":{},\"held\":{},\"used\":{}",
        queue.kind.word(),
        json_string(&queue.name),
        !queue.holders.is_empty(),
        queue.used
    );
    let _ = write!(
        line,
        ",\"holders\":[{}],\"waiters\":[{}]}}",
        holders.join(","),
        waiters.join(",")
    );
    line
}

/// Ends the hold of `id` on the primitive (every holder's with `force`; an election's one
/// leader's without either), handing the units on to the line; a semaphore needs its
/// `permits`.
pub(crate) fn reset(
    place: &Place,
    kind: Primitive,
    name: &str,
    id: Option<&str>,
    force: bool,
    permits: Option<u32>,
) -> Outcome {
    not_on_a_quorum(place, kind, name)?;
    let holder = match (id, force) {
        (Some(id), _) => Some(id),
        // An election has one leader at most: naming it would only be a race with its successor.
        (None, _) if kind == Primitive::Election => None,
        (None, true) => None,
        (None, false) => {
            return Err(Failure::new(
                exit::USAGE,
                format!(
                    "{} {name:?} may have several holders: name one with --id, or reset \
                     them all with --force",
                    kind.word()
                ),
            ))
        }
    };
    let permits = match (kind, permits) {
        (Primitive::Semaphore, None) => {
            return Err(Failure::new(
                exit::USAGE,
                "resetting a semaphore hands its permits on: give its count with --permits N",
            ))
        }
        (_, permits) => permits.unwrap_or(1),
    };
    let removed = inspect::reset_queue(
        place.backend(),
        kind,
        name,
        holder,
        permits,
        place.io_timeout(),
    )
    .map_err(|e| place.failure(e))?;
    let what = match (holder, removed) {
        _ if kind == Primitive::Election => ended_term(holder, removed),
        (Some(id), 0) => format!("{id:?} held nothing; nothing to release"),
        (Some(id), _) => format!("released {id:?}'s hold (the first waiters take it)"),
        (None, 0) => "was not held; nothing to release".to_string(),
        (None, n) => format!("released {n} holds (the first waiters take them)"),
    };
    out!("{} {name:?}: {what}", kind.word());
    Ok(0)
}

/// What a reset of an election did, in the words of an election: a leader's term ends.
fn ended_term(holder: Option<&str>, removed: u64) -> String {
    let next = "(the first candidate in line, if any, leads next)";
    match (holder, removed) {
        (Some(id), 0) => format!("{id:?} was not the leader; nothing to release"),
        (Some(id), _) => format!("ended {id:?}'s term {next}"),
        (None, 0) => "had no leader; nothing to release".to_string(),
        (None, _) => format!("ended the leader's term {next}"),
    }
}
