//! Redlock: one lock over N independent servers, held where a majority hold it. Each request
//! goes to every server at once (sent to all, then the replies read), each server bounded by
//! a short timeout of its own, and the answers are added up by the protocol core's
//! [`quorum`](crate::protocol::quorum) votes. A wait blocks in `BLPOP` on one server and then
//! tries on all.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError, Value};

use super::server::Server;
use super::{Admin, ConnId, Fault, Transport, Visit, Waiter};
use crate::protocol::quorum::{self, TryVote};
use crate::protocol::requests::{Kind, Request};
use crate::settings::Settings;
use crate::Error;

/// The longest a split vote's contenders wait before trying again (at random, from 1 ms).
const JITTER_MAX_MS: u64 = 10;

pub(crate) struct Quorum {
    servers: Vec<&'static Server>,
    /// How long one server may take to answer, from when the request went to all.
    server_timeout: Duration,
}

impl Quorum {
    pub(crate) fn new(servers: Vec<&'static Server>, server_timeout: Duration) -> Quorum {
        Quorum {
            servers,
            server_timeout,
        }
    }

    /// Sends `request` to the servers `to` picks, all at once, and reads their replies, each
    /// by `deadline` or the server timeout, whichever comes first.
    fn fan_out(
        &self,
        request: &Request,
        deadline: Instant,
        to: impl Fn(usize) -> bool,
    ) -> Vec<Option<Vec<Value>>> {
        let each = deadline.min(Instant::now() + self.server_timeout);
        let in_flight: Vec<_> = (self.servers.iter().enumerate())
            .map(|(i, server)| to(i).then(|| server.begin(request, each).ok()).flatten())
            .collect();
        (in_flight.into_iter().zip(&self.servers))
            .map(|(in_flight, server)| {
                let mut replies = in_flight?.finish(each).ok()?;
                // A server that forgot the script (restarted empty) gets its text.
                if let Some((at, retry)) = request.noscript_retry(&replies, 0) {
                    let retried = server.call(&retry, each).ok()?;
                    request.patch(&mut replies, at, retried);
                }
                Some(replies)
            })
            .collect()
    }

    fn all(&self, request: &Request, deadline: Instant) -> Vec<Option<Vec<Value>>> {
        self.fan_out(request, deadline, |_| true)
    }

    /// Gives back what a failed try or extend may have taken: on the servers `on` picks,
    /// those that took it and those whose reply was lost (owner-checked, so harmless where
    /// it holds nothing).
    fn give_back(&self, undo: &Request, on: impl Fn(usize) -> bool) {
        let _ = self.fan_out(undo, Instant::now() + self.server_timeout, on);
    }

    fn unreached(&self, answered: usize) -> Fault {
        Fault::NotSent(RedisError::from((
            ErrorKind::Io,
            "too few servers of the quorum answered",
            format!(
                "{answered} of {}, {} needed",
                self.servers.len(),
                quorum::majority(self.servers.len())
            ),
        )))
    }

    /// The try's vote; what was taken is given back unless it won.
    fn try_all(
        &self,
        request: &Request,
        deadline: Instant,
        keys: &crate::protocol::keys::Keys,
        id: &[u8],
        expire_ms: Option<u64>,
        undo: &Request,
    ) -> Result<Vec<Value>, Fault> {
        let started = Instant::now();
        let said = self.all(request, deadline);
        // Where the try may hold something: it said so (`SET` answered `OK`), or it did not
        // answer. A server that said no gets nothing, and so no wake-up signal either.
        let may_hold = |i: usize| match said.get(i) {
            Some(Some(replies)) => replies.first() == Some(&Value::Okay),
            _ => true,
        };
        let expire = expire_ms.map(Duration::from_millis);
        let vote = match quorum::try_vote(keys, id, &said, started.elapsed(), expire, jitter()) {
            Ok(vote) => vote,
            // A server's reply that is not a try's answer (a corrupt key): give back what
            // may have been taken, and let the driver read that reply for its error.
            Err(_) => {
                self.give_back(undo, may_hold);
                return Ok(first_answer(&said));
            }
        };
        match vote {
            TryVote::Won(replies) => Ok(replies),
            TryVote::Lost { reply, give_back } => {
                if give_back {
                    self.give_back(undo, may_hold);
                }
                Ok(reply)
            }
            TryVote::Unreached { answered } => {
                self.give_back(undo, may_hold);
                Err(self.unreached(answered))
            }
        }
    }

