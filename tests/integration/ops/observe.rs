//! Metrics and tracing (`metrics` and `tracing` features), recorded against real servers.
//!
//! Metrics go to one process-wide recording recorder, since renewals record from their own
//! threads; each test gives its handles a `metrics_label` of its own and reads only that label,
//! so tests running in parallel do not see each other's numbers. Tests of what a handle
//! records without a label run with a recorder local to their thread.

use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::CompositeKey;
use redis::Commands;
use redis_blpop_lock::{observe, CancelToken, Error, Lock};

use crate::support::{eventually, every_primitive, ms, secs, Proxy, RedisServer};

/// Everything the process-wide recorder has recorded: its snapshots drain it, so each read
/// keeps what it took for the next.
struct Recorded {
    snapshotter: Snapshotter,
    taken: Mutex<Vec<(CompositeKey, DebugValue)>>,
}

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("no other global recorder");
        Recorded {
            snapshotter,
            taken: Mutex::new(Vec::new()),
        }
    })
}

/// The values of metric `name` with label `lock` = `lock` and, if given, `outcome`: a
/// counter's increments, a histogram's observations.
fn values(name: &str, lock: &str, outcome: Option<&str>) -> Vec<f64> {
    let recorded = recorded();
    let mut taken = recorded.taken.lock().unwrap();
    for (key, _, _, value) in recorded.snapshotter.snapshot().into_vec() {
        taken.push((key, value));
    }
    matching(&taken, name, lock, outcome)
}

fn matching(
    taken: &[(CompositeKey, DebugValue)],
    name: &str,
    lock: &str,
    outcome: Option<&str>,
) -> Vec<f64> {
    let label = |key: &CompositeKey, wanted: &str| {
        key.key()
            .labels()
            .find(|l| l.key() == wanted)
            .map(|l| l.value().to_owned())
    };
    taken
        .iter()
        .filter(|(key, _)| key.key().name() == name && label(key, "lock").as_deref() == Some(lock))
        .filter(|(key, _)| outcome.is_none() || label(key, "outcome").as_deref() == outcome)
        .flat_map(|(_, value)| match value {
            DebugValue::Counter(n) => vec![*n as f64],
            DebugValue::Histogram(xs) => xs.iter().map(|x| x.into_inner()).collect(),
            DebugValue::Gauge(x) => vec![x.into_inner()],
        })
        .collect()
}

fn count(name: &str, lock: &str, outcome: Option<&str>) -> f64 {
    values(name, lock, outcome).iter().sum()
}

fn labelled(client: &redis::Client, name: &str, label: &'static str) -> Lock {
    recorded();
    Lock::builder(client, name)
        .metrics_label(label)
        .build()
        .unwrap()
}

#[test]
fn an_uncontended_acquire_and_release_record_the_acquisition_its_wait_and_its_hold() {
    let server = RedisServer::start();
    let lock = labelled(&server.client(), "l", "observe-uncontended");
    lock.acquire().unwrap();
    lock.release().unwrap();
    let label = "observe-uncontended";
    let acquired = Some("acquired");
    assert_eq!(count("redis_lock_acquisitions_total", label, acquired), 1.0);
    assert_eq!(values("redis_lock_wait_seconds", label, acquired).len(), 1);
    assert_eq!(values("redis_lock_hold_seconds", label, None).len(), 1);
    assert_eq!(count("redis_lock_handoffs_total", label, None), 0.0);
}

#[test]
fn a_try_lock_for_that_times_out_is_recorded_as_timed_out_after_its_wait() {
    let server = RedisServer::start();
    let client = server.client();
    Lock::new(&client, "l").unwrap().acquire().unwrap();
    let lock = labelled(&client, "l", "observe-timed-out");
    assert!(lock.try_lock_for(ms(200)).unwrap().is_none());
    let label = "observe-timed-out";
    let timed_out = Some("timed_out");
    assert_eq!(
        count("redis_lock_acquisitions_total", label, timed_out),
        1.0
    );
    let waits = values("redis_lock_wait_seconds", label, timed_out);
    assert!(waits.len() == 1 && waits[0] >= 0.2, "waits: {waits:?}");
}

