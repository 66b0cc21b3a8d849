#![allow(dead_code)] // Used by the handles (Semaphore, fair Lock, RwLock): next.
//! The blocking wait of the fair queue engine: a thin loop of I/O around
//! [`Queued`](crate::protocol::queue::Queued), which decides every step.
//!
//! A waiter asks (`queue_acquire.lua`); not granted, it blocks in `BLPOP` on its own signal
//! list, on a connection of its own, until its next event (a holder's expiry, the lapse of the
//! waiter ahead, its own heartbeat) or its deadline, whichever is first; the timer thread ends
//! the `BLPOP` at that instant. A grant pushes its token there, so no wake-up is lost; a `BLPOP`
//! that ends empty asks again, which is also its heartbeat. At the deadline, or on a cancel, it
//! leaves the queue, giving back any grant that came meanwhile. Every request it sends is safe
//! to send twice, so a lost reply is sent again or settled by the next ask, which reads what
//! the id holds.

#[cfg(feature = "tokio")]
pub(crate) mod aio;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::cancel::CancelToken;
use crate::protocol::keys::QueueKeys;
use crate::protocol::queue::{self, Ask, Mode, Queued, Step};
use crate::protocol::redirect;
use crate::protocol::request::Request;
use crate::settings::grace;
use crate::transport::admin::{closed_by_end, Blocked};
use crate::transport::send::{longer, FIRST_PAUSE};
use crate::transport::timer;
use crate::transport::{self, Fault, Transport, Waiter};
use crate::Error;

/// How a wait came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Granted with `token`, held until `valid_until` at the earliest unless extended
    /// (`None`: no expiry). A grant pushed by another's script lasts only until the waiter's
    /// entry would have lapsed: the holder claims it with an extend.
    Granted {
        token: u64,
        valid_until: Option<Instant>,
    },
    /// The deadline passed first; nothing is held, and the waiter left the queue.
    TimedOut,
}

/// One primitive's queue, as a waiter reaches it over transport `T`: a blocking
/// [`Transport`], or an async one ([`aio`]).
pub(crate) struct Line<'a, T: ?Sized = dyn Transport> {
    pub(crate) transport: &'a Arc<T>,
    pub(crate) keys: &'a QueueKeys,
    /// The primitive's name, for errors.
    pub(crate) name: &'a str,
    /// The bound of each request's round trip.
    pub(crate) io_timeout: Duration,
}

