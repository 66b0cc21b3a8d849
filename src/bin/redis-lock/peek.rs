//! A quorum's servers one by one, for `status`: what each holds of a lock, read directly
//! rather than through the majority vote, so an operator sees which servers agree.

use std::time::Duration;

use crate::place::server_name;

/// How long one server may take to connect, and then to answer: a dead or frozen server
/// costs at most this twice, and the others are still shown.
const SERVER_TIMEOUT: Duration = Duration::from_millis(500);

/// What one server holds of a lock.
pub(crate) struct Seen {
    /// `host:port/db`, never the URL (it may hold a password).
    pub(crate) server: String,
    /// The owner id and what is left of its expiry (`None`: no expiry), `None` when free;
    /// the error when the server could not be read.
    pub(crate) state: Result<Option<(String, Option<Duration>)>, String>,
}

/// Lock `name` as each of `servers` holds it, in their order.
pub(crate) fn each(servers: &[redis::Client], name: &str) -> Vec<Seen> {
    servers
        .iter()
        .map(|client| Seen {
            server: server_name(client.get_connection_info()),
            state: read(client, name).map_err(|e| e.to_string()),
        })
        .collect()
}

fn read(
    client: &redis::Client,
    name: &str,
) -> redis::RedisResult<Option<(String, Option<Duration>)>> {
    let mut conn = client.get_connection_with_timeout(SERVER_TIMEOUT)?;
    conn.set_read_timeout(Some(SERVER_TIMEOUT))?;
    conn.set_write_timeout(Some(SERVER_TIMEOUT))?;
    // The lock key as src/protocol/keys.rs spells it; a quorum's keys carry no hash tag.
    // MULTI/EXEC, so the owner and the TTL are read at the same moment.
    let key = format!("lock:{name}");
    let (owner, pttl): (Option<Vec<u8>>, i64) = redis::pipe()
        .atomic()
        .get(&key)
        .pttl(&key)
        .query(&mut conn)?;
    // PTTL is -1 for a key without expiry; the id may not be UTF-8, as in `Lock::holder`.
    Ok(owner.map(|id| {
        let ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
        (String::from_utf8_lossy(&id).into_owned(), ttl)
    }))
}
