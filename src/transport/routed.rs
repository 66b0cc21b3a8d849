//! A transport over several servers of which one serves each key at a time: a cluster's
//! primaries, each serving its slots, or the primary a Sentinel names. What differs between
//! the two is the [`Topology`]; following redirections and riding out a failover is here.
//!
//! A request goes again only when none of it ran: the server was not reached, or it turned
//! the request away (`MOVED`, `ASK`, `CLUSTERDOWN`, `READONLY`, ...: see
//! [`redirect`](crate::protocol::redirect)). A request that may have run comes back as
//! [`Fault::Lost`], for the driver to settle as on one server. So does one answered by a
//! server replaced meanwhile (a Sentinel failover), unless it is repeatable: whether it ran
//! before the new primary took over, and so is there too, is not known.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{ConnectionInfo, ErrorKind, RedisError, Value};

use super::nodes::Nodes;
use super::server::Server;
use super::{Admin, ConnId, Fault, Primaries, Primary, Transport, Waiter};
use crate::protocol::redirect::{self, Redirect};
use crate::protocol::request::{Kind, Request};
use crate::Error;

/// The first pause while the topology changes; it doubles up to [`PAUSE_MAX`].
const PAUSE_FIRST: Duration = Duration::from_millis(5);
const PAUSE_MAX: Duration = Duration::from_millis(200);
/// Redirections followed at once before pausing: nodes that disagree during a migration can
/// send a request back and forth.
const MAX_HOPS: u32 = 5;

/// Which server serves which keys, as last learned.
pub(crate) trait Topology: Send + Sync + 'static {
    /// The address (`host:port`) of the primary serving `slot`.
    fn primary_for(&self, slot: Option<u16>) -> Option<String>;

    /// The addresses of every primary.
    fn primaries(&self) -> Vec<String>;

    /// Makes sure the primary known is the one named now, by `deadline`, before a request
    /// that must not land on a replaced one: a try, a renewal. Nothing to do where a replaced
    /// server turns requests away (a cluster node answers `MOVED`).
    fn confirm(&self, _nodes: &Nodes, _deadline: Instant) -> Result<(), RedisError> {
        Ok(())
    }

    /// Whether the server at `addr` was replaced as `slot`'s while it still answers as if it
    /// served it (a Sentinel's old primary stays a primary for seconds after a failover):
    /// what it ran counts for nothing.
    fn replaced(&self, _slot: Option<u16>, _addr: &str) -> bool {
        false
    }

    /// When this process last learned that a new primary serves `slot` in place of the one
    /// it knew (`None`: never): see [`Transport::switched_at`].
    fn switched_at(&self, _slot: Option<u16>) -> Option<Instant> {
        None
    }

    /// Learns the topology again, by `deadline`.
    fn learn(&self, nodes: &Nodes, deadline: Instant) -> Result<(), RedisError>;

    /// A `MOVED` said that `slot` lives at `addr` now.
    fn moved(&self, slot: u16, addr: &str);

    /// Whether a lock's keys must share a hash slot.
    fn hash_tags(&self) -> bool;
}

pub(crate) struct Routed<T> {
    topology: T,
    nodes: Nodes,
    /// When the topology was last learned: a failure from before then needs no new look.
    learned: Mutex<Option<Instant>>,
    /// Told each time the topology has been learned anew.
    relearned: Condvar,
    /// The connections blocked in waits now, to move off a server that was replaced.
    waiting: Mutex<Vec<ConnId>>,
}

/// How one attempt on one server came out.
enum Outcome<R> {
    Done(R),
    /// Turned away, having run nothing.
    Redirected(Redirect, RedisError),
    /// The server is not there (down, or not yet replaced).
    Away(RedisError),
    /// The server was replaced while the repeatable request was under way: it goes to the
    /// new one.
    Replaced,
    Failed(Fault),
}