    /// The extend's vote: extended where ours, retaken where missing (a server that restarted
    /// empty); given back everywhere when that is not a majority in time.
    fn extend_all(
        &self,
        request: &Request,
        deadline: Instant,
        keys: &crate::protocol::keys::Keys,
        ms: u64,
        retake: &Request,
        undo: &Request,
    ) -> Result<Vec<Value>, Fault> {
        let started = Instant::now();
        let extended = self.all(request, deadline);
        let not_ours = |i: usize| matches!(extended.get(i), Some(Some(r)) if r.first() == Some(&Value::Int(1)));
        let retaken = if (0..self.servers.len()).any(not_ours) {
            self.fan_out(retake, deadline, not_ours)
        } else {
            vec![None; self.servers.len()]
        };
        if extended.iter().flatten().next().is_none() {
            return Err(self.unreached(0));
        }
        match quorum::extend_vote(keys, &extended, &retaken, started.elapsed(), ms) {
            Ok(Value::Int(1)) => {
                self.give_back(undo, |_| true);
                Ok(vec![Value::Int(1)])
            }
            Ok(vote) => Ok(vec![vote]),
            Err(_) => Ok(first_answer(&extended)),
        }
    }
}

impl Transport for Quorum {
    fn call(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault> {
        match &request.kind {
            Kind::Try {
                keys,
                id,
                expire_ms,
                undo,
            } => self.try_all(request, deadline, keys, id, *expire_ms, undo),
            Kind::Extend {
                keys,
                ms,
                retake,
                undo,
            } => self.extend_all(request, deadline, keys, *ms, retake, undo),
            Kind::Read { keys } => {
                let said = self.all(request, deadline);
                match quorum::read_vote(keys, &said) {
                    Ok(Some(replies)) => Ok(replies),
                    Ok(None) => Err(self.unreached(said.iter().flatten().count())),
                    Err(_) => Ok(first_answer(&said)),
                }
            }
            Kind::Unlock { keys } => {
                let said = self.all(request, deadline);
                match quorum::unlock_vote(keys, &said) {
                    Ok(Some(reply)) => Ok(vec![reply]),
                    Ok(None) => Err(self.unreached(0)),
                    Err(_) => Ok(first_answer(&said)),
                }
            }
            Kind::Other => {
                let said = self.all(request, deadline);
                quorum::other_vote(&said)
                    .ok_or_else(|| self.unreached(said.iter().flatten().count()))
            }
        }
    }

    fn waiter(&self, slot: u16, _deadline: Instant) -> Result<Box<dyn Waiter + '_>, Fault> {
        // Every waiter of one lock blocks on the same server (picked by the key's hash slot,
        // so different locks spread over the servers): the release's signal there wakes
        // exactly one of them, in Redis's first-come order, as on one server. Were they
        // spread, every release would wake one waiter per server, all to try at once.
        let first = usize::from(slot) % self.servers.len().max(1);
        Ok(Box::new(QuorumWaiter {
            quorum: self,
            node: first,
            conn: None,
            rest: None,
            replies: VecDeque::new(),
        }))
    }

    fn unblock(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault> {
        match self.servers.get(conn.node) {
            Some(server) => server.unblock(conn, deadline),
            None => Ok(Admin::Nothing),
        }
    }

    fn kill(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault> {
        match self.servers.get(conn.node) {
            Some(server) => server.kill(conn, deadline),
            None => Ok(Admin::Nothing),
        }
    }

    fn check(&self, settings: &Settings) -> Result<(), Error> {
        if settings.fencing {
            return Err(Error::invalid(
                "fencing tokens cannot be made to grow across independent servers: a \
                 quorum lock has none (see the crate docs' Redlock section)",
            ));
        }
        if settings.replicas.is_some() {
            return Err(Error::invalid(
                "replicas() is for a primary with replicas; a quorum's servers stand alone",
            ));
        }
        Ok(())
    }

    fn check_acquire(&self, settings: &Settings) -> Result<(), Error> {
        if settings.expire_ms.is_none() {
            return Err(Error::invalid(
                "a quorum lock needs an expire to be acquired: its validity counts down from it",
            ));
        }
        Ok(())
    }

    fn drift(&self, expire: Duration) -> Duration {
        quorum::drift(expire)
    }

    fn each_primary(&self, _deadline: Instant, visit: &mut Visit<'_>) -> Result<(), Error> {
        for server in &self.servers {
            visit(*server, *server)?;
        }
        Ok(())
    }
}

/// A wait of a quorum lock: `BLPOP` on one server's signal list, then the try on all. A
/// server that cannot be reached hands the wait to the next.
struct QuorumWaiter<'a> {
    quorum: &'a Quorum,
    /// The server it blocks on.
    node: usize,
    conn: Option<Box<dyn Waiter + 'static>>,
    /// The try to run on all once the `BLPOP` has returned.
    rest: Option<Request>,
    /// The try's replies, not yet read.
    replies: VecDeque<Value>,
}

impl Waiter for QuorumWaiter<'_> {
    fn id(&self) -> Option<ConnId> {
        let conn = self.conn.as_ref()?.id()?;
        Some(ConnId {
            node: self.node,
            id: conn.id,
        })
    }

