use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;

use parking_lot::Mutex;

use super::*;
use crate::driver::blocking::Blocking;
use crate::protocol::primitive::Primitive;
use crate::protocol::queue::{Asked, QueueState};
use crate::transport::send::now;
use crate::transport::Transport;

/// A lapse window no test's wait outlives by much: heartbeats keep the waiters in line.
const TWO_S: Duration = Duration::from_secs(2);

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
            // ok: a test fixture waiting for its own server to start, not a lock's wait.
            thread::sleep(Duration::from_millis(50));
        }
        false
    }

    /// Kills the server and starts an empty one on its port, as a crash and restart.
    pub(super) fn restart(&self) {
        let mut child = self.child.lock();
        let _ = child.kill();
        let _ = child.wait();
        // ok: the server is down for a while, as in a crash; the waiters meanwhile back off.
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
    pub(super) hub: Arc<Hub>,
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        let server = Server::start();
        let transport = crate::backend::transport_of(&server.client).unwrap();
        let keys = QueueKeys::new(Primitive::Semaphore, "db");
        let hub = Hub::of(&transport, keys.slot, Duration::from_secs(5));
        Fixture {
            server,
            transport,
            keys,
            hub,
        }
    }

    /// The id of waiter `id` of this process.
    pub(super) fn id(&self, id: &str) -> String {
        queue::waiter_id(id, self.hub.process())
    }

    /// A waiter of this process for 1 of a capacity of 1, whose heartbeat lapses only after
    /// `lapse`.
    pub(super) fn waiter(&self, id: &str, lapse: Duration) -> Ask {
        Ask::new(&self.id(id), 1, 1, None, lapse).unwrap()
    }

    pub(super) fn line(&self) -> Line<'_, Blocking> {
        Line {
            transport: &self.transport,
            keys: &self.keys,
            hub: &self.hub,
            name: "db",
            io_timeout: Duration::from_secs(5),
        }
    }

    /// The reply of `request`, sent as the waits send theirs.
    pub(super) fn call(&self, request: &Request) -> Result<Value, Error> {
        now(send(
            &*self.transport,
            request,
            Instant::now() + Duration::from_secs(5),
        ))
    }

    /// A holder of all of a capacity of 1, until released.
    pub(super) fn hold(&self, id: &str) -> Ask {
        let ask = Ask::new(id, 1, 1, None, Duration::from_secs(2)).unwrap();
        let reply = self.call(&queue::acquire(&self.keys, &ask, Mode::Try));
        let asked = queue::parse_acquire(&self.keys, &reply.unwrap()).unwrap();
        assert!(matches!(asked, Asked::Granted { .. }), "{asked:?}");
        ask
    }

    pub(super) fn state(&self) -> QueueState {
        let reply = self.call(&queue::state(&self.keys)).unwrap();
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
            // ok: the test's own look at the queue, not a way of waiting for a lock.
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The keys left for good: those that expire by themselves (heartbeats, inboxes) aside.
    pub(super) fn keys_left(&self) -> Vec<String> {
        let mut conn = self.server.client.get_connection().unwrap();
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        keys.retain(|key| redis::cmd("PTTL").arg(key).query::<i64>(&mut conn) == Ok(-1));
        keys.sort();
        keys
    }
}

fn io_error(kind: std::io::ErrorKind) -> Result<Next, Error> {
    Err(Error::Redis(std::io::Error::from(kind).into()))
}

#[test]
fn an_untimed_wait_rides_out_a_server_away_for_the_io_timeout_then_fails() {
    let mut backoff = Backoff::new(Duration::from_millis(100), None);
    assert!(backoff.after(Ok(Next::Ask), Instant::now(), "n").is_ok());
    // Away for an I/O timeout since the reply was due: given up.
    let long_ago = Instant::now() - Duration::from_millis(100);
    let timed_out = io_error(std::io::ErrorKind::TimedOut);
    assert!(backoff.after(timed_out, long_ago, "n").is_err());
    // Found away just now: asked again after a pause, refusals too.
    let mut backoff = Backoff::new(Duration::from_secs(5), None);
    assert!(backoff.after(Ok(Next::Ask), Instant::now(), "n").is_ok());
    let refused = io_error(std::io::ErrorKind::ConnectionRefused);
    let (next, pause) = backoff.after(refused, Instant::now(), "n").unwrap();
    assert_eq!((next, pause), (Next::Ask, Some(FIRST_PAUSE)));
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
    let first = fixture.state().holders[0].token;
    let token = thread::scope(|s| {
        let waiting = s.spawn(|| {
            let line = fixture.line();
            now(line.wait(&fixture.waiter("w", TWO_S), None, &CancelToken::new()))
        });
        fixture.until_waiters(1);
        let released = fixture.call(&queue::release(&fixture.keys, &holder));
        assert!(queue::parse_held(&fixture.keys, &released.unwrap()).unwrap());
        match waiting.join().unwrap().unwrap() {
            LineEnd::Granted { token, .. } => token,
            other => panic!("{other:?}"),
        }
    });
    let holder = &fixture.state().holders[0];
    assert_eq!(holder.id, fixture.id("w").as_bytes());
    assert!(
        token > first && token == holder.token,
        "{token} after {first}"
    );
}

