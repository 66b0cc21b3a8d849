//! How redis-lock writes what it found: holders and their expiries in words, and the pieces
//! of its JSON output. Pure formatting: nothing here talks to Redis or prints, and nothing here
//! uses another module of redis-lock, so every command can use it.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// Milliseconds since the Unix epoch (0 for a time before it, which no server reports).
pub(crate) fn epoch_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()
}

/// `t` in RFC 3339, in UTC, to the millisecond: "2026-11-23T22:38:01.518Z".
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let ms = epoch_ms(t);
    let secs = ms / 1000;
    let (year, month, day) = civil_date(secs / 86_400);
    let in_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60,
        ms % 1000
    )
}

/// The Gregorian (year, month, day) of the day `days` after 1970-01-01: Howard Hinnant's
/// `civil_from_days`, on the 400-year eras that start on March 1st, so that the leap day
/// ends a year. The standard library has no calendar, and a crate for one line is not worth
/// its weight.
fn civil_date(days: u128) -> (u128, u128, u128) {
    // 1970-01-01 is day 719468 after 0000-03-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_based_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * march_based_month + 2) / 5 + 1;
    let month = if march_based_month < 10 {
        march_based_month + 3
    } else {
        march_based_month - 9
    };
    let year = era * 400 + year_of_era + u128::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> String {
        rfc3339(UNIX_EPOCH + Duration::from_millis(ms))
    }

    #[test]
    fn rfc3339_counts_from_the_epoch_in_utc() {
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_795_473_481_518), "2026-11-23T22:38:01.518Z");
    }

    #[test]
    fn rfc3339_knows_the_leap_days() {
        assert_eq!(at(951_782_399_000), "2000-02-28T23:59:59.000Z");
        assert_eq!(at(951_782_400_000), "2000-02-29T00:00:00.000Z");
        // 2100 is no leap year: March follows February 28th.
        assert_eq!(at(4_107_456_000_000), "2100-02-28T00:00:00.000Z");
        assert_eq!(at(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
    }
}
