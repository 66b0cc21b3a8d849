//! Redlock: one lock over N independent servers, held where a majority hold it. Each request
//! goes to every server at once (sent to all, then the replies read), each server bounded by
//! a short timeout of its own, and the answers are added up by the protocol core's
//! [`quorum`](crate::protocol::quorum) votes. A wait blocks in `BLPOP` on one server and then
//! tries on all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ErrorKind, RedisError, Value};

use super::server::Server;
use super::{Admin, ConnId, Fault, Primaries, Primary, Transport, Waiter};
use crate::config::settings::Settings;
use crate::protocol::keys::Keys;
use crate::protocol::lock;
use crate::protocol::quorum::{self, ExtendVote, TryVote};
use crate::protocol::request::{Kind, Request};
use crate::Error;

/// The longest a split vote's contenders wait before trying again (at random, from 1 ms).
const JITTER_MAX_MS: u64 = 10;
/// How long a reply that has arrived may still be read once its server's time is up.
const READ_GRACE: Duration = Duration::from_millis(1);

pub(crate) struct Quorum {
    servers: Vec<&'static Arc<Server>>,
    /// How long one server may take to answer, from when the request went to it.
    server_timeout: Duration,
}

/// What each server said: its replies, or why there are none.
type Answers = Vec<Result<Vec<Value>, Fault>>;

impl Quorum {
    pub(crate) fn new(servers: Vec<&'static Arc<Server>>, server_timeout: Duration) -> Quorum {
        Quorum {
            servers,
            server_timeout,
        }
    }

    /// Sends `request` to the servers `to` picks, all before reading any reply, so that the
    /// servers work at once. Each server has the server timeout from when its request went
    /// out (and no more than `deadline`): one frozen server costs its own time, never the
    /// others' replies, which are read even after their time if they have arrived.
    fn fan_out(&self, request: &Request, deadline: Instant, to: impl Fn(usize) -> bool) -> Answers {
        let not_asked = || Fault::NotSent(RedisError::from((ErrorKind::Client, "not asked")));
        let in_flight: Vec<_> = (self.servers.iter().enumerate())
            .map(|(i, server)| {
                if !to(i) {
                    return Err(not_asked());
                }
                let own = deadline.min(Instant::now() + self.server_timeout);
                server.begin(request, own).map(|flight| (flight, own))
            })
            .collect();
        (in_flight.into_iter().zip(&self.servers))
            .map(|(in_flight, server)| {
                let (flight, own) = in_flight?;
                let mut replies = flight.finish(own.max(Instant::now() + READ_GRACE))?;
                // A server that forgot the script (restarted empty) gets its text.
                if let Some((at, retry)) = request.noscript_retry(&replies) {
                    let retried = server.call(&retry, Instant::now() + self.server_timeout)?;
                    request.patch(&mut replies, at, retried);
                }
                Ok(replies)
            })
            .collect()
    }

    fn all(&self, request: &Request, deadline: Instant) -> Answers {
        self.fan_out(request, deadline, |_| true)
    }

    /// Gives `id`'s key back on the servers `on` picks: first on those that answered the
    /// request before, then on the others, each round with the server timeout of its own, even
    /// past the caller's deadline: a key left behind would block others until its expiry. A
    /// frozen server that is connected to anew costs a round its whole time, so it must not
    /// cost the live ones their give-back.
    fn give_back(
        &self,
        keys: &Keys,
        id: &[u8],
        signal: bool,
        answered: &Answers,
        on: impl Fn(usize) -> bool,
    ) {
        let request = lock::give_back(keys, id, signal);
        let ok = |i: usize| matches!(answered.get(i), Some(Ok(_)));
        let _ = self.fan_out(&request, Instant::now() + self.server_timeout, |i| {
            on(i) && ok(i)
        });
        let _ = self.fan_out(&request, Instant::now() + self.server_timeout, |i| {
            on(i) && !ok(i)
        });
    }

    /// Too few servers answered: nothing ran if no reply was lost, else it may have.
    fn unreached(&self, answers: &Answers) -> Fault {
        let answered = answers.iter().filter(|a| a.is_ok()).count();
        let error = RedisError::from((
            ErrorKind::Io,
            "too few servers of the quorum answered",
            format!(
                "{answered} of {}, {} needed",
                self.servers.len(),
                quorum::majority(self.servers.len())
            ),
        ));
        if answers.iter().any(|a| matches!(a, Err(Fault::Lost { .. }))) {
            Fault::Lost { conn: None, error }
        } else {
            Fault::NotSent(error)
        }
    }

