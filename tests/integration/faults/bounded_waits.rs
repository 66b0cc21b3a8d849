//! No wait without a bound (docs/design.md, "The wait rule"), on every queue primitive and in
//! both APIs: a waiter left behind when the one ahead of it leaves the line (by its timeout,
//! a cancel, or its future dropped) is timed to the holder's expiry, whether the leaver was
//! of its own process or of another, and even with a lapsed entry between them. The holder
//! is another process, killed; the waiter behind must be served within 50 ms of its expiry.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis_blpop_lock::inspect::Primitive;
use redis_blpop_lock::{CancelToken, Election, Error, Lock, RwLock, Semaphore};

use crate::support::{ms, secs, tries_run, ChildProcess, RedisServer};

/// How late past the holder's expiry the waiter behind may be served.
const ON_TIME: Duration = Duration::from_millis(50);

/// The holder's lease: it is killed well before it would renew.
const HOLDER_LEASE: Duration = Duration::from_millis(1200);

/// Long past every bound here: a waiter not served by then waits for ever.
const NEVER: Duration = Duration::from_secs(8);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Semaphore,
    FairLock,
    Write,
    Campaign,
}

const KINDS: [Kind; 4] = [Kind::Semaphore, Kind::FairLock, Kind::Write, Kind::Campaign];

impl Kind {
    fn primitive(self) -> Primitive {
        match self {
            Kind::Semaphore => Primitive::Semaphore,
            Kind::FairLock => Primitive::FairLock,
            Kind::Write => Primitive::RwLock,
            Kind::Campaign => Primitive::Election,
        }
    }

    fn parse(text: &str) -> Kind {
        *KINDS
            .iter()
            .find(|k| format!("{k:?}") == text)
            .unwrap_or_else(|| panic!("no kind {text}"))
    }
}

/// How the first waiter leaves the line.
#[derive(Clone, Copy, Debug)]
enum Leave {
    /// Its own timeout (`try_*_for`).
    Timeout,
    /// Its `CancelToken`, cancelled by another thread.
    Cancel,
    /// Its future dropped (the async API only).
    Drop,
}

/// The server's clock, in ms.
fn server_ms(conn: &mut redis::Connection) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
    s * 1000 + us / 1000
}

/// A blocking handle's one wait: untimed (`None`), or timed; `held` runs while it holds.
/// Whether it was granted.
fn wait(
    client: &redis::Client,
    kind: Kind,
    name: &str,
    timed: Option<Duration>,
    settings: Settings,
    held: impl FnOnce(),
) -> Result<bool, Error> {
    fn holding<G>(guard: Option<G>, held: impl FnOnce()) -> bool {
        guard.map(|_guard| held()).is_some()
    }
    Ok(match kind {
        Kind::Semaphore => {
            let h = settings
                .apply(Semaphore::builder(client, name, 1))
                .build()?;
            let g = match timed {
                None => Some(h.acquire()?),
                Some(d) => h.try_acquire_for(d)?,
            };
            holding(g, held)
        }
        Kind::FairLock => {
            let h = settings
                .apply(Lock::builder(client, name).fair(true))
                .build()?;
            let g = match timed {
                None => Some(h.lock()?),
                Some(d) => h.try_lock_for(d)?,
            };
            holding(g, held)
        }
        Kind::Write => {
            let h = settings.apply(RwLock::builder(client, name)).build()?;
            let g = match timed {
                None => Some(h.write()?),
                Some(d) => h.try_write_for(d)?,
            };
            holding(g, held)
        }
        Kind::Campaign => {
            let h = settings.apply(Election::builder(client, name)).build()?;
            let g = match timed {
                None => Some(h.campaign("w")?),
                Some(d) => h.try_campaign_for("w", d)?,
            };
            holding(g, held)
        }
    })
}

/// What a test sets on a handle: its lease, heartbeat and cancel token.
#[derive(Clone, Default)]
struct Settings {
    expire: Option<Duration>,
    heartbeat: Option<Duration>,
    cancel: Option<CancelToken>,
}

impl Settings {
    fn apply<K>(&self, mut b: redis_blpop_lock::LockBuilder<K>) -> redis_blpop_lock::LockBuilder<K>
    where
        redis_blpop_lock::LockBuilder<K>: Cancellable,
    {
        if let Some(expire) = self.expire {
            b = b.expire(expire).auto_renewal(false);
        }
        if let Some(heartbeat) = self.heartbeat {
            b = b.heartbeat(heartbeat);
        }
        match &self.cancel {
            Some(token) => b.with_cancel(token.clone()),
            None => b,
        }
    }
}

