//! One Redis server: connections for short requests and connections for waits, kept apart,
//! each call bounded by its deadline down to the socket.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use redis::{ErrorKind, RedisError, Value};

use super::admin::{admin_outcome, kill_cmd};
use super::conn::Conn;
use super::eviction::Eviction;
use super::runs::Runs;
use super::{Admin, ConnId, Fault, Primaries, Primary, Transport, Waiter};
use crate::protocol::eviction;
use crate::protocol::request::Request;
use crate::Error;

/// Idle connections kept per pool; more are closed when they come back.
const MAX_IDLE: usize = 16;

/// Every server the process has talked to. They are never dropped, so a backend over several
/// servers can lend out connections that borrow a server for as long as it likes.
static SERVERS: LazyLock<Mutex<HashMap<String, &'static Arc<Server>>>> =
    LazyLock::new(Default::default);

pub(crate) struct Server {
    client: redis::Client,
    /// Connections that never block at the server: tries, releases, extends, reads.
    short: Pool,
    /// Connections lent to waits for their `BLPOP`.
    waiting: Pool,
    /// Its eviction policy, read with the first request.
    eviction: Eviction,
    /// Its run, read on each new connection: a restart is known at the first one after it.
    runs: Runs,
}

impl Server {
    /// The backend for the server, database and credentials that `client` points at, shared
    /// by every handle in the process.
    pub(crate) fn shared(client: &redis::Client) -> Result<&'static Arc<Server>, Error> {
        let info = client.get_connection_info();
        let settings = info.redis_settings();
        let key = identity(info);
        let mut servers = SERVERS.lock();
        if let Some(server) = servers.get(&key) {
            return Ok(server);
        }
        // Lock traffic is small request/reply pairs: Nagle's algorithm would only add latency.
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        // No `CLIENT SETINFO` on connecting: our own `CLIENT ID` is the first request, so a
        // server that turns us away (`maxclients`) says so in its answer.
        let redis = settings.clone().set_skip_set_lib_name();
        let client =
            redis::Client::open(info.clone().set_tcp_settings(tcp).set_redis_settings(redis))?;
        let server: &'static Arc<Server> = Box::leak(Box::new(Arc::new(Server {
            client,
            short: Pool::default(),
            waiting: Pool::default(),
            eviction: Eviction::new(info.addr().to_string()),
            runs: Runs::default(),
        })));
        servers.insert(key, server);
        Ok(server)
    }

    /// A new connection, set up by `deadline`, that knows its id at the server.
    fn connect(&self, deadline: Instant) -> Result<Conn, RedisError> {
        let conn = Conn::open(&self.client, deadline)?;
        if let Some(run_id) = conn.run_id() {
            self.saw_run(run_id.to_owned());
        }
        Ok(conn)
    }

    /// The client the connections are made with (no `CLIENT SETINFO`, no Nagle).
    #[cfg(feature = "tokio")]
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// An idle short connection, else a new one; when the server refuses new ones (its
    /// `maxclients`) while some of ours are busy, the first of those to come back.
    fn short_conn(&self, deadline: Instant) -> Result<Loan<'_>, RedisError> {
        if let Some(loan) = self.short.take_idle() {
            return Ok(loan);
        }
        // A server dying resets the connections still in its backlog; asked again, it refuses
        // (one that is full turns us away again).
        let connected = (self.connect(deadline)).or_else(|e| {
            if e.is_connection_dropped() {
                self.connect(deadline)
            } else {
                Err(e)
            }
        });
        match connected {
            Ok(conn) => Ok(self.short.lend_new(conn)),
            // Turned away by a server that is up (its `maxclients`), not refused by one that
            // is down: whose connections will not come back either.
            Err(e) if self.short.live() > 0 && !e.is_timeout() && !e.is_connection_refusal() => {
                log::debug!("no new connection ({e}); waiting for one of ours to come back");
                self.short.wait_idle(deadline).ok_or(e)
            }
            Err(e) => Err(e),
        }
    }

    /// Runs a short administrative command about connection `conn`.
    fn admin(&self, cmd: redis::Cmd, deadline: Instant) -> Result<Admin, Fault> {
        // Killing or unblocking twice does no more than once.
        let request = Request::single(cmd, true);
        admin_outcome(&request, super::send_repeatable(self, &request, deadline))
    }
}

/// A request sent on a short connection whose replies are still to be read: a quorum sends
/// to every server first, then reads, so the servers work at once.
pub(crate) struct InFlight<'a> {
    server: &'a Server,
    loan: Loan<'a>,
    /// Whether the first reply is an `INFO memory`'s, for the eviction policy.
    probe: bool,
    replies: usize,
}