    /// The try's vote; what the try may have taken is given back unless it won.
    fn try_all(
        &self,
        request: &Request,
        deadline: Instant,
        (keys, id, expire_ms): (&Keys, &[u8], Option<u64>),
    ) -> Result<Vec<Value>, Fault> {
        let started = Instant::now();
        let answers = self.all(request, deadline);
        let said = said(&answers);
        let expire = expire_ms.map(Duration::from_millis);
        let vote = quorum::try_vote(keys, id, &said, started.elapsed(), expire, jitter());
        // Where a key of this id may be: the try took it (`SET` answered `OK`), an earlier
        // try left it (the owner named is this id), or the reply was lost. A server that said
        // no, or was never reached, holds nothing of it.
        let may_hold = |i: usize| match answers.get(i) {
            Some(Ok(replies)) => {
                replies.first() == Some(&Value::Okay)
                    || matches!(replies.get(1), Some(Value::BulkString(owner)) if owner == id)
            }
            Some(Err(Fault::Lost { .. })) => true,
            _ => false,
        };
        match vote {
            TryVote::Won(replies) => Ok(replies),
            TryVote::Lost { reply, give_back } => {
                if give_back {
                    // Keys that were a majority (won too late) wake a waiter as they go.
                    let majority = (0..self.servers.len()).filter(|&i| may_hold(i)).count()
                        >= quorum::majority(self.servers.len());
                    self.give_back(keys, id, majority, &answers, may_hold);
                }
                Ok(reply)
            }
            TryVote::Unreached { .. } => {
                self.give_back(keys, id, false, &answers, may_hold);
                Err(self.unreached(&answers))
            }
        }
    }

    /// The extend's vote: held if its key is still its own on a majority, in time; then the
    /// key is taken again where it went missing (a server that restarted empty). Lost, what
    /// is left is given back.
    fn extend_all(
        &self,
        request: &Request,
        deadline: Instant,
        (keys, id, ms): (&Keys, &[u8], u64),
    ) -> Result<Vec<Value>, Fault> {
        let started = Instant::now();
        let answers = self.all(request, deadline);
        match quorum::extend_vote(keys, &said(&answers), started.elapsed(), ms) {
            ExtendVote::Yes => {
                let missing = |i: usize| matches!(answers.get(i), Some(Ok(r)) if r.first() == Some(&Value::Int(1)));
                let _ = self.fan_out(&lock::retake(keys, id, ms), deadline, missing);
                Ok(vec![Value::Int(0)])
            }
            ExtendVote::NotOurs => {
                self.give_back(keys, id, false, &answers, |_| true);
                Ok(vec![Value::Int(1)])
            }
            ExtendVote::NoExpiry => Ok(vec![Value::Int(2)]),
            ExtendVote::Unreached => Err(self.unreached(&answers)),
        }
    }

    /// The unlock's vote. A release also wakes a waiter where the key was not its own: the
    /// waiters block on one server, which may never have had the holder's key (it was down, or
    /// slow, when the lock was taken), and the unlock there pushes no signal.
    fn unlock_all(
        &self,
        request: &Request,
        deadline: Instant,
        keys: &Keys,
    ) -> Result<Vec<Value>, Fault> {
        let answers = self.all(request, deadline);
        let reply =
            quorum::unlock_vote(keys, &said(&answers)).ok_or_else(|| self.unreached(&answers))?;
        if reply == Value::Int(0) {
            let not_ours = |i: usize| matches!(answers.get(i), Some(Ok(r)) if r.first() == Some(&Value::Int(1)));
            let _ = self.fan_out(&lock::pass_on(keys), deadline, not_ours);
        }
        Ok(vec![reply])
    }
}

impl Transport for Quorum {
    #[cfg(feature = "tokio")]
    fn to_async(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn super::aio::AsyncTransport> {
        super::aio::pooled::Pooled::shared(self)
    }

    fn call(&self, request: &Request, deadline: Instant) -> Result<Vec<Value>, Fault> {
        match &request.kind {
            Kind::Try {
                keys,
                id,
                expire_ms,
            } => self.try_all(request, deadline, (keys, id, *expire_ms)),
            Kind::Extend { keys, id, ms } => self.extend_all(request, deadline, (keys, id, *ms)),
            Kind::Read { keys } => {
                let answers = self.all(request, deadline);
                quorum::read_vote(keys, &said(&answers)).ok_or_else(|| self.unreached(&answers))
            }
            Kind::Unlock { keys } => self.unlock_all(request, deadline, keys),
            Kind::Other => {
                let answers = self.all(request, deadline);
                quorum::other_vote(&said(&answers)).ok_or_else(|| self.unreached(&answers))
            }
        }
    }

    fn waiter(&self, _slot: u16, _deadline: Instant) -> Result<Box<dyn Waiter + '_>, Fault> {
        // A process's waiters block on one server: the release's signal there wakes one of
        // them, in Redis's first-come order, as on one server; were they spread, every release
        // would wake one per server, all to try at once. The last server: a release sends its
        // unlock to the servers in order, so when the signal comes there the unlocks are on
        // their way to all the others, and the woken try does not overtake them.
        let first = self.servers.len().saturating_sub(1);
        Ok(Box::new(QuorumWaiter {
            quorum: self,
            node: first,
            conn: None,
        }))
    }

    fn kill(&self, conn: ConnId, deadline: Instant) -> Result<Admin, Fault> {
        match self.servers.get(conn.node) {
            Some(server) => server.kill(conn, deadline),
            None => Ok(Admin::Nothing),
        }
    }

