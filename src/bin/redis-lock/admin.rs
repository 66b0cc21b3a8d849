//! The operator's commands: `status`, `reset` and `reset-all`.

use std::fmt::Write as _;
use std::io::{BufRead, IsTerminal, Write};
use std::time::Duration;

use redis_lock::Lock;

use crate::{exit, Failure, Outcome};

/// Long enough for a slow server, short enough that a black-holed address does not hang a
/// cron job or an operator's shell.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Who holds a lock, and for how long yet, read in one atomic step.
pub(crate) struct Holder {
    pub(crate) owner: String,
    /// `None` when the lock has no expiry.
    pub(crate) ttl_ms: Option<u64>,
}

impl Holder {
    /// "held by "ID", expires in 1.234 s" (ids and names are quoted, so no control
    /// characters reach the terminal).
    pub(crate) fn describe(&self) -> String {
        let mut text = format!("held by {:?}", self.owner);
        match self.ttl_ms {
            Some(ms) => {
                let _ = write!(text, ", expires in {}.{:03} s", ms / 1000, ms % 1000);
            }
            None => text.push_str(", with no expiry"),
        }
        text
    }
}

/// The current holder of lock `name`, or `None` when it is free.
pub(crate) fn holder(client: &redis::Client, name: &str) -> Result<Option<Holder>, Failure> {
    let key = format!("lock:{name}");
    let mut conn = client
        .get_connection_with_timeout(TIMEOUT)
        .map_err(Failure::redis)?;
    conn.set_read_timeout(Some(TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(TIMEOUT)))
        .map_err(Failure::redis)?;
    // One MULTI, so the TTL belongs to the owner read with it.
    let (owner, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(&key)
        .cmd("PTTL")
        .arg(&key)
        .query(&mut conn)
        .map_err(Failure::redis)?;
    Ok(owner.map(|bytes| Holder {
        owner: String::from_utf8_lossy(&bytes).into_owned(),
        // PTTL is -1 for a key without expiry.
        ttl_ms: u64::try_from(pttl).ok(),
    }))
}

pub(crate) fn status(client: &redis::Client, name: &str, json: bool) -> Outcome {
    let holder = holder(client, name)?;
    if json {
        let (owner, ttl) = match &holder {
            Some(h) => (
                json_string(&h.owner),
                h.ttl_ms
                    .map_or_else(|| "null".to_string(), |ms| ms.to_string()),
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
            Some(h) => out!("lock {name:?}: {}", h.describe()),
            None => out!("lock {name:?}: free"),
        }
    }
    Ok(0)
}

pub(crate) fn reset(client: &redis::Client, name: &str) -> Outcome {
    let lock = Lock::new(client, name).map_err(Failure::lock)?;
    if lock.reset().map_err(Failure::lock)? {
        out!("lock {name:?}: was held; released it and woke one waiter");
    } else {
        out!("lock {name:?}: was not held; nothing to release");
    }
    Ok(0)
}

pub(crate) fn reset_all(client: &redis::Client, yes: bool) -> Outcome {
    if !yes {
        if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
            return Err(Failure::new(
                exit::USAGE,
                "reset-all frees every lock on the server; not on a terminal, so pass --yes to confirm",
            ));
        }
        let info = client.get_connection_info();
        let mut stderr = std::io::stderr();
        // The address and database, not the URL: that may hold a password. A prompt that
        // cannot be shown or answered is a "no", so write errors are let go.
        let _ = write!(
            stderr,
            "Release every lock (every lock:* key) on {} db {}? [y/N] ",
            info.addr(),
            info.redis_settings().db()
        );
        let _ = stderr.flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes") {
            err!("redis-lock: nothing reset");
            return Ok(exit::DECLINED);
        }
    }
    let count = redis_lock::reset_all(client).map_err(Failure::lock)?;
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