impl Server {
    /// Sends `request` on a short connection, by `deadline`.
    pub(crate) fn begin(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> Result<InFlight<'_>, Fault> {
        let mut loan = self.short_conn(deadline).map_err(Fault::NotSent)?;
        // Until the eviction policy is known, an `INFO memory` goes out in the same write:
        // no round trip of its own, and no share of the deadline taken from the request.
        let probe = self.eviction.unread();
        let mut packed = match probe {
            true => eviction::request().packed(),
            false => Vec::new(),
        };
        packed.extend(request.packed());
        let sent = loan.conn().map_err(Fault::NotSent).and_then(|conn| {
            conn.send(&packed, deadline).map_err(|error| Fault::Lost {
                conn: conn.conn_id(),
                error,
            })
        });
        let mut in_flight = InFlight {
            server: self,
            loan,
            probe,
            replies: request.cmds.len(),
        };
        match sent {
            Ok(()) => Ok(in_flight),
            Err(fault) => Err(in_flight.failed(fault)),
        }
    }
}

impl InFlight<'_> {
    /// The replies, all by `deadline`. A failure is `Lost`: the server may have run it.
    pub(crate) fn finish(mut self, deadline: Instant) -> Result<Vec<Value>, Fault> {
        let mut replies = Vec::with_capacity(self.replies);
        for at in 0..self.replies + usize::from(self.probe) {
            let received = self.loan.conn().and_then(|conn| conn.recv(deadline));
            match received {
                Ok(reply) if self.probe && at == 0 => self.server.eviction.record(&reply),
                Ok(reply) => replies.push(reply),
                Err(error) => {
                    let conn = self.loan.conn.as_ref().and_then(Conn::conn_id);
                    return Err(self.failed(Fault::Lost { conn, error }));
                }
            }
        }
        Ok(replies)
    }

    /// Closes the connection after `fault`: its next reply could belong to this request.
    fn failed(&mut self, fault: Fault) -> Fault {
        if let Fault::Lost { error, .. } = &fault {
            self.loan.discard();
            if error.is_connection_dropped() {
                // The server closed it: likely a restart or a kill of every client, which
                // the idle ones met too. Better a new connection than a dead one.
                self.server.short.drop_idle();
            }
        }
        fault
    }
}

impl Transport for Server {
    #[cfg(feature = "tokio")]
    fn to_async(self: Arc<Self>) -> Arc<dyn super::aio::AsyncTransport> {
        let client = self.client().clone();
        super::aio::native::Native::shared(self, &client)
    }

    fn call(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault> {
        self.begin(request, deadline)?.finish(deadline)
    }

    fn waiter(&self, _slot: u16, deadline: Instant) -> Result<Box<dyn Waiter + '_>, Fault> {
        let loan = match self.waiting.take_idle() {
            Some(loan) => loan,
            None => self
                .waiting
                .lend_new(self.connect(deadline).map_err(Fault::NotSent)?),
        };
        Ok(Box::new(WaitConn { loan }))
    }

    fn kill(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault> {
        self.admin(kill_cmd(conn), deadline)
    }

    fn primaries(&self, _deadline: Instant) -> Result<Primaries, Error> {
        Ok(vec![Primary::Itself])
    }

    fn saw_run(&self, run_id: String) {
        let addr = self.client.get_connection_info().addr().to_string();
        self.runs.saw(&addr, run_id);
    }

    fn switched_at(&self, _slot: u16) -> Option<Instant> {
        self.runs.restarted_at()
    }

    fn eviction(&self) -> Option<&Eviction> {
        Some(&self.eviction)
    }
}

struct WaitConn<'a> {
    loan: Loan<'a>,
}

impl Waiter for WaitConn<'_> {
    fn id(&self) -> Option<ConnId> {
        self.loan.conn.as_ref().and_then(Conn::conn_id)
    }

    fn send(&mut self, request: &Request, deadline: Instant) -> Result<(), Fault> {
        let conn = self.loan.conn().map_err(Fault::NotSent)?;
        let id = conn.conn_id();
        conn.send(&request.packed(), deadline).map_err(|error| {
            self.loan.discard();
            Fault::Lost { conn: id, error }
        })
    }

    fn recv(&mut self, deadline: Instant) -> Result<Value, Fault> {
        let conn = self
            .loan
            .conn()
            .map_err(|error| Fault::Lost { conn: None, error })?;
        let id = conn.conn_id();
        conn.recv(deadline).map_err(|error| {
            self.loan.discard();
            Fault::Lost { conn: id, error }
        })
    }

    fn close(mut self: Box<Self>) {
        self.loan.discard();
    }
}

/// What tells one server, database and login apart from another: the key of every cache of
/// per-server state.
pub(crate) fn identity(info: &redis::ConnectionInfo) -> String {
    format!("{:?}|{}", info.addr(), login(info.redis_settings()))
}