impl<T: Topology> Routed<T> {
    /// Servers reached with `template`'s credentials and TLS, at the addresses `topology`
    /// names.
    pub(crate) fn new(topology: T, template: ConnectionInfo) -> Self {
        Routed {
            topology,
            nodes: Nodes::new(template),
            learned: Mutex::new(None),
            relearned: Condvar::new(),
            waiting: Mutex::new(Vec::new()),
        }
    }

    /// The Sentinel backend's listeners read and switch their topology.
    #[cfg(feature = "sentinel")]
    pub(crate) fn topology(&self) -> &T {
        &self.topology
    }

    /// Whether server number `node` was replaced as `slot`'s.
    fn is_replaced(&self, slot: Option<u16>, node: usize) -> bool {
        (self.nodes.addr(node)).is_some_and(|addr| self.topology.replaced(slot, &addr))
    }

    /// Closes the waits' connections to servers that were replaced, so that they wait on the
    /// new ones: the replaced server would never see the release that wakes them.
    #[cfg(feature = "sentinel")]
    pub(crate) fn replaced_now(&self, deadline: Instant) {
        let waiting = self.waiting.lock().clone();
        for conn in waiting {
            if self.is_replaced(None, conn.node) {
                // Failing, the wait learns of the new server at its next reply anyway.
                let _ = self.kill(conn, deadline);
            }
        }
    }

    /// Learns the topology again, unless someone did since `failed_at`. One at a time: the
    /// threads that met the same failure wait for one look instead of each taking their own.
    pub(crate) fn relearn(&self, failed_at: Instant, deadline: Instant) -> Result<(), RedisError> {
        // Waiting for another thread's look ends by this call's deadline too.
        let Some(mut learned) = self.learned.try_lock_until(deadline) else {
            return Err(RedisError::from((
                ErrorKind::Io,
                "the topology is being learned by another call",
            )));
        };
        if learned.is_some_and(|at| at > failed_at) {
            return Ok(());
        }
        let result = self.topology.learn(&self.nodes, deadline);
        match &result {
            Ok(()) => {
                *learned = Some(Instant::now());
                self.relearned.notify_all();
            }
            Err(e) => log::debug!("could not learn the topology: {e}"),
        }
        result
    }

    /// Waits, at most `pause`, for the topology to be learned anew after `since` (by another
    /// call that met the same failure): the backoff of a request whose servers are changing,
    /// never a way of waiting for a lock.
    fn until_relearned(&self, since: Instant, pause: Duration) {
        let until = Instant::now() + pause;
        // A look under way holds the lock: its end is what this waits for anyway.
        let Some(mut learned) = self.learned.try_lock_until(until) else {
            return;
        };
        while !learned.is_some_and(|at| at > since) {
            if self.relearned.wait_until(&mut learned, until).timed_out() {
                return;
            }
        }
    }

    fn node_for(
        &self,
        slot: Option<u16>,
        deadline: Instant,
    ) -> Result<(usize, &'static Arc<Server>), RedisError> {
        let addr = match self.topology.primary_for(slot) {
            Some(addr) => addr,
            None => {
                self.relearn(Instant::now(), deadline)?;
                self.topology.primary_for(slot).ok_or_else(|| {
                    RedisError::from((
                        ErrorKind::Io,
                        "no primary known for the key: the topology could not be learned",
                    ))
                })?
            }
        };
        self.nodes.at(&addr)
    }