/// `cancel_token` is written per primitive's builder.
trait Cancellable: Sized {
    fn with_cancel(self, token: CancelToken) -> Self;
}

macro_rules! cancellable {
    ($($kind:ty),*) => {$(
        impl Cancellable for redis_blpop_lock::LockBuilder<$kind> {
            fn with_cancel(self, token: CancelToken) -> Self {
                self.cancel_token(token)
            }
        }
    )*};
}
cancellable!(Semaphore, Lock, RwLock, Election);

/// The holder, in a child process of its own: takes `args[0]` (a kind) named `args[1]` with a
/// lease of `args[2]` ms, not renewed, and says `held <server ms before the take>`; killed by
/// the test.
pub fn hold(client: &redis::Client, args: &[String]) {
    let kind = Kind::parse(&args[0]);
    let settings = Settings {
        expire: Some(ms(args[2].parse().unwrap())),
        ..Settings::default()
    };
    let before = server_ms(&mut client.get_connection().unwrap());
    wait(client, kind, &args[1], None, settings, || {
        println!("held {before}");
        thread::sleep(secs(60));
    })
    .unwrap();
}

/// A waiter in a child process of its own: waits on `args[0]` (a kind) named `args[1]` with a
/// heartbeat of `args[2]` ms, once it has said `waiting`: untimed, or for `args[3]` ms when
/// given, then says `left` if it was not granted. Stopped or killed by the test.
pub fn stand_in_line(client: &redis::Client, args: &[String]) {
    let kind = Kind::parse(&args[0]);
    let settings = Settings {
        heartbeat: Some(ms(args[2].parse().unwrap())),
        ..Settings::default()
    };
    let timed = args.get(3).map(|t| ms(t.parse().unwrap()));
    println!("waiting");
    if let Ok(false) = wait(client, kind, &args[1], timed, settings, || {}) {
        println!("left");
    }
}

/// The holder of `kind` named `name` in a child process, and the earliest its lease can end,
/// in server ms.
fn holder(server: &RedisServer, kind: Kind, name: &str, lease: Duration) -> (ChildProcess, u64) {
    let lease_ms = lease.as_millis() as u64;
    let mut child = ChildProcess::spawn(
        "faults::bounded_waits::hold",
        &server.url(),
        &[&format!("{kind:?}"), name, &lease_ms.to_string()],
    );
    let line = child.expect_line("held");
    let before: u64 = line.trim_start_matches("held ").trim().parse().unwrap();
    (child, before + lease_ms)
}

/// Asserts that the waiter served at `served` (server ms) was served within [`ON_TIME`] of
/// the holder's expiry, which is no earlier than `expiry`.
fn assert_on_time(kind: Kind, how: &str, served: Option<u64>, expiry: u64) {
    let served = served.unwrap_or_else(|| {
        panic!("{kind:?}, first waiter left by {how}: the waiter behind was not served")
    });
    let late = served.saturating_sub(expiry);
    assert!(
        late <= ON_TIME.as_millis() as u64,
        "{kind:?}, first waiter left by {how}: the waiter behind was served {late} ms after \
         the holder's expiry"
    );
}

/// Asserts that the first waiter (of `what`) left as `leave` says: not acquired in time, or
/// cancelled.
fn assert_left(what: impl std::fmt::Debug, leave: Leave, left: &Result<bool, Error>) {
    assert!(
        matches!(
            (left, leave),
            (Ok(false), Leave::Timeout) | (Err(Error::Cancelled { .. }), Leave::Cancel)
        ),
        "{what:?}: the first waiter came out {left:?}"
    );
}

/// Runs `f` on a thread of its own: its outcome comes on the channel.
fn spawn<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> mpsc::Receiver<T> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx
}

/// An untimed waiter on a new handle of `client`: when it was served (server ms), read on
/// its own connection.
fn served_when(
    client: &redis::Client,
    kind: Kind,
    name: &str,
    settings: Settings,
) -> mpsc::Receiver<Result<Option<u64>, Error>> {
    let (client, name) = (client.clone(), name.to_owned());
    spawn(move || {
        let mut conn = client.get_connection().unwrap();
        let mut served = None;
        wait(&client, kind, &name, None, settings, || {
            served = Some(server_ms(&mut conn));
        })
        .map(|_| served)
    })
}