/// The database and login of `settings` as a registry's key holds them. Their Debug form
/// hides the password; the key has it only as a keyed hash, which still tells logins with
/// other passwords apart.
pub(crate) fn login(settings: &redis::RedisConnectionInfo) -> String {
    format!("{settings:?}|{:?}", settings.password().map(fingerprint))
}

/// A keyed hash of `password`, 128 bits so that two passwords never share one by chance. The
/// key is random to the process (std's `RandomState`, from the OS's random source), so the
/// hash of a guessed password cannot be checked against it elsewhere.
fn fingerprint(password: &str) -> [u64; 2] {
    static KEY: LazyLock<RandomState> = LazyLock::new(RandomState::new);
    [KEY.hash_one((0u8, password)), KEY.hash_one((1u8, password))]
}

/// Connections of one kind: the idle ones, and how many are open in all.
#[derive(Default)]
struct Pool {
    idle: Mutex<Vec<Conn>>,
    live: AtomicUsize,
    returned: Condvar,
}

impl Pool {
    fn live(&self) -> usize {
        self.live.load(Ordering::SeqCst)
    }

    fn drop_idle(&self) {
        let dropped = std::mem::take(&mut *self.idle.lock());
        self.live.fetch_sub(dropped.len(), Ordering::SeqCst);
    }

    /// An idle connection the server has not closed. One it closed cannot have run anything
    /// sent on it: a request must not go out there, to be taken for lost. And since a server
    /// closes one idle connection mostly when it closes them all (a restart, a kill of every
    /// client), the others are dropped with it.
    fn take_idle(&self) -> Option<Loan<'_>> {
        let conn = self.idle.lock().pop()?;
        if !conn.usable() {
            self.live.fetch_sub(1, Ordering::SeqCst);
            self.drop_idle();
            return None;
        }
        Some(Loan {
            pool: self,
            conn: Some(conn),
        })
    }

    fn lend_new(&self, conn: Conn) -> Loan<'_> {
        self.live.fetch_add(1, Ordering::SeqCst);
        Loan {
            pool: self,
            conn: Some(conn),
        }
    }

    /// The first connection given back by `deadline` that the server has not closed (as
    /// [`take_idle`](Self::take_idle) checks: a request must not go out on a closed one).
    fn wait_idle(&self, deadline: Instant) -> Option<Loan<'_>> {
        let mut idle = self.idle.lock();
        loop {
            while let Some(conn) = idle.pop() {
                if conn.usable() {
                    return Some(Loan {
                        pool: self,
                        conn: Some(conn),
                    });
                }
                self.live.fetch_sub(1, Ordering::SeqCst);
            }
            if self.returned.wait_until(&mut idle, deadline).timed_out() {
                return None;
            }
        }
    }
}

/// A connection on loan from a [`Pool`]: back to the idle list on drop, unless discarded.
struct Loan<'a> {
    pool: &'a Pool,
    /// `Some` until it is given back or discarded.
    conn: Option<Conn>,
}

impl Loan<'_> {
    fn conn(&mut self) -> Result<&mut Conn, RedisError> {
        self.conn.as_mut().ok_or_else(|| {
            RedisError::from((
                ErrorKind::Client,
                "the connection was closed after a failure",
            ))
        })
    }

    /// Closes the connection: after a failure its next reply could belong to an old request.
    fn discard(&mut self) {
        drop(self.take());
    }

    fn take(&mut self) -> Option<Conn> {
        let conn = self.conn.take()?;
        self.pool.live.fetch_sub(1, Ordering::SeqCst);
        Some(conn)
    }
}

impl Drop for Loan<'_> {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else { return };
        let mut idle = self.pool.idle.lock();
        if idle.len() < MAX_IDLE {
            idle.push(conn);
            drop(idle);
            self.pool.returned.notify_one();
        } else {
            self.pool.live.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::identity;

    fn key(url: &str) -> String {
        identity(redis::Client::open(url).unwrap().get_connection_info())
    }

    #[test]
    fn the_key_does_not_carry_the_password() {
        let key = key("redis://locker:s3cret-pw@127.0.0.1:6379/2");
        assert!(!key.contains("s3cret-pw"), "{key}");
        assert!(key.contains("locker") && key.contains("6379"), "{key}");
    }

    #[test]
    fn logins_with_other_passwords_have_other_keys() {
        let one = key("redis://locker:first@127.0.0.1:6379/");
        assert_ne!(one, key("redis://locker:second@127.0.0.1:6379/"));
        assert_ne!(one, key("redis://127.0.0.1:6379/"));
        assert_eq!(one, key("redis://locker:first@127.0.0.1:6379/"));
    }
}