impl Line<'_, dyn Transport> {
    /// Waits in line for `ask` until `deadline` (`None`: no limit) or a cancel. While the
    /// server is away (a restart, a failover) it asks again after a backoff, as [`Backoff`]
    /// allows. On any other error, and on a cancel, the waiter leaves the queue first (as far
    /// as the server can be reached), so it holds nothing it does not know about.
    pub(crate) fn wait(
        &self,
        ask: &Ask,
        deadline: Option<Instant>,
        cancel: &CancelToken,
    ) -> Result<Waited, Error> {
        // On a server that does not answer it still ends by the deadline and the grace.
        let mut backoff = Backoff::new(self.io_timeout, deadline);
        let mut queued = Queued::new(ask, deadline);
        let mut conn = None;
        let mut step = Step::Ask;
        loop {
            let by = backoff.by();
            let due = due(step);
            let outcome = match step {
                Step::Ask => self
                    .ask(ask, by)
                    .map(|(sent, asked)| queued.asked(sent, asked, Instant::now())),
                Step::Block { until } => self
                    .pop(&mut conn, ask, until, by, cancel)
                    .map(|token| queued.popped(token, Instant::now())),
                Step::Leave => return self.leave(ask, by).map(|()| Waited::TimedOut),
                Step::Granted { token, valid_until } => {
                    if let Some(conn) = conn {
                        conn.keep_for_holder();
                    }
                    return Ok(Waited::Granted { token, valid_until });
                }
            };
            if cancel.is_cancelled() {
                self.leave_quietly(ask, by, "a cancel");
                return Err(Error::Cancelled {
                    name: self.name.into(),
                });
            }
            step = match backoff.after(outcome, due, self.name) {
                Ok((next, pause)) => {
                    if let Some(pause) = pause {
                        cancel.pause(pause);
                    }
                    next
                }
                Err(e) => {
                    if backoff.reached {
                        self.leave_quietly(ask, backoff.by(), &e.to_string());
                    }
                    return Err(e);
                }
            };
        }
    }

    /// One try that does not queue (`Mode::Try`): granted when nobody waits and the units fit.
    pub(crate) fn try_once(&self, ask: &Ask) -> Result<Waited, Error> {
        let by = By::new(self.io_timeout, None);
        let sent = Instant::now();
        let answered = self.send(&queue::acquire(self.keys, ask, Mode::Try), by)?;
        tried(self.keys, sent, &answered).or_else(|e| {
            self.leave(ask, by)?;
            Err(e)
        })
    }

    /// An acquire (`Mode::Wait`), and when it was first sent: a grant it finds came after.
    fn ask(&self, ask: &Ask, by: By) -> Result<(Instant, queue::Asked), Error> {
        let sent = Instant::now();
        let answered = self.send(&queue::acquire(self.keys, ask, Mode::Wait), by)?;
        Ok((sent, queue::parse_acquire(self.keys, &answered)?))
    }

    fn leave(&self, ask: &Ask, by: By) -> Result<(), Error> {
        let reply = self.send(&queue::leave(self.keys, ask), by)?;
        queue::parse_held(self.keys, &reply).map(drop)
    }

    /// Leaves after `why`, as far as the server can be reached: an entry left behind lapses
    /// by itself, but a grant to it would be held until its lease ends.
    fn leave_quietly(&self, ask: &Ask, by: By, why: &str) {
        if let Err(e) = self.leave(ask, by) {
            log::warn!("{:?}: leaving the queue after {why}: {e}", self.name);
        }
    }

    /// Sends a script call, once more if its reply was lost (each is safe to run twice).
    fn send(&self, request: &Request, by: By) -> Result<Value, Error> {
        let mut answered = transport::send_repeatable(&**self.transport, request, by.now())?;
        Ok(answered.replies.swap_remove(0))
    }

    /// Blocks in `BLPOP` on the waiter's list until `until`: the token of a grant, or none.
    /// A connection that failed is dropped, and the next ask settles what happened (a token
    /// popped and lost is a grant that ask finds).
    fn pop<'t>(
        &'t self,
        conn: &mut Option<Box<dyn Waiter + 't>>,
        ask: &Ask,
        until: Instant,
        by: By,
        cancel: &CancelToken,
    ) -> Result<Option<u64>, Error> {
        let waiter = match conn {
            Some(waiter) => waiter,
            None => {
                let waiter = self.transport.waiter(self.keys.slot, by.now());
                conn.insert(waiter.map_err(Fault::into_error)?)
            }
        };
        let popped = self.blpop(waiter.as_mut(), ask, until, by, cancel);
        if popped.is_err() {
            *conn = None;
        }
        match popped {
            Ok(reply) => token(&reply),
            Err(PopFault::Cancelled) => Ok(None),
            // As a timed-out pop, which the next ask settles (a token popped and lost is a
            // grant that ask finds).
            Err(PopFault::Ended) => Ok(None),
            Err(PopFault::Io(e)) => Err(e.into()),
        }
    }

    fn blpop(
        &self,
        waiter: &mut dyn Waiter,
        ask: &Ask,
        until: Instant,
        by: By,
        cancel: &CancelToken,
    ) -> Result<Value, PopFault> {
        waiter.ready(by.now())?;
        let registration = match waiter.id() {
            Some(id) => Some(
                cancel
                    .blocking(Arc::new(Blocked {
                        transport: Arc::clone(self.transport),
                        conn: id,
                    }))
                    .ok_or(PopFault::Cancelled)?,
            ),
            None => None,
        };
        let request = pop_request(self.keys, ask, until);
        waiter.send(&request, by.now())?;
        let id = waiter.id();
        let alarm = id.map(|id| timer::set(until, self.transport, id));
        let reply = waiter.recv(by.after(until));
        drop(alarm);
        drop(registration);
        match reply {
            Err(Fault::Lost { error, .. })
                if Instant::now() >= until && closed_by_end(id, &error) =>
            {
                Err(PopFault::Ended)
            }
            reply => Ok(reply?),
        }
    }
}

/// By when each round trip of a wait must end: its I/O timeout, and for a wait with a
/// deadline, no later than the deadline and the grace.
#[derive(Clone, Copy)]
pub(super) struct By {
    io_timeout: Duration,
    give_up: Option<Instant>,
}