    /// Runs `attempt` on the server that serves `slot` (`asking` when an `ASK` sent it
    /// there), following redirections and riding out a topology that is changing, by
    /// `deadline`.
    fn through<R>(
        &self,
        slot: Option<u16>,
        mut ask: Option<String>,
        deadline: Instant,
        mut attempt: impl FnMut(usize, &'static Arc<Server>, bool) -> Outcome<R>,
    ) -> Result<R, Fault> {
        let mut hops = 0;
        let mut pause = PAUSE_FIRST;
        loop {
            let started = Instant::now();
            let target = match ask.take() {
                Some(addr) => self.nodes.at(&addr).map(|(node, s)| (node, s, true)),
                None => self
                    .node_for(slot, deadline)
                    .map(|(node, s)| (node, s, false)),
            };
            let error = match target {
                Err(e) => e,
                Ok((node, server, asking)) => match attempt(node, server, asking) {
                    Outcome::Done(result) => return Ok(result),
                    Outcome::Failed(fault) => return Err(fault),
                    Outcome::Redirected(Redirect::Moved { slot, addr }, _) if hops < MAX_HOPS => {
                        hops += 1;
                        self.topology.moved(slot, &addr);
                        continue;
                    }
                    Outcome::Redirected(Redirect::Ask { addr }, _) if hops < MAX_HOPS => {
                        hops += 1;
                        ask = Some(addr);
                        continue;
                    }
                    Outcome::Replaced if hops < MAX_HOPS => {
                        hops += 1;
                        continue;
                    }
                    Outcome::Replaced => {
                        RedisError::from((ErrorKind::Io, "the primary keeps being replaced"))
                    }
                    Outcome::Redirected(_, e) | Outcome::Away(e) => e,
                },
            };
            if Instant::now() + pause >= deadline {
                return Err(Fault::NotSent(error));
            }
            log::debug!("the topology is changing ({error}); looking again");
            self.until_relearned(started, pause);
            pause = (pause * 2).min(PAUSE_MAX);
            hops = 0;
            // Failing, the next attempt says why.
            let _ = self.relearn(started, deadline);
        }
    }
}

impl<T: Topology> Transport for Routed<T> {
    #[cfg(feature = "tokio")]
    fn to_async(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn super::aio::AsyncTransport> {
        super::aio::pooled::Pooled::shared(self)
    }

    fn call(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault> {
        if matches!(request.kind, Kind::Try { .. } | Kind::Extend { .. }) {
            self.topology
                .confirm(&self.nodes, deadline)
                .map_err(Fault::NotSent)?;
        }
        self.through(request.slot, None, deadline, |node, server, asking| {
            let sent = if asking {
                server
                    .call(&request.asking(), deadline)
                    .map(|replies| request.without_asking(replies))
            } else {
                server.call(request, deadline)
            };
            match sent {
                Ok(_) if self.is_replaced(request.slot, node) => {
                    if request.repeatable {
                        Outcome::Replaced
                    } else {
                        let error = replaced();
                        Outcome::Failed(Fault::Lost { conn: None, error })
                    }
                }
                Ok(replies) => match redirect::ran_nothing(&replies) {
                    None => Outcome::Done(replies),
                    Some(to) => Outcome::Redirected(to, first_error(&replies)),
                },
                Err(Fault::NotSent(e)) if is_away(&e) => Outcome::Away(e),
                Err(fault) => Outcome::Failed(numbered(fault, node)),
            }
        })
    }

    fn waiter(&self, slot: u16, _deadline: Instant) -> Result<Box<dyn Waiter + '_>, Fault> {
        // The connection is taken at the first send, where the slot's server is looked up.
        Ok(Box::new(RoutedWaiter {
            routed: self,
            slot,
            conn: None,
            ask: None,
            asking: false,
            skip_asking: false,
            moved: None,
        }))
    }

    fn kill(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault> {
        match self.nodes.get(conn.node) {
            Some(server) => server.kill(conn, deadline),
            None => Ok(Admin::Nothing),
        }
    }

    fn hash_tags(&self) -> bool {
        self.topology.hash_tags()
    }

    fn switched_at(&self, slot: u16) -> Option<Instant> {
        // Replaced by another, or restarted in its place.
        let primary = (self.topology.primary_for(Some(slot))).and_then(|a| self.nodes.at(&a).ok());
        let restarted = primary.and_then(|(_, server)| server.switched_at(slot));
        self.topology.switched_at(Some(slot)).max(restarted)
    }

    fn server_of(&self, slot: u16) -> usize {
        let primary = (self.topology.primary_for(Some(slot))).and_then(|a| self.nodes.at(&a).ok());
        match primary {
            Some((_, server)) => Arc::as_ptr(server).addr(),
            // Not learned yet: the transport stands for its primaries.
            None => (self as *const Self).addr(),
        }
    }

    fn primaries(&self, deadline: Instant) -> Result<Primaries, Error> {
        if self.topology.primaries().is_empty() {
            self.relearn(Instant::now(), deadline)?;
        }
        let routed = |addr: String| {
            let (_, server) = self.nodes.at(&addr)?;
            Ok(Primary::Routed(Arc::clone(server) as _))
        };
        self.topology.primaries().into_iter().map(routed).collect()
    }
}

/// A wait's connection to the server of its slot, moved to the slot's new server after a
/// redirection or a failover.
struct RoutedWaiter<'a, T> {
    routed: &'a Routed<T>,
    slot: u16,
    /// The connection and its server's number: `None` until `ready`, and after the server
    /// turned the wait away.
    conn: Option<(usize, Box<dyn Waiter + 'static>)>,
    /// Where an `ASK` said to send the next request.
    ask: Option<String>,
    /// Whether the next request goes behind an `ASKING` (its connection was made for an
    /// `ASK`).
    asking: bool,
    /// Whether the first reply to read is that `ASKING`'s.
    skip_asking: bool,
    /// Set when a reply turned the request under way away: the next request goes to the
    /// slot's server anew (`true`: after the topology is learned again).
    moved: Option<bool>,
}

impl<T: Topology> Waiter for RoutedWaiter<'_, T> {
    fn id(&self) -> Option<ConnId> {
        self.conn_id()
    }

    fn ready(&mut self, deadline: Instant) -> Result<(), Fault> {
        if let Some(relearn) = self.moved.take() {
            if relearn {
                // Failing, the route below says why.
                let _ = self.routed.relearn(Instant::now(), deadline);
            }
            self.forget_conn();
        }
        if self.on_replaced() {
            self.forget_conn();
        }
        let ask = self.ask.take();
        if ask.is_none() && self.conn.is_some() {
            return Ok(());
        }
        let slot = self.slot;
        let (node, conn, asking) = self.routed.through(
            Some(slot),
            ask,
            deadline,
            |node, server, asking| match server.waiter(slot, deadline) {
                Ok(conn) => Outcome::Done((node, conn, asking)),
                Err(Fault::NotSent(e)) if is_away(&e) => Outcome::Away(e),
                Err(fault) => Outcome::Failed(numbered(fault, node)),
            },
        )?;
        self.conn = Some((node, conn));
        self.asking = asking;
        if let Some(id) = self.id() {
            self.routed.waiting.lock().push(id);
        }
        Ok(())
    }

    fn send(&mut self, request: &Request, deadline: Instant) -> Result<(), Fault> {
        if self.conn.is_none() || self.moved.is_some() || self.ask.is_some() || self.on_replaced() {
            self.ready(deadline)?;
        }
        let Some((node, conn)) = &mut self.conn else {
            return Err(Fault::NotSent(RedisError::from((
                ErrorKind::Client,
                "no connection",
            ))));
        };
        let node = *node;
        // An `ASK` names where the key that was asked for is, the signal list: only the
        // `BLPOP` goes there behind `ASKING`. The try after it gets its own answer (run, or
        // `MOVED` back to where the lock key lives), so it can never take a lock that still
        // lives on the migrating node.
        self.skip_asking = std::mem::take(&mut self.asking);
        let sent = if self.skip_asking {
            conn.send(&request.asking_first(), deadline)
        } else {
            conn.send(request, deadline)
        };
        sent.map_err(|fault| {
            self.forget_conn();
            numbered(fault, node)
        })
    }

    fn recv(&mut self, deadline: Instant) -> Result<Value, Fault> {
        let Some((node, conn)) = &mut self.conn else {
            return Err(Fault::Lost {
                conn: None,
                error: RedisError::from((ErrorKind::Client, "the connection was closed")),
            });
        };
        let node = *node;
        let mut received = || conn.recv(deadline).map_err(|fault| numbered(fault, node));
        let reply = if std::mem::take(&mut self.skip_asking) {
            received().and_then(|_| received())
        } else {
            received()
        };
        // What a replaced server ran counts for nothing: the driver settles it by reading
        // the new one, the connection closed so that the rest of the request never runs.
        let reply = reply.and_then(|reply| self.still_serving(node, reply, deadline));
        // The rest of the request's replies still come on this connection; the next request
        // goes where the reply says.
        match &reply {
            Err(_) => self.forget_conn(),
            Ok(Value::ServerError(e)) => match redirect::of(e) {
                Some(Redirect::Moved { slot, addr }) => {
                    self.routed.topology.moved(slot, &addr);
                    self.moved.get_or_insert(false);
                }
                Some(Redirect::Ask { addr }) => self.ask = Some(addr),
                Some(Redirect::Again) => self.moved = Some(true),
                None => {}
            },
            Ok(_) => {}
        }
        reply
    }

    fn close(mut self: Box<Self>) {
        self.unlist();
        if let Some((_, conn)) = self.conn.take() {
            conn.close();
        }
    }
}

impl<T: Topology> RoutedWaiter<'_, T> {
    /// Whether the connection's server was replaced as the slot's.
    fn on_replaced(&self) -> bool {
        (self.conn.as_ref()).is_some_and(|(node, _)| self.routed.is_replaced(None, *node))
    }

