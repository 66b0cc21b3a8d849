//! How redis-lock writes what it found: holders and their expiries in words, and the pieces
//! of its JSON output. Pure formatting: nothing here talks to Redis or prints, and nothing here
//! uses another module of redis-lock, so every command can use it.

use std::fmt::Write as _;
use std::time::Duration;

use redis_blpop_lock::Holder;

/// "held by "ID", expires in 1.234 s" (ids and names are quoted, so no control characters
/// reach the terminal).
pub(crate) fn describe(holder: &Holder) -> String {
    held_by(&holder.id, holder.ttl)
}

/// "held by "ID", expires in 1.234 s", or "held by "ID", with no expiry" for `ttl` `None`.
pub(crate) fn held_by(id: &str, ttl: Option<Duration>) -> String {
    let mut text = format!("held by {id:?}");
    match ttl {
        Some(ttl) => {
            let _ = write!(text, ", expires in {}", seconds(ttl));
        }
        None => text.push_str(", with no expiry"),
    }
    text
}

/// "1.234 s": whole milliseconds, the rest cut off (never rounded up).
pub(crate) fn seconds(d: Duration) -> String {
    let ms = d.as_millis();
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}

/// A TTL in milliseconds, `null` for none.
pub(crate) fn json_ttl(ttl: Option<Duration>) -> String {
    ttl.map_or_else(|| "null".to_string(), |ttl| ttl.as_millis().to_string())
}

/// `s` as a JSON string literal.
pub(crate) fn json_string(s: &str) -> String {
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
