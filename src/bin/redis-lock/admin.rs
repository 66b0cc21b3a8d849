//! The operator's commands: `status`, `reset` and `reset-all`.

use redis_blpop_lock::{Backend, Holder, Lock};
use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};

use crate::place::Place;
use crate::{exit, Failure, Outcome};

/// "held by "ID", expires in 1.234 s" (ids and names are quoted, so no control characters
/// reach the terminal).
pub(crate) fn describe(holder: &Holder) -> String {
    let mut text = format!("held by {:?}", holder.id);
    match holder.ttl {
        Some(ttl) => {
            let ms = ttl.as_millis();
            let _ = write!(text, ", expires in {}.{:03} s", ms / 1000, ms % 1000);
        }
        None => text.push_str(", with no expiry"),
    }
    text
}

pub(crate) fn status(backend: &dyn Backend, name: &str, json: bool) -> Outcome {
    let lock = Lock::new(backend, name).map_err(Failure::lock)?;
    let holder = lock.holder().map_err(Failure::lock)?;
    if json {
        let (owner, ttl) = match &holder {
            Some(h) => (
                json_string(&h.id),
                h.ttl
                    .map_or_else(|| "null".to_string(), |ttl| ttl.as_millis().to_string()),
            ),
            None => ("null".to_string(), "null".to_string()),
        };
        out!(
            "{{\"name\":{},\"held\":{},\"owner\":{owner},\"ttl_ms\":{ttl}}}",
            json_string(name),
            holder.is_some()
        );
    } else {
        match holder {
            Some(h) => out!("lock {name:?}: {}", describe(&h)),
            None => out!("lock {name:?}: free"),
        }
    }
    Ok(0)
}

pub(crate) fn reset(backend: &dyn Backend, name: &str) -> Outcome {
    let lock = Lock::new(backend, name).map_err(Failure::lock)?;
    if lock.reset().map_err(Failure::lock)? {
        out!("lock {name:?}: was held; released it and woke one waiter");
    } else {
        out!("lock {name:?}: was not held; nothing to release");
    }
    Ok(0)
}

/// `reset-all` on `place` (`where_` says which servers, for the prompt).
pub(crate) fn reset_all(place: &Place, where_: &str, yes: bool) -> Outcome {
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
            "Release every lock (every lock:* key) on {where_}? [y/N] "
        );
        let _ = stderr.flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            err!("redis-lock: nothing reset");
            return Ok(exit::DECLINED);
        }
    }
    let count = redis_blpop_lock::reset_all(place.backend()).map_err(Failure::lock)?;
    let plural = if count == 1 { "" } else { "s" };
    out!("reset {count} lock{plural}");
    Ok(0)
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