impl By {
    pub(super) fn new(io_timeout: Duration, deadline: Option<Instant>) -> By {
        By {
            io_timeout,
            give_up: deadline.map(|d| d + grace(io_timeout)),
        }
    }

    /// For a round trip started now.
    pub(super) fn now(self) -> Instant {
        self.after(Instant::now())
    }

    /// For a round trip whose reply is due at `due`.
    pub(super) fn after(self, due: Instant) -> Instant {
        let io = due + self.io_timeout;
        self.give_up.map_or(io, |give_up| io.min(give_up))
    }
}

/// What a try (`Mode::Try`) sent at `sent` came to, from its reply `answered`. A try never
/// queues: one that did (against the protocol) is an error, and must not stay in line.
fn tried(keys: &QueueKeys, sent: Instant, answered: &Value) -> Result<Waited, Error> {
    match queue::parse_acquire(keys, answered)? {
        queue::Asked::Granted { token, lease_left } => Ok(Waited::Granted {
            token,
            valid_until: lease_left.map(|left| sent + left),
        }),
        queue::Asked::Refused => Ok(Waited::TimedOut),
        queue::Asked::Waiting { .. } => Err(Error::unexpected(answered)),
    }
}

/// A `BLPOP` on `ask`'s signal list until `until`.
fn pop_request(keys: &QueueKeys, ask: &Ask, until: Instant) -> Request {
    let ms = until
        .saturating_duration_since(Instant::now())
        .as_millis()
        .max(1);
    let mut blpop = redis::cmd("BLPOP");
    blpop
        .arg(keys.signal(ask.id()))
        .arg(format!("{}.{:03}", ms / 1000, ms % 1000));
    Request::single(blpop, false).on_slot(keys.slot)
}

/// A waiter's backoff while its server is away (a restart, a failover), and how long it rides
/// that out, as a lock's acquire does: a timed wait until its deadline; an untimed one for the
/// I/O timeout from when the server was found away. A refused connection before the server
/// was ever reached is the wait's error at once: nothing was sent, so nothing is left to undo.
struct Backoff {
    pause: Duration,
    io_timeout: Duration,
    deadline: Option<Instant>,
    /// Since when the server has been away, while it is.
    away_since: Option<Instant>,
    /// Whether any request of the wait may have reached the server.
    reached: bool,
}

impl Backoff {
    fn new(io_timeout: Duration, deadline: Option<Instant>) -> Backoff {
        Backoff {
            pause: FIRST_PAUSE,
            io_timeout,
            deadline,
            away_since: None,
            reached: false,
        }
    }

    /// When the wait stops asking a server that is away.
    fn give_up(&self) -> Option<Instant> {
        self.deadline
            .or_else(|| self.away_since.map(|since| since + self.io_timeout))
    }

    /// By when the next round trip must end: an untimed wait whose server is away ends by its
    /// give-up and the grace, as a timed one does by its deadline and the grace.
    fn by(&self) -> By {
        By::new(self.io_timeout, self.give_up())
    }

    /// The step after `outcome` of a step whose reply was due at `due`, and the pause to take
    /// first, if any: after an error that says the server is away, with time left before the
    /// wait gives up, a pause then an ask. Any other error is the wait's.
    fn after(
        &mut self,
        outcome: Result<Step, Error>,
        due: Instant,
        name: &str,
    ) -> Result<(Step, Option<Duration>), Error> {
        let e = match outcome {
            Ok(next) => {
                self.pause = FIRST_PAUSE;
                self.away_since = None;
                self.reached = true;
                return Ok((next, None));
            }
            Err(e) => e,
        };
        let refused = matches!(&e, Error::Redis(e) if e.is_connection_refusal());
        self.reached |= !refused;
        if !away(&e) || !self.reached {
            return Err(e);
        }
        let now = Instant::now();
        self.away_since.get_or_insert(due.min(now));
        if self.give_up().is_some_and(|end| now + self.pause >= end) {
            return Err(e);
        }
        log::debug!("{name:?}: server away ({e}); asking again");
        let pause = self.pause;
        self.pause = longer(pause);
        Ok((Step::Ask, Some(pause)))
    }
}