#[test]
fn a_cancelled_wait_is_recorded_as_cancelled() {
    let server = RedisServer::start();
    let client = server.client();
    Lock::new(&client, "l").unwrap().acquire().unwrap();
    let token = CancelToken::new();
    recorded();
    let lock = Lock::builder(&client, "l")
        .metrics_label("observe-cancelled")
        .cancel_token(token.clone())
        .build()
        .unwrap();
    let waiter = thread::spawn(move || lock.acquire());
    server.until_blocked(1, secs(10), || waiter.is_finished());
    token.cancel();
    assert!(matches!(
        waiter.join().unwrap(),
        Err(Error::Cancelled { .. })
    ));
    let label = "observe-cancelled";
    assert_eq!(
        count("redis_lock_acquisitions_total", label, Some("cancelled")),
        1.0
    );
    assert_eq!(
        values("redis_lock_wait_seconds", label, Some("cancelled")).len(),
        1
    );
}

#[test]
fn a_wait_the_server_refuses_is_recorded_as_an_error() {
    let server = RedisServer::start();
    let client = server.client();
    Lock::new(&client, "l").unwrap().acquire().unwrap();
    // A signal key that is not a list: the waiter's BLPOP is refused.
    let _: () = server.conn().set("lock-signal:l", "corrupt").unwrap();
    let lock = labelled(&client, "l", "observe-error");
    assert!(matches!(
        lock.acquire_timeout(secs(10)),
        Err(Error::Corrupt { .. })
    ));
    assert_eq!(
        count(
            "redis_lock_acquisitions_total",
            "observe-error",
            Some("error")
        ),
        1.0
    );
}

#[test]
fn a_waiter_woken_by_a_release_counts_a_handoff() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::new(&client, "l").unwrap();
    holder.acquire().unwrap();
    let lock = labelled(&client, "l", "observe-handoff");
    let waiter = thread::spawn(move || lock.acquire_timeout(secs(30)));
    server.until_blocked(1, secs(10), || waiter.is_finished());
    holder.release().unwrap();
    assert!(waiter.join().unwrap().unwrap());
    assert_eq!(
        count("redis_lock_handoffs_total", "observe-handoff", None),
        1.0
    );
}

#[test]
fn a_lock_reset_under_its_renewing_holder_is_counted_lost_once() {
    let server = RedisServer::start();
    let client = server.client();
    recorded();
    let holder = Lock::builder(&client, "l")
        .metrics_label("observe-lost")
        .expire(ms(600))
        .auto_renewal(true)
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let other = Lock::new(&client, "l").unwrap();
    assert!(other.reset().unwrap());
    assert!(other.try_acquire().unwrap());
    eventually(secs(10), "the renewal to find the lock lost", || {
        holder.lost()
    });
    // Told again by an extend: still one loss.
    assert!(matches!(
        holder.extend(None),
        Err(Error::NotAcquired { .. })
    ));
    let label = "observe-lost";
    assert_eq!(count("redis_lock_lost_total", label, None), 1.0);
    // The hold ended when the loss was noticed, not again at the release.
    let _ = holder.release();
    assert_eq!(values("redis_lock_hold_seconds", label, None).len(), 1);
}

#[test]
fn a_lock_that_does_not_renew_and_outlives_its_expiry_counts_lost_at_its_release() {
    let server = RedisServer::start();
    let client = server.client();
    recorded();
    let holder = Lock::builder(&client, "l")
        .metrics_label("observe-expired")
        .expire(ms(100))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    eventually(secs(10), "the expiry to pass", || holder.lost());
    let _ = holder.release();
    assert_eq!(count("redis_lock_lost_total", "observe-expired", None), 1.0);
}

