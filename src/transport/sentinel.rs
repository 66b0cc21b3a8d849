//! A primary named by Redis Sentinel: asked of the sentinels with
//! `SENTINEL GET-MASTER-ADDR-BY-NAME`, confirmed with `ROLE` on the node itself (a sentinel
//! may not know of a failover yet), asked again whenever the primary stops serving, and
//! followed the moment a sentinel announces a failover (`+switch-master`).
//!
//! The announcements are what makes a failover safe: the old primary, if alive, stays a
//! primary (`ROLE` says `master`) for seconds after the sentinels named another, and a lock
//! taken or renewed there is not on the new one. So each sentinel is listened to by a thread
//! of the backend's own, and while none is heard (all unreachable, or not yet subscribed),
//! tries and renewals ask a sentinel before they go out ([`Topology::confirm`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Weak;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use redis::{ConnectionInfo, ErrorKind, RedisError, Value};

use super::nodes::Nodes;
use super::routed::{Routed, Topology};
use super::send::{longer, FIRST_PAUSE};
use super::send_repeatable;
use crate::protocol::request::Request;

/// The longest a look at one sentinel or node may take: one that is down should cost little
/// before the next is asked.
const ASK_FOR: Duration = Duration::from_millis(500);

/// How often a listening thread makes sure its sentinel is still there (a `PING`), and
/// whether any handle still uses the backend: it ends this long after the last one is gone.
const CHECK_EVERY: Duration = Duration::from_millis(500);

/// The channel on which sentinels announce a new primary: `<service> <old host> <old port>
/// <new host> <new port>`.
const SWITCH: &str = "+switch-master";

/// What the listening threads are called (Linux shows the first 15 bytes).
const THREAD_NAME: &str = "redis-lock-sntl";

pub(crate) struct Primary {
    sentinels: Vec<ConnectionInfo>,
    service: String,
    /// `host:port` of the primary, as last learned.
    known: RwLock<Option<String>>,
    /// How many sentinels are being listened to now.
    heard: AtomicUsize,
    /// When this process last learned that another primary replaced the one it knew.
    switched: RwLock<Option<Instant>>,
}

impl Primary {
    pub(crate) fn new(sentinels: Vec<ConnectionInfo>, service: String) -> Primary {
        Primary {
            sentinels,
            service,
            known: RwLock::new(None),
            heard: AtomicUsize::new(0),
            switched: RwLock::new(None),
        }
    }

    /// A sentinel announced a failover of some service to `payload`: the new primary's
    /// address, if it is this service's.
    fn switched_to(&self, payload: &str) -> Option<String> {
        match payload.split_whitespace().collect::<Vec<_>>().as_slice() {
            [service, _, _, host, port] if *service == self.service => {
                Some(format!("{host}:{port}"))
            }
            _ => None,
        }
    }

    /// Makes `addr` the primary; whether it was not already.
    pub(crate) fn switch(&self, addr: String) -> bool {
        let mut known = self.known.write();
        if known.as_deref() == Some(addr.as_str()) {
            return false;
        }
        log::info!(
            "Sentinel service {:?}: the primary is {addr} now (it was {})",
            self.service,
            known.as_deref().unwrap_or("not yet known")
        );
        let replaced = known.is_some();
        if replaced {
            *self.switched.write() = Some(Instant::now());
        }
        *known = Some(addr);
        drop(known);
        if replaced {
            super::switch::switched();
        }
        true
    }

    /// What one sentinel names as the primary.
    fn ask(&self, sentinel: &ConnectionInfo, deadline: Instant) -> Result<String, RedisError> {
        let deadline = deadline.min(Instant::now() + ASK_FOR);
        let left = || {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RedisError::from((ErrorKind::Io, "deadline passed")));
            }
            Ok(left)
        };
        let client = redis::Client::open(sentinel.clone())?;
        let mut con = client.get_connection_with_timeout(left()?)?;
        // What is left after connecting, for the whole exchange.
        let timeout = left()?;
        con.set_read_timeout(Some(timeout))?;
        con.set_write_timeout(Some(timeout))?;
        let reply: Value = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.service)
            .query(&mut con)?;
        match reply {
            Value::Array(parts) => match parts.as_slice() {
                [Value::BulkString(host), Value::BulkString(port)] => Ok(format!(
                    "{}:{}",
                    String::from_utf8_lossy(host),
                    String::from_utf8_lossy(port)
                )),
                _ => Err(unexpected(&parts)),
            },
            Value::Nil => Err(RedisError::from((
                ErrorKind::Client,
                "the sentinel does not monitor a service of that name",
                self.service.clone(),
            ))),
            other => Err(unexpected(&other)),
        }
    }
}

impl Topology for Primary {
    fn confirm(&self, nodes: &Nodes, deadline: Instant) -> Result<(), RedisError> {
        if self.heard.load(Ordering::SeqCst) > 0 {
            return Ok(());
        }
        self.learn(nodes, deadline)
    }

    fn replaced(&self, _slot: Option<u16>, addr: &str) -> bool {
        self.known
            .read()
            .as_deref()
            .is_some_and(|known| known != addr)
    }

    fn primary_for(&self, _slot: Option<u16>) -> Option<String> {
        self.known.read().clone()
    }

    fn switched_at(&self, _slot: Option<u16>) -> Option<Instant> {
        *self.switched.read()
    }