/// What the waiter behind came to, within [`NEVER`].
fn outcome(kind: Kind, behind: &mpsc::Receiver<Result<Option<u64>, Error>>) -> Option<u64> {
    let outcome = (behind.recv_timeout(NEVER))
        .unwrap_or_else(|_| panic!("{kind:?}: the waiter behind still waits after {NEVER:?}"));
    outcome.unwrap_or_else(|e| panic!("{kind:?}: the waiter behind failed: {e}"))
}

/// The first waiter of this process leaves the line; the second, untimed on another handle of
/// the same client, is served at the killed holder's expiry.
fn second_waiter_of_a_process_is_served_at_the_expiry(kind: Kind, leave: Leave) {
    let server = RedisServer::start();
    let client = server.client();
    let name = format!("{kind:?}-{leave:?}");
    let (holder, expiry) = holder(&server, kind, &name, HOLDER_LEASE);
    let cancel = CancelToken::new();
    let first = {
        let (client, name) = (client.clone(), name.clone());
        let timed = matches!(leave, Leave::Timeout).then_some(ms(400));
        let settings = Settings {
            cancel: Some(cancel.clone()),
            ..Settings::default()
        };
        spawn(move || wait(&client, kind, &name, timed, settings, || {}))
    };
    server.until_queued(kind.primitive(), &name, 1, secs(5), || false);
    let second = served_when(&client, kind, &name, Settings::default());
    server.until_queued(kind.primitive(), &name, 2, secs(5), || false);
    if matches!(leave, Leave::Cancel) {
        thread::sleep(ms(200));
        cancel.cancel();
    }
    assert_left(kind, leave, &first.recv_timeout(NEVER).unwrap());
    thread::sleep(ms(100));
    holder.signal("KILL");
    assert_on_time(kind, &format!("{leave:?}"), outcome(kind, &second), expiry);
}

#[test]
fn a_second_waiter_of_the_process_is_served_at_the_expiry_after_the_first_times_out() {
    for kind in KINDS {
        second_waiter_of_a_process_is_served_at_the_expiry(kind, Leave::Timeout);
    }
}

#[test]
fn a_second_waiter_of_the_process_is_served_at_the_expiry_after_the_first_is_cancelled() {
    for kind in KINDS {
        second_waiter_of_a_process_is_served_at_the_expiry(kind, Leave::Cancel);
    }
}

/// A plain lock's acquire that finds a waiter of its process waiting on the lock joins the
/// line behind it without a try of its own, and takes its timer: when that waiter leaves
/// first, the one behind is still served at the holder's expiry (a holder that crashed
/// pushes no signal).
#[test]
fn a_plain_lock_waiter_that_joined_behind_another_is_served_at_the_expiry_after_it_leaves() {
    for leave in [Leave::Timeout, Leave::Cancel] {
        let server = RedisServer::start();
        let client = server.client();
        let name = format!("plain-{leave:?}");
        let mut conn = server.conn();
        // The holder, of another process, crashed: its key expires, and nobody signals.
        let lease_ms = HOLDER_LEASE.as_millis() as u64;
        let expiry = server_ms(&mut conn) + lease_ms;
        let () = redis::cmd("SET")
            .arg(format!("lock:{name}"))
            .arg("crashed")
            .arg("PX")
            .arg(lease_ms)
            .query(&mut conn)
            .unwrap();
        let cancel = CancelToken::new();
        let first = Lock::builder(&client, &name)
            .cancel_token(cancel.clone())
            .build()
            .unwrap();
        let since = tries_run(&server);
        let first = spawn(move || match leave {
            Leave::Timeout => first.acquire_timeout(ms(400)),
            _ => first.acquire().map(|()| true),
        });
        server.until_waiting(1, since, secs(5), || false);
        let second = Lock::new(&client, &name).unwrap();
        let second = spawn(move || {
            second.acquire()?;
            Ok::<_, Error>(server_ms(&mut conn))
        });
        thread::sleep(ms(200));
        if matches!(leave, Leave::Cancel) {
            cancel.cancel();
        }
        assert_left("a plain lock", leave, &first.recv_timeout(NEVER).unwrap());
        let served = (second.recv_timeout(NEVER))
            .unwrap_or_else(|_| panic!("{leave:?}: the waiter behind still waits after {NEVER:?}"))
            .unwrap_or_else(|e| panic!("{leave:?}: the waiter behind failed: {e}"));
        let late = served.saturating_sub(expiry);
        assert!(
            late <= ON_TIME.as_millis() as u64,
            "first waiter left by {leave:?}: the plain lock's waiter behind was served {late} ms \
             after the holder's expiry"
        );
    }
}