#[test]
fn an_unknown_outcome_given_back_in_the_background_counts_a_settlement() {
    let server = RedisServer::start();
    recorded();
    let holder = Lock::builder(&server.client(), "l")
        .metrics_label("observe-background")
        .expire(secs(30))
        .io_timeout(ms(300))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    // The release's reply cannot come: its outcome is unknown until the server is back.
    server.pause();
    assert!(matches!(
        holder.release(),
        Err(Error::OutcomeUnknown { .. })
    ));
    server.resume();
    eventually(
        secs(10),
        "the background settle to give the lock back",
        || {
            count(
                "redis_lock_settlements_total",
                "observe-background",
                Some("settled"),
            ) >= 1.0
        },
    );
    let key: Option<String> = server.conn().get("lock:l").unwrap();
    assert_eq!(key, None);
}

#[test]
fn a_renewal_failing_while_the_server_is_frozen_counts_a_failure_not_a_loss() {
    let server = RedisServer::start();
    recorded();
    let lock = Lock::builder(&server.client(), "l")
        .metrics_label("observe-renewal-failure")
        .expire(secs(6))
        .io_timeout(ms(300))
        .auto_renewal(true)
        .build()
        .unwrap();
    lock.acquire().unwrap();
    let label = "observe-renewal-failure";
    // Frozen across the renewal due at 4 s, and thawed at the first failure, well before
    // the expiry: the retry gets through.
    server.pause();
    eventually(secs(10), "a renewal to fail", || {
        count("redis_lock_renewal_failures_total", label, None) >= 1.0
    });
    server.resume();
    lock.release().unwrap();
    assert_eq!(count("redis_lock_lost_total", label, None), 0.0);
}

#[test]
fn a_try_whose_reply_is_lost_counts_a_settlement() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let lock = labelled(&proxy.client(), "l", "observe-settled");
    proxy.drop_reply_to("\r\nNX\r\n");
    lock.acquire().unwrap();
    assert_eq!(
        count(
            "redis_lock_settlements_total",
            "observe-settled",
            Some("settled")
        ),
        1.0
    );
}

#[test]
fn a_handle_without_a_label_records_lock_other_and_never_its_name() {
    let server = RedisServer::start();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // Blocking, without renewal: everything it records, it records on this thread.
    metrics::with_local_recorder(&recorder, || {
        let lock = Lock::new(&server.client(), "secret-name").unwrap();
        lock.acquire().unwrap();
        lock.release().unwrap();
    });
    let snapshot = snapshotter.snapshot().into_vec();
    assert!(!snapshot.is_empty());
    for (key, ..) in &snapshot {
        let labels: Vec<_> = key.key().labels().collect();
        assert!(labels
            .iter()
            .any(|l| l.key() == "lock" && l.value() == "other"));
        assert!(labels.iter().all(|l| l.value() != "secret-name"), "{key:?}");
    }
}

#[test]
fn label_lock_names_maps_names_to_labels_the_application_allows() {
    let server = RedisServer::start();
    recorded();
    observe::label_lock_names(|name| {
        name.strip_prefix("observe-named:")
            .map(|_| "observe-named".to_owned())
    });
    let lock = Lock::new(&server.client(), "observe-named:4711").unwrap();
    lock.acquire().unwrap();
    lock.release().unwrap();
    assert_eq!(
        count(
            "redis_lock_acquisitions_total",
            "observe-named",
            Some("acquired")
        ),
        1.0
    );
}

/// Tracing: a subscriber that writes down spans and events as lines, for one thread.
mod spans {
    use std::fmt::Debug;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    #[derive(Default)]
    pub struct Lines {
        next: AtomicU64,
        pub lines: Mutex<Vec<String>>,
    }

    struct Fields(String);

