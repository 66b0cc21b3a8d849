//! A primary named by Redis Sentinel: asked of the sentinels with
//! `SENTINEL GET-MASTER-ADDR-BY-NAME`, confirmed with `ROLE` on the node itself (a sentinel
//! may not know of a failover yet), and asked again whenever the primary stops serving.

use std::time::{Duration, Instant};

use parking_lot::RwLock;
use redis::{ConnectionInfo, ErrorKind, RedisError, Value};

use super::nodes::Nodes;
use super::routed::Topology;
use super::send_repeatable;
use crate::protocol::requests::Request;

/// The longest a look at one sentinel or node may take: one that is down should cost little
/// before the next is asked.
const ASK_FOR: Duration = Duration::from_millis(500);

pub(crate) struct Primary {
    sentinels: Vec<ConnectionInfo>,
    service: String,
    /// `host:port` of the primary, as last learned.
    known: RwLock<Option<String>>,
}

impl Primary {
    pub(crate) fn new(sentinels: Vec<ConnectionInfo>, service: String) -> Primary {
        Primary {
            sentinels,
            service,
            known: RwLock::new(None),
        }
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
    fn primary_for(&self, _slot: Option<u16>) -> Option<String> {
        self.known.read().clone()
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
                    *self.known.write() = Some(addr);
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

/// Whether the node at `addr` says it is a primary.
fn is_primary(nodes: &Nodes, addr: &str, deadline: Instant) -> Result<bool, RedisError> {
    let (_, server) = nodes.at(addr)?;
    let request = Request::single(redis::cmd("ROLE"), true);
    let answered = send_repeatable(server, &request, deadline.min(Instant::now() + ASK_FOR))?;
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