    fn ready(&mut self, deadline: Instant) -> Result<(), Fault> {
        let n = self.quorum.servers.len();
        let mut last = None;
        for step in 0..n {
            if self.conn.is_some() {
                return Ok(());
            }
            let node = (self.node + step) % n;
            match self.quorum.servers[node].waiter(0, deadline) {
                Ok(conn) => {
                    self.node = node;
                    self.conn = Some(conn);
                }
                // That server is not there: the next may take the wait.
                Err(fault) => last = Some(fault),
            }
        }
        match (&self.conn, last) {
            (Some(_), _) => Ok(()),
            (None, Some(fault)) => Err(fault),
            (None, None) => Err(self.quorum.unreached(0)),
        }
    }

    fn send(&mut self, request: &Request, deadline: Instant) -> Result<(), Fault> {
        self.ready(deadline)?;
        let (blpop, rest) = request.split_first();
        let node = self.node;
        let Some(conn) = self.conn.as_mut() else {
            return Err(self.quorum.unreached(0));
        };
        match conn.send(&blpop, deadline) {
            Ok(()) => {
                self.rest = Some(rest);
                self.replies.clear();
                Ok(())
            }
            Err(fault) => {
                self.conn = None;
                // The next wait starts at the next server.
                self.node = (node + 1) % self.quorum.servers.len().max(1);
                Err(match fault {
                    Fault::Lost { conn, error } => Fault::Lost {
                        conn: conn.map(|c| ConnId { node, id: c.id }),
                        error,
                    },
                    not_sent => not_sent,
                })
            }
        }
    }

    fn recv(&mut self, deadline: Instant) -> Result<Value, Fault> {
        if let Some(reply) = self.replies.pop_front() {
            return Ok(reply);
        }
        if let Some(conn) = self
            .conn
            .as_mut()
            .filter(|_| self.rest.is_some() && self.replies.is_empty())
        {
            // The `BLPOP`'s own reply comes first; the try follows, on all servers.
            if let Some(rest) = self.rest.take() {
                let blpop = match conn.recv(deadline) {
                    Ok(reply) => reply,
                    // The wait's server failed (down, or the connection closed). Nothing of
                    // the try went out yet: it goes to all servers now, as after a wait that
                    // timed out, and the next wait blocks on the next server.
                    Err(fault) => {
                        log::debug!("the wait's server failed ({fault:?}); trying on all");
                        self.conn = None;
                        self.node = (self.node + 1) % self.quorum.servers.len().max(1);
                        Value::Nil
                    }
                };
                self.replies = self.quorum.call(&rest, deadline)?.into();
                return Ok(blpop);
            }
        }
        Err(Fault::NotSent(RedisError::from((
            ErrorKind::Client,
            "no reply is due",
        ))))
    }

    fn keep_for_holder(self: Box<Self>) {
        if let Some(conn) = self.conn {
            conn.keep_for_holder();
        }
    }
}

/// The first server's replies, for the driver to read an error from.
fn first_answer(said: &[Option<Vec<Value>>]) -> Vec<Value> {
    said.iter().flatten().next().cloned().unwrap_or_default()
}

/// A random wait of 1 to [`JITTER_MAX_MS`] ms, for a split vote.
fn jitter() -> Duration {
    let mut byte = [0u8; 1];
    let random = getrandom::fill(&mut byte).map_or(0, |()| u64::from(byte[0]));
    Duration::from_millis(1 + random % JITTER_MAX_MS)
}