    impl Visit for Fields {
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0 += &format!(" {}={value}", field.name());
        }
        fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
            self.0 += &format!(" {}={value:?}", field.name());
        }
    }

    pub struct Writer(pub Arc<Lines>);

    impl Writer {
        fn write(&self, line: String) {
            self.0.lines.lock().unwrap().push(line);
        }
    }

    impl Subscriber for Writer {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            let id = self.0.next.fetch_add(1, Ordering::SeqCst) + 1;
            let mut fields = Fields(format!("new {id} {}", span.metadata().name()));
            span.record(&mut fields);
            self.write(fields.0);
            Id::from_u64(id)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            let mut fields = Fields(format!("event {}", event.metadata().level()));
            event.record(&mut fields);
            self.write(fields.0);
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
        fn try_close(&self, id: Id) -> bool {
            self.write(format!("close {}", id.into_u64()));
            true
        }
    }
}

/// What `run` traced on this thread.
fn traced(run: impl FnOnce()) -> Vec<String> {
    let lines = Arc::new(spans::Lines::default());
    tracing::subscriber::with_default(spans::Writer(Arc::clone(&lines)), run);

    lines.lines.lock().unwrap().clone()
}

#[test]
fn an_acquisition_and_its_hold_are_spans_with_the_name_and_owner() {
    let server = RedisServer::start();
    let lock = Lock::builder(&server.client(), "l")
        .id("me")
        .build()
        .unwrap();
    let lines = traced(|| {
        lock.acquire().unwrap();
        lock.release().unwrap();
    });
    let new = |span: &str| {
        let prefix = format!(" {span} name=l owner=me");
        let line = lines
            .iter()
            .find(|l| l.starts_with("new ") && l.ends_with(&prefix));
        line.unwrap_or_else(|| panic!("no span {span} in {lines:#?}"))
            .split(' ')
            .nth(1)
            .unwrap()
            .to_owned()
    };
    new("redis_lock.acquire");
    let hold = new("redis_lock.hold");
    assert!(
        lines.contains(&format!("close {hold}")),
        "the hold span stayed open: {lines:#?}"
    );
}

#[test]
fn a_loss_noticed_by_an_extend_is_a_warning_event() {
    let server = RedisServer::start();
    let client = server.client();
    let holder = Lock::builder(&client, "l")
        .expire(secs(30))
        .build()
        .unwrap();
    holder.acquire().unwrap();
    let other = Lock::new(&client, "l").unwrap();
    assert!(other.reset().unwrap());
    let lines = traced(|| assert!(holder.extend(None).is_err()));
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("event WARN message=redis_lock: lost name=l")),
        "{lines:#?}"
    );
}

#[test]
fn a_settled_lost_reply_is_a_warning_event() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let lock = Lock::new(&proxy.client(), "l").unwrap();
    proxy.drop_reply_to("\r\nNX\r\n");
    let lines = traced(|| lock.acquire().unwrap());
    assert!(
        lines.iter().any(|l| l.starts_with("event WARN")
            && l.contains("lost reply settled")
            && l.ends_with("outcome=settled")),
        "{lines:#?}"
    );
}

#[cfg(feature = "tokio")]
#[tokio::test]
async fn the_async_api_records_its_acquisitions_and_holds_too() {
    let server = RedisServer::start();
    recorded();
    let lock = redis_blpop_lock::aio::Lock::builder(&server.client(), "l")
        .metrics_label("observe-async")
        .build()
        .unwrap();
    lock.acquire().await.unwrap();
    lock.release().await.unwrap();
    let label = "observe-async";
    assert_eq!(
        count("redis_lock_acquisitions_total", label, Some("acquired")),
        1.0
    );
    assert_eq!(values("redis_lock_hold_seconds", label, None).len(), 1);
}