    fn primaries(&self) -> Vec<String> {
        self.known.read().iter().cloned().collect()
    }

    fn learn(&self, nodes: &Nodes, deadline: Instant) -> Result<(), RedisError> {
        let mut last = RedisError::from((ErrorKind::Io, "no sentinel to ask"));
        for sentinel in &self.sentinels {
            let named = self
                .ask(sentinel, deadline)
                .and_then(|addr| is_primary(nodes, &addr, deadline).map(|yes| (addr, yes)));
            match named {
                Ok((addr, true)) => {
                    self.switch(addr);
                    return Ok(());
                }
                Ok((addr, false)) => {
                    last = RedisError::from((
                        ErrorKind::Io,
                        "the node a sentinel named is not a primary (a failover under way)",
                        addr,
                    ))
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn moved(&self, _slot: u16, _addr: &str) {}

    fn hash_tags(&self) -> bool {
        false
    }
}

/// Starts listening to each sentinel's announcements for `routed`, each on a thread that
/// ends once `routed` is gone.
pub(crate) fn listen(routed: &Weak<Routed<Primary>>, sentinels: usize) -> std::io::Result<()> {
    for at in 0..sentinels {
        let routed = Weak::clone(routed);
        thread::Builder::new()
            .name(THREAD_NAME.to_string())
            .spawn(move || listen_to(&routed, at))?;
    }
    Ok(())
}

/// Listens to sentinel number `at`, again after a pause whenever it cannot be heard, until
/// `routed` is gone.
fn listen_to(routed: &Weak<Routed<Primary>>, at: usize) {
    let mut pause = FIRST_PAUSE;
    loop {
        let Some(sentinel) = routed.upgrade().map(|r| r.topology().sentinels[at].clone()) else {
            return;
        };
        match hear(routed, &sentinel) {
            Ok(()) => return,
            Err(e) => log::debug!("cannot hear sentinel {:?}: {e}", sentinel.addr()),
        }
        // ok: a backoff before subscribing again to a sentinel that is away, on this
        // listener's own thread; no lock's waiter waits on it (waits are `BLPOP`s on the
        // primary, each with its own deadline).
        thread::sleep(pause);
        pause = longer(pause);
    }
}

/// Follows `sentinel`'s announcements until `routed` is gone (`Ok`) or the sentinel cannot be
/// heard any more.
fn hear(routed: &Weak<Routed<Primary>>, sentinel: &ConnectionInfo) -> Result<(), RedisError> {
    let client = redis::Client::open(sentinel.clone())?;
    let mut con = client.get_connection_with_timeout(ASK_FOR)?;
    con.set_read_timeout(Some(ASK_FOR))?;
    con.set_write_timeout(Some(ASK_FOR))?;
    let mut pubsub = con.as_pubsub();
    pubsub.subscribe(SWITCH)?;
    let Some(_heard) = Heard::start(routed)? else {
        return Ok(());
    };
    pubsub.set_read_timeout(Some(CHECK_EVERY))?;
    loop {
        match pubsub.get_message() {
            Ok(message) => {
                let Some(routed) = routed.upgrade() else {
                    return Ok(());
                };
                let payload: String = message.get_payload()?;
                if let Some(addr) = routed.topology().switched_to(&payload)
                    && routed.topology().switch(addr)
                {
                    routed.replaced_now(Instant::now() + ASK_FOR);
                }
            }
            Err(e) if e.is_timeout() => {
                if routed.strong_count() == 0 {
                    return Ok(());
                }
                // A sentinel gone without closing the connection must not count as heard.
                pubsub.ping::<Value>()?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A sentinel heard, counted in [`Primary::heard`] while it lives.
struct Heard<'a>(&'a Weak<Routed<Primary>>);

impl<'a> Heard<'a> {
    /// Counts one more sentinel heard, having learned the primary first if none was: a
    /// failover announced while none was heard would be missed otherwise. `None` if `routed`
    /// is gone.
    fn start(routed: &'a Weak<Routed<Primary>>) -> Result<Option<Heard<'a>>, RedisError> {
        let Some(strong) = routed.upgrade() else {
            return Ok(None);
        };
        if strong.topology().heard.load(Ordering::SeqCst) == 0 {
            strong.relearn(Instant::now(), Instant::now() + ASK_FOR)?;
        }
        strong.topology().heard.fetch_add(1, Ordering::SeqCst);
        Ok(Some(Heard(routed)))
    }
}

impl Drop for Heard<'_> {
    fn drop(&mut self) {
        if let Some(routed) = self.0.upgrade() {
            routed.topology().heard.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Whether the node at `addr` says it is a primary.
fn is_primary(nodes: &Nodes, addr: &str, deadline: Instant) -> Result<bool, RedisError> {
    let (_, server) = nodes.at(addr)?;
    let request = Request::single(redis::cmd("ROLE"), true);
    let answered = send_repeatable(&**server, &request, deadline.min(Instant::now() + ASK_FOR))?;
    Ok(match answered.first() {
        Value::Array(role) => {
            matches!(role.first(), Some(Value::BulkString(r)) if r.as_slice() == b"master")
        }
        _ => false,
    })
}

fn unexpected(reply: &impl std::fmt::Debug) -> RedisError {
    RedisError::from((
        ErrorKind::Parse,
        "unexpected reply from a sentinel",
        format!("{reply:?}"),
    ))
}
