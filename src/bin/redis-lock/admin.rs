//! The operator's commands: `status`, `list`, `reset` and `reset-all`.

use redis_blpop_lock::{inspect, Error, Lock};
use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use crate::peek::{self, Seen};
use crate::place::Place;
use crate::queues;
use crate::render::{describe, held_by, json_string, json_ttl};
use crate::{exit, Failure, Outcome};

/// Each round trip of the library's `reset_all` (which takes no timeout) may take this long.
const RESET_ALL_IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A handle on lock `name` for looking at it or resetting it.
fn handle(place: &Place, name: &str) -> Result<Lock, Failure> {
    place.lock(name).build().map_err(|e| place.failure(e))
}

/// The lock's holder; on a quorum (the majority's answer), followed by each server's view.
/// Exits 0 when the lock is held, 1 when it is free.
pub(crate) fn status(place: &Place, name: &str, json: bool) -> Outcome {
    let holder = handle(place, name)?
        .holder()
        .map_err(|e| place.failure(e))?;
    let code = if holder.is_some() { 0 } else { exit::FREE };
    let servers = place.quorum_servers();
    let seen = peek::each(servers, name);
    if json {
        let (owner, ttl) = match &holder {
            Some(h) => (json_string(&h.id), json_ttl(h.ttl)),
            None => ("null".to_string(), "null".to_string()),
        };
        let mut line = format!(
            "{{\"name\":{},\"held\":{},\"owner\":{owner},\"ttl_ms\":{ttl}",
            json_string(name),
            holder.is_some()
        );
        if !servers.is_empty() {
            let entries: Vec<String> = seen.iter().map(json_seen).collect();
            let _ = write!(line, ",\"servers\":[{}]", entries.join(","));
        }
        let evicting: Vec<String> = place.evicting().iter().map(json_evicting).collect();
        if !evicting.is_empty() {
            let _ = write!(line, ",\"evicting\":[{}]", evicting.join(","));
        }
        out!("{line}}}");
    } else {
        place.warn_evicting();
        match holder {
            Some(h) => out!("lock {name:?}: {}", describe(&h)),
            None => out!("lock {name:?}: free"),
        }
        for Seen { server, state } in &seen {
            let state = match state {
                Ok(Some((id, ttl))) => held_by(id, *ttl),
                Ok(None) => "free".to_string(),
                // Escaped, as ids are quoted: an error may carry a server's text.
                Err(e) => format!("unreachable: {}", e.escape_debug()),
            };
            out!("  {server}: {state}");
        }
    }
    Ok(code)
}

/// Every held lock, a line (or a JSON object) each; then every semaphore, fair lock,
/// read-write lock and election with a holder or a waiter.
pub(crate) fn list(place: &Place, json: bool) -> Outcome {
    let held =
        inspect::holders(place.backend(), place.io_timeout()).map_err(|e| place.failure(e))?;
    let lines = queues::list(place)?;
    if json {
        let entries: Vec<String> = held
            .iter()
            .map(|h| {
                format!(
                    "{{\"kind\":\"lock\",\"name\":{},\"owner\":{},\"ttl_ms\":{}}}",
                    json_string(&h.name),
                    json_string(&h.id),
                    json_ttl(h.ttl)
                )
            })
            .chain(lines.iter().map(queues::json_queue))
            .chain(place.evicting().iter().map(json_evicting))
            .collect();
        out!("[{}]", entries.join(","));
    } else {
        place.warn_evicting();
        for h in &held {
            out!("lock {:?}: {}", h.name, held_by(&h.id, h.ttl));
        }
        lines.iter().for_each(queues::show);
    }
    Ok(0)
}

/// A server that can evict keys, as `status --json` and `list --json` give it:
/// {"kind":"evicting","server":..,"policy":..,"warning":..}.
fn json_evicting(evicting: &inspect::Evicting) -> String {
    format!(
        "{{\"kind\":\"evicting\",\"server\":{},\"policy\":{},\"warning\":{}}}",
        json_string(&evicting.server),
        json_string(&evicting.policy),
        json_string(&evicting.to_string())
    )
}

/// One server's entry in `status --json`:
/// {"server":..,"held":..|null,"owner":..|null,"ttl_ms":..|null,"error":..|null}.
fn json_seen(seen: &Seen) -> String {
    let (held, owner, ttl, error) = match &seen.state {
        Ok(Some((id, ttl))) => ("true", json_string(id), json_ttl(*ttl), "null".to_string()),
        Ok(None) => (
            "false",
            "null".to_string(),
            "null".to_string(),
            "null".to_string(),
        ),
        Err(e) => (
            "null",
            "null".to_string(),
            "null".to_string(),
            json_string(e),
        ),
    };
    format!(
        "{{\"server\":{},\"held\":{held},\"owner\":{owner},\"ttl_ms\":{ttl},\"error\":{error}}}",
        json_string(&seen.server)
    )
}

/// Frees lock `name` whoever holds it; with `force`, also a key there that is not a lock.
pub(crate) fn reset(place: &Place, name: &str, force: bool) -> Outcome {
    let lock = handle(place, name)?;
    let reset = match lock.reset() {
        Err(Error::Corrupt { .. }) if force => {
            let cleared = inspect::clear_corrupt(place.backend(), name, place.io_timeout());
            if cleared.map_err(|e| place.failure(e))? {
                out!("lock {name:?}: its key held something that was not a lock; deleted it");
                return Ok(0);
            }
            // Gone, or made a lock again, since: reset as a lock.
            lock.reset()
        }
        reset => reset,
    };
    if reset.map_err(|e| place.failure(e))? {
        // A release's signal: whether anyone was waiting cannot be known.
        out!("lock {name:?}: was held; released it (the first waiter, if any, takes it)");
    } else {
        out!("lock {name:?}: was not held; nothing to release");
    }
    Ok(0)
}

/// `reset-all` on `place`, after asking unless `yes`.
pub(crate) fn reset_all(place: &Place, yes: bool) -> Outcome {
    if !yes {
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
            return Err(Failure::new(
                exit::USAGE,
                "reset-all frees every lock on the server; not on a terminal, so pass --yes to confirm",
            ));
        }
        let mut stderr = std::io::stderr();
        // A prompt that cannot be shown or answered is a "no", so write errors are let go.
        let _ = write!(
            stderr,
            "Release every lock (every lock:* key), semaphore, fair lock, read-write lock and \
             election on {}? [y/N] ",
            place.describe()
        );
        let _ = stderr.flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            err!("redis-lock: nothing reset");
            return Ok(exit::DECLINED);
        }
    }
    let count = redis_blpop_lock::reset_all(place.backend())
        .map_err(|e| place.failure_within(e, RESET_ALL_IO_TIMEOUT))?;
    let plural = if count == 1 { "" } else { "s" };
    // A lock is one hold; a semaphore or a read-write lock may have several.
    out!("reset {count} hold{plural}");
    Ok(0)
}
