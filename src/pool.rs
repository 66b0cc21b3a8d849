//! Connections shared by every lock handle on one server.
//!
//! A waiter blocked in `BLPOP` occupies its connection for the whole wait. A bounded pool shared
//! by waiters and holders would let a crowd of waiters starve the holder of the connection it
//! needs to release, and deadlock. So this pool never makes anyone wait: it hands out an idle
//! connection or opens a new one, and keeps up to [`MAX_IDLE`] of them for reuse, so that
//! `with_lock` in a loop does not open a TCP connection per call.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use parking_lot::Mutex;
use redis::{Connection, ConnectionLike, ErrorKind, RedisError, RedisResult};

use crate::Error;

/// Idle connections kept per server; more are closed when they come back.
const MAX_IDLE: usize = 16;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longer than the longest `BLPOP` the lock sends, so a live server always answers first and a
/// dead or partitioned one is noticed instead of hanging a thread forever.
const IO_TIMEOUT: Duration = crate::lock::MAX_BLOCK.saturating_add(Duration::from_secs(5));

static POOLS: LazyLock<Mutex<HashMap<String, Arc<Pool>>>> = LazyLock::new(Default::default);

pub(crate) struct Pool {
    client: redis::Client,
    idle: Mutex<Vec<Connection>>,
}

impl Pool {
    /// The pool for the server, database and credentials that `client` points at.
    pub(crate) fn shared(client: &redis::Client) -> Result<Arc<Pool>, Error> {
        let info = client.get_connection_info();
        let settings = info.redis_settings();
        // The Debug form of the settings hides the password, which must still tell pools apart.
        let key = format!("{:?}|{settings:?}|{:?}", info.addr(), settings.password());
        let mut pools = POOLS.lock();
        if let Some(pool) = pools.get(&key) {
            return Ok(Arc::clone(pool));
        }
        // Lock traffic is small request/reply pairs: Nagle's algorithm would only add latency.
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let client = redis::Client::open(info.clone().set_tcp_settings(tcp))?;
        let pool = Arc::new(Pool {
            client,
            idle: Mutex::new(Vec::new()),
        });
        pools.insert(key, Arc::clone(&pool));
        Ok(pool)
    }

    /// An idle connection, or a new one.
    pub(crate) fn get(&self) -> RedisResult<PooledConnection<'_>> {
        let idle = self.idle.lock().pop();
        let reused = idle.is_some();
        let conn = match idle {
            Some(conn) => conn,
            None => self.connect()?,
        };
        Ok(PooledConnection {
            pool: self,
            conn: Some(conn),
            reused,
            broken: false,
        })
    }

    /// Runs one request. A connection that sat idle may have been closed by the server (a
    /// restart, `CLIENT KILL`, an idle timeout) without our knowing; such a connection fails
    /// before the server runs anything, so the request is safe to send once more on a new one.
    pub(crate) fn run<T>(
        &self,
        mut request: impl FnMut(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let mut conn = self.get()?;
        match conn.run(&mut request) {
            Err(e) if conn.reused && conn.broken => {
                log::debug!("idle redis connection was dead ({e}); retrying on a new one");
                self.idle.lock().clear();
                self.get()?.run(request)
            }
            result => result,
        }
    }

    fn connect(&self) -> RedisResult<Connection> {
        let conn = self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
        conn.set_read_timeout(Some(IO_TIMEOUT))?;
        conn.set_write_timeout(Some(IO_TIMEOUT))?;
        Ok(conn)
    }
}

/// A connection on loan from a [`Pool`]; it goes back to the idle list on drop unless a
/// request on it failed below the level of a Redis reply.
pub(crate) struct PooledConnection<'a> {
    pool: &'a Pool,
    /// Always `Some` until drop hands it back to the pool.
    conn: Option<Connection>,
    reused: bool,
    broken: bool,
}

impl PooledConnection<'_> {
    pub(crate) fn run<T>(
        &mut self,
        request: impl FnOnce(&mut Connection) -> RedisResult<T>,
    ) -> RedisResult<T> {
        let result = match self.conn.as_mut() {
            Some(conn) => request(conn),
            None => Err(RedisError::from((ErrorKind::Client, "connection returned"))),
        };
        if let Err(e) = &result {
            self.broken |= breaks_connection(e);
        }
        result
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken
    }
}

impl Drop for PooledConnection<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        if self.broken || !conn.is_open() {
            return;
        }
        let mut idle = self.pool.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
        }
    }
}

/// Whether an error leaves the connection unusable: anything but an error reply from the
/// server (after a timeout or a parse error the next reply could belong to an earlier request).
fn breaks_connection(e: &RedisError) -> bool {
    !matches!(
        e.kind(),
        ErrorKind::Server(_) | ErrorKind::Extension | ErrorKind::UnexpectedReturnType
    )
}