/// When the reply to `step` is due: a `BLPOP`'s at its end, an ask's at once.
fn due(step: Step) -> Instant {
    match step {
        Step::Block { until } => until,
        _ => Instant::now(),
    }
}

/// Whether `e` says the server cannot be reached now, rather than refusing the request.
fn away(e: &Error) -> bool {
    matches!(e, Error::Redis(e) if e.is_io_error() || e.is_connection_refusal())
}

/// Why a `BLPOP` did not answer.
enum PopFault {
    Cancelled,
    /// Its connection was closed at its end, where `CLIENT UNBLOCK` is not safe.
    Ended,
    Io(redis::RedisError),
}

impl From<Fault> for PopFault {
    fn from(fault: Fault) -> Self {
        PopFault::Io(fault.into_error())
    }
}

/// The token in a `BLPOP` reply; none when it timed out, was ended, was woken by `reset_all`,
/// or was turned away by a cluster (the slot moved, the primary is changing): the ask that
/// follows goes where the queue lives now, and the waiter's connection follows it.
fn token(reply: &Value) -> Result<Option<u64>, Error> {
    let token = match reply {
        Value::Nil => return Ok(None),
        Value::ServerError(e) if redirect::of(e).is_some() => return Ok(None),
        Value::ServerError(e) => return Err(Error::Redis(e.clone().into())),
        Value::Array(pair) => pair.get(1),
        other => return Err(Error::unexpected(other)),
    };
    match token {
        // `reset_all` took the entry away: ask again, and join anew.
        Some(Value::BulkString(text)) if text == queue::WAKE => Ok(None),
        Some(Value::BulkString(text)) => std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .map(Some)
            .ok_or_else(|| Error::unexpected(reply)),
        _ => Err(Error::unexpected(reply)),
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::thread;

    use parking_lot::Mutex;

    use super::*;
    use crate::protocol::keys::Primitive;
    use crate::protocol::queue::{Asked, QueueState};

    /// A private `redis-server` on a free port, killed on drop.
    pub(super) struct Server {
        child: Mutex<Child>,
        port: u16,
        client: redis::Client,
    }

    impl Server {
        fn start() -> Server {
            for _ in 0..20 {
                let port = TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .expect("a free port")
                    .port();
                let server = Server {
                    child: Mutex::new(spawn(port)),
                    port,
                    client: redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap(),
                };
                if server.until_answering() {
                    return server;
                }
            }
            panic!("could not start redis-server");
        }

        fn until_answering(&self) -> bool {
            for _ in 0..100 {
                let ping = (self.client.get_connection())
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
                if ping.is_ok() {
                    return true;
                }
                if self.child.lock().try_wait().unwrap().is_some() {
                    return false;
                }
                thread::sleep(Duration::from_millis(50));
            }
            false
        }

        /// Kills the server and starts an empty one on its port, as a crash and restart.
        pub(super) fn restart(&self) {
            let mut child = self.child.lock();
            let _ = child.kill();
            let _ = child.wait();
            thread::sleep(Duration::from_millis(300));
            *child = spawn(self.port);
            drop(child);
            assert!(self.until_answering(), "redis-server did not restart");
        }
    }

    fn spawn(port: u16) -> Child {
        // `$REDIS_SERVER` names another build to test against, as in the integration tests.
        let binary = std::env::var_os("REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
        Command::new(&binary)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "could not run {binary:?} ({e}); install it with \
                     `sudo apt-get install -y redis-server`"
                )
            })
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let child = self.child.get_mut();
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(super) struct Fixture {
        pub(super) server: Server,
        pub(super) transport: Arc<dyn Transport>,
        pub(super) keys: QueueKeys,
    }

    impl Fixture {
        pub(super) fn new() -> Fixture {
            let server = Server::start();
            let transport = crate::backend::transport_of(&server.client).unwrap();
            let keys = QueueKeys::new(Primitive::Semaphore, "db");
            Fixture {
                server,
                transport,
                keys,
            }
        }

        pub(super) fn line(&self) -> Line<'_> {
            Line {
                transport: &self.transport,
                keys: &self.keys,
                name: "db",
                io_timeout: Duration::from_secs(5),
            }
        }

        /// A holder of all of a capacity of 1, until released.
        pub(super) fn hold(&self, id: &str) -> Ask {
            let ask = Ask::new(id, 1, 1, None, Duration::from_secs(2)).unwrap();
            let reply = self.line().send(
                &queue::acquire(&self.keys, &ask, Mode::Try),
                super::By::new(Duration::from_secs(5), None),
            );
            let asked = queue::parse_acquire(&self.keys, &reply.unwrap()).unwrap();
            assert!(matches!(asked, Asked::Granted { .. }), "{asked:?}");
            ask
        }

        pub(super) fn state(&self) -> QueueState {
            let reply = self
                .line()
                .send(
                    &queue::state(&self.keys),
                    super::By::new(Duration::from_secs(5), None),
                )
                .unwrap();
            queue::parse_state(&self.keys, &reply).unwrap()
        }

        /// Until `n` waiters are in the queue (a test's own check, not a way of waiting).
        pub(super) fn until_waiters(&self, n: usize) {
            let start = Instant::now();
            while self.state().waiters.len() != n {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "{:?}",
                    self.state()
                );
                thread::sleep(Duration::from_millis(10));
            }
        }

        pub(super) fn keys_left(&self) -> Vec<String> {
            let mut conn = self.server.client.get_connection().unwrap();
            let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
            keys.sort();
            keys
        }
    }

    pub(super) fn waiter() -> Ask {
        Ask::new("w", 1, 1, None, Duration::from_secs(2)).unwrap()
    }

    #[test]
    fn a_pop_reply_is_a_token_or_nothing() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(token(&Value::Nil).unwrap(), None);
        let popped = Value::Array(vec![bulk("semaphore:{db}:signal:w"), bulk("7")]);
        assert_eq!(token(&popped).unwrap(), Some(7));
        for garbage in [
            Value::Array(vec![bulk("k"), bulk("x")]),
            Value::Array(vec![bulk("k")]),
            Value::Int(7),
        ] {
            assert!(matches!(token(&garbage), Err(Error::UnexpectedReply(_))));
        }
    }

    fn io_error(kind: std::io::ErrorKind) -> Result<Step, Error> {
        Err(Error::Redis(std::io::Error::from(kind).into()))
    }

    #[test]
    fn an_untimed_wait_rides_out_a_server_away_for_the_io_timeout_then_fails() {
        let mut backoff = Backoff::new(Duration::from_millis(100), None);
        assert!(backoff.after(Ok(Step::Ask), Instant::now(), "n").is_ok());
        // Away for an I/O timeout since the reply was due: given up.
        let long_ago = Instant::now() - Duration::from_millis(100);
        let timed_out = io_error(std::io::ErrorKind::TimedOut);
        assert!(backoff.after(timed_out, long_ago, "n").is_err());
        // Found away just now: asked again after a pause, refusals too.
        let mut backoff = Backoff::new(Duration::from_secs(5), None);
        assert!(backoff.after(Ok(Step::Ask), Instant::now(), "n").is_ok());
        let refused = io_error(std::io::ErrorKind::ConnectionRefused);
        let (next, pause) = backoff.after(refused, Instant::now(), "n").unwrap();
        assert_eq!((next, pause), (Step::Ask, Some(FIRST_PAUSE)));
        // Each round trip meanwhile ends by the give-up and the grace, however long it blocks.
        let far = Instant::now() + Duration::from_secs(60);
        assert!(backoff.by().after(far) <= Instant::now() + Duration::from_millis(5250));
    }

    #[test]
    fn a_refused_first_ask_fails_at_once_with_nothing_to_leave() {
        for deadline in [None, Some(Instant::now() + Duration::from_secs(60))] {
            let mut backoff = Backoff::new(Duration::from_secs(5), deadline);
            let refused = io_error(std::io::ErrorKind::ConnectionRefused);
            assert!(backoff.after(refused, Instant::now(), "n").is_err());
            assert!(!backoff.reached);
        }
    }

    #[test]
    fn a_waiter_gets_the_token_a_release_hands_it() {
        let fixture = Fixture::new();
        let holder = fixture.hold("h");
        thread::scope(|s| {
            let waiting = s.spawn(|| {
                let line = fixture.line();
                line.wait(&waiter(), None, &CancelToken::new())
            });
            fixture.until_waiters(1);
            let released = fixture.line().send(
                &queue::release(&fixture.keys, &holder),
                super::By::new(Duration::from_secs(5), None),
            );
            assert!(queue::parse_held(&fixture.keys, &released.unwrap()).unwrap());
            match waiting.join().unwrap().unwrap() {
                Waited::Granted { token, .. } => assert_eq!(token, 2),
                other => panic!("{other:?}"),
            }
        });
        assert_eq!(fixture.state().holders[0].id, b"w");
    }

    #[test]
    fn a_waiter_heartbeats_past_its_lapse_window_then_leaves_at_its_deadline() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let ask = Ask::new("w", 1, 1, None, Duration::from_millis(200)).unwrap();
        let deadline = Instant::now() + Duration::from_millis(1500);
        thread::scope(|s| {
            let waiting = s.spawn(|| {
                fixture
                    .line()
                    .wait(&ask, Some(deadline), &CancelToken::new())
            });
            fixture.until_waiters(1);
            // Five lapse windows on, it is still in line: its heartbeats kept it there.
            thread::sleep(Duration::from_secs(1));
            assert_eq!(fixture.state().waiters.len(), 1);
            assert_eq!(waiting.join().unwrap().unwrap(), Waited::TimedOut);
        });
        assert!(Instant::now() >= deadline);
        assert!(fixture.state().waiters.is_empty());
        let base = "semaphore:{db}:";
        let left = ["fence", "held", "holders"].map(|k| format!("{base}{k}"));
        assert_eq!(fixture.keys_left(), left);
    }

    #[test]
    fn a_waiter_asks_again_when_a_restarted_server_comes_back() {
        // Timed, or untimed: the restart is well within the I/O timeout (5 s).
        for deadline in [Some(Instant::now() + Duration::from_secs(30)), None] {
            let fixture = Fixture::new();
            fixture.hold("h");
            thread::scope(|s| {
                let waiting = s.spawn(|| {
                    let line = fixture.line();
                    line.wait(&waiter(), deadline, &CancelToken::new())
                });
                fixture.until_waiters(1);
                // The holder's entry is gone with the old server: the waiter's next ask takes it.
                fixture.server.restart();
                assert!(matches!(
                    waiting.join().unwrap(),
                    Ok(Waited::Granted { token: 1, .. })
                ));
            });
        }
    }

    #[test]
    fn contenders_never_hold_more_than_the_capacity_and_all_are_served() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let fixture = Fixture::new();
        let (capacity, threads, rounds) = (3, 8, 20);
        let holding = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let deadline = Instant::now() + Duration::from_secs(60);
        thread::scope(|s| {
            for t in 0..threads {
                let (fixture, holding, most) = (&fixture, &holding, &most);
                s.spawn(move || {
                    for r in 0..rounds {
                        let id = format!("t{t}r{r}");
                        let ask = Ask::new(&id, 1, capacity, None, Duration::from_secs(2)).unwrap();
                        let line = fixture.line();
                        let waited = line.wait(&ask, Some(deadline), &CancelToken::new());
                        assert!(matches!(waited, Ok(Waited::Granted { .. })), "{waited:?}");
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        thread::sleep(Duration::from_millis(2));
                        holding.fetch_sub(1, Ordering::SeqCst);
                        let released = line
                            .send(
                                &queue::release(&fixture.keys, &ask),
                                super::By::new(Duration::from_secs(5), None),
                            )
                            .unwrap();
                        assert!(queue::parse_held(&fixture.keys, &released).unwrap());
                    }
                });
            }
        });
        assert!(most.load(Ordering::SeqCst) <= capacity as usize);
        let state = fixture.state();
        assert!(
            state.holders.is_empty() && state.waiters.is_empty(),
            "{state:?}"
        );
        let base = "semaphore:{db}:";
        assert_eq!(fixture.keys_left(), [format!("{base}fence")]);
    }

    #[test]
    fn a_cancelled_waiter_leaves_the_queue_and_holds_nothing() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let cancel = CancelToken::new();
        thread::scope(|s| {
            let waiting = s.spawn(|| fixture.line().wait(&waiter(), None, &cancel));
            fixture.until_waiters(1);
            cancel.cancel();
            assert!(matches!(
                waiting.join().unwrap(),
                Err(Error::Cancelled { .. })
            ));
        });
        let state = fixture.state();
        assert!(state.waiters.is_empty());
        assert_eq!(state.holders.len(), 1);
    }
}