    /// `reply`, from server number `node`, if that server still serves the slot (asking a
    /// sentinel first if none is heard); else the reply is lost.
    fn still_serving(&self, node: usize, reply: Value, deadline: Instant) -> Result<Value, Fault> {
        let conn = self.id();
        let confirmed = self.routed.topology.confirm(&self.routed.nodes, deadline);
        if let Err(error) = confirmed {
            return Err(Fault::Lost { conn, error });
        }
        if self.routed.is_replaced(None, node) {
            return Err(Fault::Lost {
                conn,
                error: replaced(),
            });
        }
        Ok(reply)
    }
}

impl<T> RoutedWaiter<'_, T> {
    fn conn_id(&self) -> Option<ConnId> {
        let (node, conn) = self.conn.as_ref()?;
        conn.id().map(|c| ConnId { node: *node, ..c })
    }

    /// Drops the connection (a new one is taken for the next request).
    fn forget_conn(&mut self) {
        self.unlist();
        self.conn = None;
    }

    fn unlist(&self) {
        if let Some(id) = self.conn_id() {
            self.routed.waiting.lock().retain(|c| *c != id);
        }
    }
}

impl<T> Drop for RoutedWaiter<'_, T> {
    fn drop(&mut self) {
        self.unlist();
    }
}

/// A server's fault with the server's number in its connection id.
fn numbered(fault: Fault, node: usize) -> Fault {
    match fault {
        Fault::Lost { conn, error } => Fault::Lost {
            conn: conn.map(|c| ConnId { node, ..c }),
            error,
        },
        not_sent => not_sent,
    }
}

fn replaced() -> RedisError {
    RedisError::from((ErrorKind::Io, "the primary was replaced"))
}

/// Whether a request that was not sent failed because its server is not there.
fn is_away(e: &RedisError) -> bool {
    e.is_connection_refusal() || e.is_connection_dropped()
}

/// The first error among `replies`, as the reason a redirected request did not run.
fn first_error(replies: &[Value]) -> RedisError {
    replies
        .iter()
        .find_map(|v| match v {
            Value::ServerError(e) => Some(RedisError::from(e.clone())),
            _ => None,
        })
        .unwrap_or_else(|| RedisError::from((ErrorKind::Client, "redirected")))
}