    fn check(&self, settings: &Settings) -> Result<(), Error> {
        if settings.on_queue_engine {
            return Err(Error::Unsupported(format!(
                "{:?} is a semaphore, read-write lock, fair lock or election: their counts and queues \
                 cannot be kept across independent servers (a Quorum); use one primary, \
                 with replicas or Sentinel",
                settings.name
            )));
        }
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
        match settings.expire() {
            None => Err(Error::invalid(
                "a quorum lock needs an expire to be acquired: its validity counts down from it",
            )),
            // No validity would be left once the servers' drift is taken off.
            Some(expire) if quorum::drift(expire) * 2 >= expire => Err(Error::invalid(
                "a quorum lock's expire must be at least twice its drift (1 % + 2 ms): 5 ms",
            )),
            Some(_) => Ok(()),
        }
    }

    fn one_server_decides(&self) -> bool {
        false
    }

    fn drift(&self, expire: Duration) -> Duration {
        quorum::drift(expire)
    }

    /// One round of reads: a call ends by the servers' timeouts, not the I/O timeout.
    fn settle_time(&self, io_timeout: Duration) -> Duration {
        io_timeout.min(self.server_timeout)
    }

    fn primaries(&self, _deadline: Instant) -> Result<Primaries, Error> {
        let own = |server: &&'static Arc<Server>| Primary::Own(Arc::clone(*server) as _);
        Ok(self.servers.iter().map(own).collect())
    }
}

/// The replies of the servers that answered, for the votes.
fn said(answers: &Answers) -> Vec<Option<Vec<Value>>> {
    answers.iter().map(|a| a.as_ref().ok().cloned()).collect()
}

/// The waiting connection of a quorum's hub: blocks on one server, as python-redis-lock's
/// waiters of a lock on several servers would (a release signals on every server). A server
/// that cannot be reached hands the wait to the one before it in the servers' order.
struct QuorumWaiter<'a> {
    quorum: &'a Quorum,
    /// The server it blocks on.
    node: usize,
    conn: Option<Box<dyn Waiter + 'static>>,
}

impl QuorumWaiter<'_> {
    /// The connection failed: the next wait starts at the server before it in the order a
    /// release sends its unlocks (see `Quorum::waiter`): the last one that may be live, so
    /// that a signal there still comes after the unlocks to the others are on their way.
    /// Moved to the first server, a woken waiter's try could overtake the rest of the
    /// release, find the holder on a majority, and sleep until its next try.
    fn failed(&mut self, fault: Fault) -> Fault {
        self.conn = None;
        let node = self.node;
        let n = self.quorum.servers.len().max(1);
        self.node = (node + n - 1) % n;
        match fault {
            Fault::Lost { conn, error } => Fault::Lost {
                conn: conn.map(|c| ConnId { node, ..c }),
                error,
            },
            not_sent => not_sent,
        }
    }
}

impl Waiter for QuorumWaiter<'_> {
    fn id(&self) -> Option<ConnId> {
        let conn = self.conn.as_ref()?.id()?;
        Some(ConnId {
            node: self.node,
            ..conn
        })
    }

    fn ready(&mut self, deadline: Instant) -> Result<(), Fault> {
        let n = self.quorum.servers.len();
        let mut last = None;
        for step in 0..n {
            if self.conn.is_some() {
                return Ok(());
            }
            // Backwards from the last server, as `failed` moves.
            let node = (self.node + n - step) % n;
            // A server that is down or frozen costs its own timeout, then the next is asked.
            let own = deadline.min(Instant::now() + self.quorum.server_timeout);
            match self.quorum.servers[node].waiter(0, own) {
                Ok(conn) => {
                    self.node = node;
                    self.conn = Some(conn);
                }
                Err(fault) => last = Some(fault),
            }
        }
        match (&self.conn, last) {
            (Some(_), _) => Ok(()),
            (None, Some(fault)) => Err(fault),
            (None, None) => Err(no_server()),
        }
    }

    fn send(&mut self, request: &Request, deadline: Instant) -> Result<(), Fault> {
        self.ready(deadline)?;
        let Some(conn) = self.conn.as_mut() else {
            return Err(no_server());
        };
        conn.send(request, deadline)
            .map_err(|fault| self.failed(fault))
    }

    fn recv(&mut self, deadline: Instant) -> Result<Value, Fault> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(Fault::Lost {
                conn: None,
                error: RedisError::from((ErrorKind::Io, "the waiting server failed")),
            });
        };
        conn.recv(deadline).map_err(|fault| self.failed(fault))
    }

    fn close(self: Box<Self>) {
        if let Some(conn) = self.conn {
            conn.close();
        }
    }
}

fn no_server() -> Fault {
    Fault::NotSent(RedisError::from((
        ErrorKind::Io,
        "no server of the quorum to wait on",
    )))
}

/// A random wait of 1 to [`JITTER_MAX_MS`] ms, for a split vote.
fn jitter() -> Duration {
    let mut byte = [0u8; 1];
    let random = getrandom::fill(&mut byte).map_or(0, |()| u64::from(byte[0]));
    Duration::from_millis(1 + random % JITTER_MAX_MS)
}
