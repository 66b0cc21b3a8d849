//! What the topologies (`cluster`, `sentinel`) share: a server with a connection kept for the
//! helpers' checks, and waits whose failure quotes the log of each server that held them up.

use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use super::{eventually, secs, RedisServer};

/// A server of a topology.
pub struct Node {
    pub server: RedisServer,
    // Polls every few milliseconds over several servers would otherwise open (and leave in
    // TIME_WAIT) thousands of connections.
    conn: Mutex<Option<redis::Connection>>,
}

impl Node {
    pub fn new(server: RedisServer) -> Node {
        Node {
            server,
            conn: Mutex::new(None),
        }
    }

    /// Runs `cmd` on the kept connection, which is opened again after an error that closed it.
    pub fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> redis::RedisResult<T> {
        let mut kept = self.conn.lock().unwrap();
        let conn = match kept.as_mut() {
            Some(conn) => conn,
            None => {
                let conn = self.server.client().get_connection_with_timeout(secs(2))?;
                // Long enough for a MIGRATE with its own 5 s timeout.
                conn.set_read_timeout(Some(secs(10)))?;
                kept.insert(conn)
            }
        };
        let result = cmd.query(conn);
        if result.as_ref().is_err_and(|e| e.is_unrecoverable_error()) {
            *kept = None;
        }
        result
    }

    /// `query` for a command that has to succeed; a failure quotes the server's log.
    pub fn must<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd, what: &str) -> T {
        self.query(cmd).unwrap_or_else(|e| {
            panic!(
                "{}",
                self.server
                    .failure(format!("{what} on port {}: {e}", self.server.port))
            )
        })
    }

    /// A `name:value` field of a reply such as `INFO` or `CLUSTER INFO`; None when the server
    /// does not answer or has no such field.
    pub fn field(&self, cmd: &redis::Cmd, name: &str) -> Option<String> {
        let text: String = self.query(cmd).ok()?;
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key == name).then(|| value.trim().to_string())
        })
    }

    /// A field of `INFO replication`: `role`, `master_port`, `master_link_status`.
    pub fn replication(&self, name: &str) -> Option<String> {
        self.field(redis::cmd("INFO").arg("replication"), name)
    }

    pub fn kill(&mut self) {
        self.server.kill();
        *self.conn.get_mut().unwrap() = None;
    }

    pub fn running(&self) -> bool {
        self.server.running()
    }
}

/// Waits until `ok` holds on every one of `nodes`; a failure quotes the log of each node
/// where it did not.
pub fn until_all(limit: Duration, what: &str, nodes: &[&Node], ok: impl Fn(&Node) -> bool) {
    let failure = Lazy(|f: &mut fmt::Formatter<'_>| {
        writeln!(f, "{what}")?;
        for node in nodes.iter().filter(|node| !ok(node)) {
            let port = node.server.port;
            writeln!(f, "{}", node.server.failure(format!("not on port {port}")))?;
        }
        Ok(())
    });
    eventually(limit, failure, || nodes.iter().all(|node| ok(node)));
}

/// A message written only if a wait fails, so that it describes the nodes as they are then.
struct Lazy<F>(F);

impl<F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result> fmt::Display for Lazy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}