#[cfg(feature = "tokio")]
mod aio {
    //! The same in the async API, where a waiter also leaves by its future being dropped.

    use std::future::Future;
    use std::time::Duration;

    use redis_blpop_lock::aio::{Election, Lock, RwLock, Semaphore};
    use redis_blpop_lock::{CancelToken, Error};

    use super::{assert_on_time, holder, server_ms, Kind, Leave, HOLDER_LEASE, KINDS, NEVER};
    use crate::support::{ms, secs, RedisServer};

    /// An async handle's one wait, as [`super::wait`].
    async fn wait(
        client: &redis::Client,
        kind: Kind,
        name: &str,
        timed: Option<Duration>,
        cancel: Option<CancelToken>,
        held: impl Future<Output = ()>,
    ) -> Result<bool, Error> {
        async fn holding<G>(guard: Option<G>, held: impl Future<Output = ()>) -> bool {
            match guard {
                Some(_guard) => {
                    held.await;
                    true
                }
                None => false,
            }
        }
        let token = cancel.unwrap_or_default();
        Ok(match kind {
            Kind::Semaphore => {
                let h = Semaphore::builder(client, name, 1)
                    .cancel_token(token)
                    .build()?;
                let g = match timed {
                    None => Some(h.acquire().await?),
                    Some(d) => h.try_acquire_for(d).await?,
                };
                holding(g, held).await
            }
            Kind::FairLock => {
                let h = Lock::builder(client, name)
                    .fair(true)
                    .cancel_token(token)
                    .build()?;
                let g = match timed {
                    None => Some(h.lock().await?),
                    Some(d) => h.try_lock_for(d).await?,
                };
                holding(g, held).await
            }
            Kind::Write => {
                let h = RwLock::builder(client, name).cancel_token(token).build()?;
                let g = match timed {
                    None => Some(h.write().await?),
                    Some(d) => h.try_write_for(d).await?,
                };
                holding(g, held).await
            }
            Kind::Campaign => {
                let h = Election::builder(client, name)
                    .cancel_token(token)
                    .build()?;
                let g = match timed {
                    None => Some(h.campaign("w").await?),
                    Some(d) => h.try_campaign_for("w", d).await?,
                };
                holding(g, held).await
            }
        })
    }