#[test]
fn a_waiter_heartbeats_past_its_lapse_window_then_leaves_at_its_deadline() {
    let fixture = Fixture::new();
    fixture.hold("h");
    let ask = fixture.waiter("w", Duration::from_millis(200));
    let deadline = Instant::now() + Duration::from_millis(1500);
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            now(fixture
                .line()
                .wait(&ask, Some(deadline), &CancelToken::new()))
        });
        fixture.until_waiters(1);
        // Five lapse windows on, it is still in line: its heartbeats kept it there.
        thread::sleep(Duration::from_secs(1));
        assert_eq!(fixture.state().waiters.len(), 1);
        assert_eq!(waiting.join().unwrap().unwrap(), LineEnd::TimedOut);
    });
    assert!(Instant::now() >= deadline);
    assert!(fixture.state().waiters.is_empty());
    let base = "semaphore:{db}:";
    let left = ["count", "fence", "held", "holders"].map(|k| format!("{base}{k}"));
    assert_eq!(fixture.keys_left(), left);
}

#[test]
fn a_waiter_asks_again_when_a_restarted_server_comes_back() {
    // Timed, or untimed: the restart is well within the I/O timeout (5 s).
    for deadline in [Some(Instant::now() + Duration::from_secs(30)), None] {
        let fixture = Fixture::new();
        fixture.hold("h");
        let first = fixture.state().holders[0].token;
        thread::scope(|s| {
            let waiting = s.spawn(|| {
                let line = fixture.line();
                now(line.wait(&fixture.waiter("w", TWO_S), deadline, &CancelToken::new()))
            });
            fixture.until_waiters(1);
            // The holder's entry is gone with the old server: the waiter's next ask takes it,
            // with a token above the holder's, the counter gone too.
            fixture.server.restart();
            match waiting.join().unwrap() {
                Ok(LineEnd::Granted { token, .. }) => assert!(token > first, "{token}"),
                other => panic!("{other:?}"),
            }
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
                    let ask = Ask::new(&fixture.id(&id), 1, capacity, None, TWO_S).unwrap();
                    let line = fixture.line();
                    let waited = now(line.wait(&ask, Some(deadline), &CancelToken::new()));
                    assert!(matches!(waited, Ok(LineEnd::Granted { .. })), "{waited:?}");
                    let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    // ok: the hold, long enough for others to overlap it if they could.
                    thread::sleep(Duration::from_millis(2));
                    holding.fetch_sub(1, Ordering::SeqCst);
                    let released = fixture.call(&queue::release(&fixture.keys, &ask)).unwrap();
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
    let ask = fixture.waiter("w", TWO_S);
    thread::scope(|s| {
        let waiting = s.spawn(|| now(fixture.line().wait(&ask, None, &cancel)));
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

#[cfg(feature = "tokio")]
mod aio {
    use super::*;
    use crate::driver::tokio::Tokio;
    use crate::transport::aio::AsyncTransport;

    fn line<'a>(
        transport: &'a Arc<dyn AsyncTransport>,
        keys: &'a QueueKeys,
        hub: &'a Arc<Hub>,
    ) -> Line<'a, Tokio> {
        Line {
            transport,
            keys,
            hub,
            name: "db",
            io_timeout: Duration::from_secs(5),
        }
    }

    fn waiting(
        fixture: &Fixture,
        ask: Ask,
        deadline: Option<Instant>,
        cancel: CancelToken,
    ) -> tokio::task::JoinHandle<Result<LineEnd, Error>> {
        let transport = Arc::clone(&fixture.transport).to_async();
        let (keys, hub) = (fixture.keys.clone(), Arc::clone(&fixture.hub));
        tokio::spawn(async move {
            let line = line(&transport, &keys, &hub);
            line.wait(&ask, deadline, &cancel).await
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_wait_leaves_the_queue_and_the_waiter_behind_is_served_at_once() {
        let fixture = Fixture::new();
        let holder = fixture.hold("h");
        let lapse = Duration::from_secs(60);
        let first = waiting(
            &fixture,
            fixture.waiter("a", lapse),
            None,
            CancelToken::new(),
        );
        fixture.until_waiters(1);
        let second = waiting(
            &fixture,
            fixture.waiter("b", lapse),
            None,
            CancelToken::new(),
        );
        fixture.until_waiters(2);
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        let released = fixture.call(&queue::release(&fixture.keys, &holder));
        assert!(queue::parse_held(&fixture.keys, &released.unwrap()).unwrap());
        // Long before "a"'s lapse, "b" holds: "a" left when its future was dropped.
        let served = tokio::time::timeout(Duration::from_secs(20), second).await;
        assert!(matches!(served, Ok(Ok(Ok(LineEnd::Granted { .. })))));
        let state = fixture.state();
        assert_eq!(state.holders[0].id, fixture.id("b").as_bytes());
        assert!(state.waiters.is_empty(), "{state:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_dropped_with_a_grant_unseen_passes_it_on() {
        let fixture = Fixture::new();
        let holder = fixture.hold("h");
        let lapse = Duration::from_secs(60);
        let transport = Arc::clone(&fixture.transport).to_async();
        let line = line(&transport, &fixture.keys, &fixture.hub);
        let (first, cancel) = (fixture.waiter("a", lapse), CancelToken::new());
        let mut dropped = Box::pin(line.wait(&first, None, &cancel));
        // Polled until it waits in line, then no more: it never sees its grant.
        let polled = tokio::time::timeout(Duration::from_millis(500), &mut dropped).await;
        assert!(polled.is_err());
        fixture.until_waiters(1);
        let second = waiting(
            &fixture,
            fixture.waiter("b", lapse),
            None,
            CancelToken::new(),
        );
        fixture.until_waiters(2);
        let released = fixture.call(&queue::release(&fixture.keys, &holder));
        assert!(queue::parse_held(&fixture.keys, &released.unwrap()).unwrap());
        assert_eq!(fixture.state().holders[0].id, fixture.id("a").as_bytes());
        drop(dropped);
        // "a" holds without expiry: only its leave hands the grant on to "b".
        let served = tokio::time::timeout(Duration::from_secs(20), second).await;
        assert!(matches!(served, Ok(Ok(Ok(LineEnd::Granted { .. })))));
        assert_eq!(fixture.state().holders[0].id, fixture.id("b").as_bytes());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_wait_ends_its_blpop_at_once_and_leaves_the_queue() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let cancel = CancelToken::new();
        // Its heartbeat is a minute away: only the cancel ends its `BLPOP`.
        let ask = fixture.waiter("w", Duration::from_secs(120));
        let waiter = waiting(&fixture, ask, None, cancel.clone());
        fixture.until_waiters(1);
        cancel.cancel();
        let ended = tokio::time::timeout(Duration::from_secs(20), waiter).await;
        assert!(matches!(ended, Ok(Ok(Err(Error::Cancelled { .. })))));
        let state = fixture.state();
        assert!(state.waiters.is_empty(), "{state:?}");
        assert_eq!(state.holders.len(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_ends_by_its_deadline_having_left_the_queue() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let deadline = Instant::now() + Duration::from_millis(500);
        let ask = fixture.waiter("w", Duration::from_secs(120));
        let waited = waiting(&fixture, ask, Some(deadline), CancelToken::new());
        assert_eq!(waited.await.unwrap().unwrap(), LineEnd::TimedOut);
        let ended = Instant::now();
        assert!(ended >= deadline);
        // At its deadline, not at its next heartbeat a minute on.
        assert!(ended < deadline + Duration::from_secs(5));
        assert!(fixture.state().waiters.is_empty());
    }

    #[test]
    fn a_runtime_that_ends_under_a_wait_leaves_the_queue_from_the_dropping_thread() {
        let fixture = Fixture::new();
        fixture.hold("h");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let ask = fixture.waiter("w", Duration::from_secs(120));
        let entered = runtime.enter();
        let _waiter = waiting(&fixture, ask, None, CancelToken::new());
        drop(entered);
        fixture.until_waiters(1);
        drop(runtime);
        assert!(fixture.state().waiters.is_empty());
    }
}