#[cfg(feature = "tokio")]
#[test]
fn a_failed_renewal_is_a_warning_event() {
    let server = RedisServer::start();
    let lines = Arc::new(spans::Lines::default());
    let failed = || {
        let lines = lines.lines.lock().unwrap();
        lines.iter().any(|l| l.contains("renewal failed name=l"))
    };
    // A runtime on this thread runs the renewal task on it too, under this thread's subscriber.
    let _traced = tracing::subscriber::set_default(spans::Writer(Arc::clone(&lines)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let lock = redis_blpop_lock::aio::Lock::builder(&server.client(), "l")
            .expire(secs(6))
            .io_timeout(ms(300))
            .auto_renewal(true)
            .build()
            .unwrap();
        lock.acquire().await.unwrap();
        // Frozen across the renewal due at 4 s, and thawed at the first failure.
        server.pause();
        let started = std::time::Instant::now();
        while !failed() {
            assert!(started.elapsed() < secs(10), "no renewal failed");
            tokio::time::sleep(ms(5)).await;
        }
        server.resume();
        lock.release().await.unwrap();
    });
}

#[test]
fn a_fencing_token_that_went_back_is_counted() {
    let server = RedisServer::start();
    recorded();
    let label = "observe-fence-back";
    let lock = Lock::builder(&server.client(), "ledger")
        .fencing(true)
        .metrics_label(label)
        .build()
        .unwrap();
    drop(lock.lock().unwrap());
    let last = lock.lock().unwrap().fencing_token().unwrap();
    assert_eq!(
        count("redis_lock_fence_regressions_total", label, None),
        0.0
    );
    // Tokens go back only when the counter ran ahead of the server's clock (a primary whose
    // clock was ahead) and was then lost: as a restart without persistence would.
    let ahead = last + 3_600_000_000;
    let _: () = server.conn().set("lock-fence:ledger", ahead).unwrap();
    drop(lock.lock().unwrap());
    let _: () = server.conn().del("lock-fence:ledger").unwrap();
    let guard = lock.lock().unwrap();
    assert!(guard.fencing_token() < Some(ahead));
    assert_eq!(
        count("redis_lock_fence_regressions_total", label, None),
        1.0
    );
}

#[test]
fn a_fencing_token_that_went_back_is_counted_for_every_primitive() {
    let server = RedisServer::start();
    recorded();
    let label = "observe-fence-back-every";
    let mut conn = server.conn();
    for (i, p) in every_primitive(&server.client(), label, "")
        .iter()
        .enumerate()
    {
        let first = (p.take)().unwrap();
        // A counter an hour ahead of this server's clock (a primary whose clock was ahead),
        // then lost: the next token comes from the clock, below the last one.
        let ahead = first + 3_600_000_000;
        let _: () = conn.set(&p.counter, ahead).unwrap();
        let last = (p.take)().unwrap();
        assert_eq!(last, ahead + 1, "{}", p.what);
        let _: () = conn.del(&p.counter).unwrap();
        let back = (p.take)().unwrap();
        assert!(first < back && back < last, "{}: {back}", p.what);
        assert_eq!(
            count("redis_lock_fence_regressions_total", label, None),
            i as f64 + 1.0,
            "{}",
            p.what
        );
    }
}

#[test]
fn a_server_that_can_evict_is_counted_once() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-random"]);
    recorded();
    for name in ["a", "b"] {
        Lock::new(&server.client(), name)
            .unwrap()
            .try_acquire()
            .unwrap();
    }
    let recorded = recorded();
    let mut taken = recorded.taken.lock().unwrap();
    for (key, _, _, value) in recorded.snapshotter.snapshot().into_vec() {
        taken.push((key, value));
    }
    // Each snapshot takes what the gauge gained since the one before (another test's may
    // come in between): their sum is what it gained in all (no other test's server has this
    // policy).
    let gauge: f64 = taken
        .iter()
        .filter(|(key, _)| key.key().name() == "redis_lock_evicting_servers")
        .filter(|(key, _)| key.key().labels().any(|l| l.value() == "volatile-random"))
        .filter_map(|(_, value)| match value {
            DebugValue::Gauge(x) => Some(x.into_inner()),
            _ => None,
        })
        .sum();
    drop(taken);
    assert_eq!(gauge, 1.0);
}