    async fn second_waiter_is_served_at_the_expiry(kind: Kind, leave: Leave) {
        let server = RedisServer::start();
        let client = server.client();
        let name = format!("aio-{kind:?}-{leave:?}");
        let (holder, expiry) = holder(&server, kind, &name, HOLDER_LEASE);
        let cancel = CancelToken::new();
        let first = {
            let (client, name, cancel) = (client.clone(), name.clone(), cancel.clone());
            let timed = matches!(leave, Leave::Timeout).then_some(ms(400));
            tokio::spawn(async move {
                let waiting = wait(&client, kind, &name, timed, Some(cancel), async {});
                match leave {
                    // Dropped at the timeout, mid-wait.
                    Leave::Drop => tokio::time::timeout(ms(400), waiting).await.ok(),
                    _ => Some(waiting.await),
                }
            })
        };
        let queued = |n| {
            tokio::task::block_in_place(|| {
                server.until_queued(kind.primitive(), &name, n, secs(5), || false)
            })
        };
        queued(1);
        let second = {
            let (client, name) = (client.clone(), name.clone());
            tokio::spawn(async move {
                let served = std::sync::Mutex::new(None);
                let mut conn = client.get_connection().unwrap();
                wait(&client, kind, &name, None, None, async {
                    *served.lock().unwrap() = Some(server_ms(&mut conn));
                })
                .await
                .map(|_| served.into_inner().unwrap())
            })
        };
        queued(2);
        if matches!(leave, Leave::Cancel) {
            tokio::time::sleep(ms(200)).await;
            cancel.cancel();
        }
        let left = first.await.unwrap();
        assert!(
            matches!(
                (&left, leave),
                (Some(Ok(false)), Leave::Timeout)
                    | (Some(Err(Error::Cancelled { .. })), Leave::Cancel)
                    | (None, Leave::Drop)
            ),
            "{kind:?}: the first waiter came out {left:?}"
        );
        tokio::time::sleep(ms(100)).await;
        holder.signal("KILL");
        let served = tokio::time::timeout(NEVER, second)
            .await
            .unwrap_or_else(|_| panic!("{kind:?}, {leave:?}: the waiter behind waits for ever"))
            .unwrap()
            .unwrap();
        assert_on_time(kind, &format!("{leave:?}"), served, expiry);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_second_waiter_of_the_process_is_served_at_the_expiry_whichever_way_the_first_leaves()
    {
        for kind in KINDS {
            for leave in [Leave::Timeout, Leave::Cancel, Leave::Drop] {
                second_waiter_is_served_at_the_expiry(kind, leave).await;
            }
        }
    }
}

/// A heartbeat of 3 s: an entry lapses 6 s after its process's last one.
fn long_heartbeat() -> Settings {
    Settings {
        heartbeat: Some(secs(3)),
        ..Settings::default()
    }
}

/// Item 2 of the wait rule: the leaver, a lapsed waiter (its process stopped) and the waiter
/// behind, each of another process. The waiter behind was timed to the leaver's lapse (a
/// long heartbeat) once it passed over the lapsed one: the leaver's going must wake it past
/// the lapsed entry.
#[test]
fn a_waiter_behind_a_lapsed_entry_is_woken_when_the_one_ahead_leaves() {
    for kind in KINDS {
        let server = RedisServer::start();
        let name = format!("behind-lapsed-{kind:?}");
        let (holder, expiry) = holder(&server, kind, &name, secs(2));
        // The leaver, whose entry lapses only 6 s after its process's last heartbeat, and
        // the waiter after it, whose entry lapses 200 ms after its process is stopped.
        let line_up = |heartbeat: &str, timed: &[&str]| {
            let kind = format!("{kind:?}");
            let args = [&[kind.as_str(), &name, heartbeat][..], timed].concat();
            let mut child =
                ChildProcess::spawn("faults::bounded_waits::stand_in_line", &server.url(), &args);
            child.expect_line("waiting");
            child
        };
        let mut leaver = line_up("3000", &["1000"]);
        server.until_queued(kind.primitive(), &name, 1, secs(5), || false);
        let stopped = line_up("100", &[]);
        server.until_queued(kind.primitive(), &name, 2, secs(5), || false);
        stopped.signal("STOP");
        // Another process: timed to the stopped one's lapse, then past it to the leaver's.
        // Its own lapse window is as long, so that the cap on its timer does not wake it.
        let behind = served_when(&server.client(), kind, &name, long_heartbeat());
        server.until_queued(kind.primitive(), &name, 3, secs(5), || false);
        leaver.expect_line("left");
        holder.signal("KILL");
        assert_on_time(
            kind,
            "its timeout, a lapsed entry behind it",
            outcome(kind, &behind),
            expiry,
        );
        stopped.signal("KILL");
    }
}

/// The server's timer counts from the ask's send, not its reply: a reply held up on its way
/// (a slow network) must not make the waiter late past the holder's expiry by the delay.
#[test]
fn a_waiter_whose_reply_came_late_is_served_at_the_holders_expiry() {
    let server = RedisServer::start();
    let proxy = crate::support::Proxy::start(server.port);
    let name = "late-reply";
    let mut conn = server.client().get_connection().unwrap();
    let holder = Semaphore::builder(&server.client(), name, 1)
        .expire(HOLDER_LEASE)
        .auto_renewal(false)
        .build()
        .unwrap();
    let expiry = server_ms(&mut conn) + HOLDER_LEASE.as_millis() as u64;
    // Held past its lease: it expires, nobody releases it.
    let _held = holder.acquire().unwrap();
    let waiter = Semaphore::builder(&proxy.client(), name, 1)
        .build()
        .unwrap();
    // Its connection opens now, so that its ask's reply is held up.
    assert!(waiter.try_acquire().unwrap().is_none());
    proxy.hold_replies(true);
    let served = spawn(move || {
        let _permit = waiter.acquire().unwrap();
        server_ms(&mut conn)
    });
    thread::sleep(ms(500));
    proxy.hold_replies(false);
    let served = served.recv_timeout(NEVER).expect("the waiter is served");
    let late = served.saturating_sub(expiry);
    assert!(
        late <= ON_TIME.as_millis() as u64,
        "served {late} ms after the holder's expiry, its ask's reply 500 ms late"
    );
}
