//! Hostile input, generated: names and ids of any Unicode (control characters, NUL, up to
//! 64 KiB), expiries and timeouts from zero and 1 ns to `Duration::MAX`. Nothing panics or
//! overflows, the only errors are the documented ones, and the key is exactly `lock:` followed
//! by the name's bytes, holding the id's bytes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::RedisServer;

/// The largest expiry the lock accepts, in milliseconds (documented: 2^40 ms).
const MAX_MILLIS: u128 = 1 << 40;

/// Whether the lock accepts `d` as an expiry: rounded up to whole milliseconds, 1..=2^40.
fn valid(d: Duration) -> bool {
    (1..=MAX_MILLIS).contains(&d.as_nanos().div_ceil(1_000_000))
}

/// Long enough for the checks of one case to finish before the key could expire.
fn long(d: Duration) -> bool {
    d >= Duration::from_secs(30)
}

fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        4 => any::<char>(),
        1 => Just('\0'),
        2 => (0u32..0x20).prop_map(|c| char::from_u32(c).unwrap()),
        2 => prop::sample::select(vec![
            '*', '?', '[', ']', '^', ':', '\\', '"', '\'', ' ', '\u{7f}', '\u{85}', '\u{feff}',
            '\u{fffd}', '\u{10ffff}', 'é', '鎖',
        ]),
    ]
}

/// Mostly short strings (often empty), sometimes big ones up to 64 KiB.
fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::collection::vec(hostile_char(), 0..24).prop_map(String::from_iter),
        1 => prop::collection::vec(hostile_char(), 1..4096).prop_map(String::from_iter),
        1 => (hostile_char(), 1usize..=65536)
            .prop_map(|(c, bytes)| c.to_string().repeat((bytes / c.len_utf8()).max(1))),
    ]
}

/// Durations from zero to `Duration::MAX`, valid expiries (1 ns to 2^40 ms) most of the time.
fn any_duration() -> impl Strategy<Value = Duration> {
    let max_ms = 1u64 << 40;
    prop_oneof![
        1 => Just(Duration::ZERO),
        1 => Just(Duration::from_nanos(1)),
        1 => Just(Duration::MAX),
        1 => Just(Duration::from_millis(max_ms)),
        1 => Just(Duration::from_millis(max_ms) + Duration::from_nanos(1)),
        1 => Just(Duration::from_millis(max_ms + 1)),
        1 => (0u64..=u64::MAX, 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        3 => (0u64..120_000_000_000).prop_map(Duration::from_nanos),
        4 => (30u64..100_000).prop_map(Duration::from_secs),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    name: String,
    id: Option<String>,
    expire: Option<Duration>,
    auto_renewal: bool,
    fencing: bool,
    signal_expire: Duration,
    timeout: Duration,
    extend_by: Duration,
}

fn any_case() -> impl Strategy<Value = Case> {
    (
        hostile_string(),
        prop::option::of(hostile_string()),
        prop::option::of(any_duration()),
        prop::bool::weighted(0.3),
        any::<bool>(),
        // Mostly the default signal expiry, so that more cases get past the argument checks.
        prop_oneof![2 => Just(Duration::from_secs(1)), 1 => any_duration()],
        any_duration(),
        any_duration(),
    )
        .prop_map(
            |(name, id, expire, auto_renewal, fencing, signal_expire, timeout, extend_by)| Case {
                name,
                id,
                expire,
                auto_renewal,
                fencing,
                signal_expire,
                timeout,
                extend_by,
            },
        )
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

fn key(prefix: &str, name: &str) -> Vec<u8> {
    [prefix.as_bytes(), name.as_bytes()].concat()
}

/// Fails the case unless `result` is one of the `allowed` outcomes (by `Debug` of the variant).
fn expect<T: std::fmt::Debug>(
    what: &str,
    result: &Result<T, Error>,
    allowed: impl Fn(&Result<T, Error>) -> bool,
) -> Result<(), TestCaseError> {
    // Display and Debug of any error must work on any input.
    if let Err(e) = result {
        let _ = (e.to_string(), format!("{e:?}"));
    }
    prop_assert!(allowed(result), "{what}: unexpected {result:?}");
    Ok(())
}

/// Whether the builder must accept the case (the documented argument checks).
fn case_is_valid(case: &Case) -> bool {
    !(case.name.is_empty()
        || case.id.as_deref() == Some("")
        || case.expire.is_some_and(|e| !valid(e))
        || !valid(case.signal_expire)
        || (case.auto_renewal && case.expire.is_none()))
}

fn run_case(server: &RedisServer, case: &Case) -> Result<(), TestCaseError> {
    let client = server.client();
    let mut conn = server.conn();
    let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();

    let mut builder = Lock::builder(&client, case.name.clone())
        .auto_renewal(case.auto_renewal)
        .fencing(case.fencing)
        .signal_expire(case.signal_expire);
    if let Some(expire) = case.expire {
        builder = builder.expire(expire);
    }
    if let Some(id) = &case.id {
        builder = builder.id(id.clone());
    }
    let invalid = !case_is_valid(case);
    let lock = match builder.build() {
        Err(Error::InvalidArgument(message)) => {
            prop_assert!(invalid, "refused a valid case: {message}");
            return Ok(());
        }
        Err(other) => return Err(TestCaseError::fail(format!("build: {other:?}"))),
        Ok(lock) => lock,
    };
    prop_assert!(!invalid, "accepted an invalid case");
    let _ = format!("{lock:?}");
    if let Some(id) = &case.id {
        prop_assert_eq!(lock.id(), id.as_str());
    }
    prop_assert_eq!(lock.name(), case.name.as_str());
    // Whether the lock, once taken, certainly outlives this case's checks.
    let stays = case.expire.is_none_or(long);
    let lock_key = key("lock:", &case.name);
    let fence_key = key("lock-fence:", &case.name);

    prop_assert!(lock.try_acquire().unwrap(), "a free lock was busy");
    if stays {
        let held: Option<Vec<u8>> = conn.get(&lock_key).unwrap();
        prop_assert_eq!(held.as_deref(), Some(lock.id().as_bytes()));
        let mut keys: Vec<Vec<u8>> = conn.keys("*").unwrap();
        keys.sort();
        let mut expected = vec![lock_key.clone()];
        if case.fencing {
            expected.push(fence_key.clone());
        }
        expected.sort();
        prop_assert_eq!(keys, expected, "keys other than lock: and lock-fence:");
        let owner = lock.owner_id().unwrap();
        prop_assert_eq!(owner.as_deref(), Some(lock.id()));
        prop_assert!(lock.locked().unwrap());
        prop_assert!(!lock.lost());
        let pttl: i64 = conn.pttl(&lock_key).unwrap();
        match case.expire {
            None => prop_assert_eq!(pttl, -1),
            Some(e) => prop_assert!(
                pttl > 0 && pttl as u128 <= e.as_nanos().div_ceil(1_000_000),
                "pttl {}",
                pttl
            ),
        }
    }
    if case.fencing {
        let token: Option<u64> = conn.get(&fence_key).unwrap();
        prop_assert!(token.is_some_and(|t| t > 0));
        prop_assert_eq!(lock.fencing_token(), token);
    } else {
        prop_assert!(!conn.exists::<_, bool>(&fence_key).unwrap());
        prop_assert_eq!(lock.fencing_token(), None);
    }

    // Acquiring again under the same id: refused at once, whatever the timeout (unless a
    // short expiry let the lock go, when it is simply taken again).
    let again = lock.acquire_timeout(case.timeout);
    if stays {
        expect("acquire again", &again, |r| {
            matches!(r, Err(Error::AlreadyAcquired { .. }))
        })?;
    } else {
        expect("acquire again", &again, |r| {
            matches!(r, Err(Error::AlreadyAcquired { .. }) | Ok(true))
        })?;
    }

    // Another owner: a bounded wait on a busy lock, returning false (or true once it expired).
    let other = Lock::builder(&client, case.name.clone()).build().unwrap();
    let short = case.timeout.min(Duration::from_millis(50));
    let started = Instant::now();
    let theirs = other.acquire_timeout(short);
    prop_assert!(started.elapsed() < short + Duration::from_secs(10));
    if stays {
        expect("other owner", &theirs, |r| matches!(r, Ok(false)))?;
    } else {
        expect("other owner", &theirs, |r| r.is_ok())?;
        if matches!(theirs, Ok(true)) {
            other.release().unwrap();
            return Ok(());
        }
    }

    let extended = lock.extend(Some(case.extend_by));
    match (valid(case.extend_by), case.expire) {
        (false, _) => expect("extend", &extended, |r| {
            matches!(r, Err(Error::InvalidArgument(_)))
        })?,
        (true, None) => expect("extend", &extended, |r| {
            matches!(r, Err(Error::NotExpirable { .. }))
        })?,
        (true, Some(_)) if stays => expect("extend", &extended, |r| matches!(r, Ok(())))?,
        (true, Some(_)) => expect("extend", &extended, |r| {
            matches!(r, Ok(()) | Err(Error::NotAcquired { .. }))
        })?,
    }
    let stays = stays && (case.expire.is_none() || !valid(case.extend_by) || long(case.extend_by));
    let renewed = lock.extend(None);
    match case.expire {
        None => expect("extend(None)", &renewed, |r| {
            matches!(r, Err(Error::InvalidArgument(_)))
        })?,
        Some(e) if stays && long(e) => expect("extend(None)", &renewed, |r| matches!(r, Ok(())))?,
        Some(_) => expect("extend(None)", &renewed, |r| {
            matches!(r, Ok(()) | Err(Error::NotAcquired { .. }))
        })?,
    }
    let stays = stays && case.expire.is_none_or(long);

    let released = lock.release();
    if stays {
        expect("release", &released, |r| matches!(r, Ok(())))?;
    } else {
        expect("release", &released, |r| {
            matches!(r, Ok(()) | Err(Error::NotAcquired { .. }))
        })?;
    }
    prop_assert!(!lock.lost());
    prop_assert!(!conn.exists::<_, bool>(&lock_key).unwrap());
    expect("release twice", &lock.release(), |r| {
        matches!(r, Err(Error::NotAcquired { .. }))
    })?;

    // Any handle may reset the lock, whoever holds it.
    prop_assert!(other.try_acquire().unwrap());
    prop_assert!(lock.reset().unwrap());
    prop_assert!(!lock.locked().unwrap());
    prop_assert!(!lock.reset().unwrap());
    Ok(())
}

#[test]
fn hostile_names_ids_and_durations_never_panic_and_key_the_exact_bytes() {
    let server = RedisServer::start();
    // The biggest inputs, always: 64 KiB of NULs as the name, 64 KiB of control characters
    // and 4-byte characters as the id.
    let biggest = Case {
        name: "\0".repeat(65536),
        id: Some("\u{1}\n\u{10ffff}".repeat(65536 / 6)),
        expire: Some(Duration::from_millis(1 << 40)),
        auto_renewal: true,
        fencing: true,
        signal_expire: Duration::from_nanos(1),
        timeout: Duration::MAX,
        extend_by: Duration::from_secs(60),
    };
    run_case(&server, &biggest).unwrap();
    let reached = AtomicUsize::new(0);
    runner(64)
        .run(&any_case(), |case| {
            run_case(&server, &case)?;
            reached.fetch_add(usize::from(case_is_valid(&case)), Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    // Enough cases got past the argument checks to Redis for the test to mean something.
    println!(
        "{} of 64 cases got past the argument checks",
        reached.load(Ordering::Relaxed)
    );
    assert!(
        reached.load(Ordering::Relaxed) >= 8,
        "{reached:?} valid cases"
    );
}

#[test]
fn reset_all_frees_locks_with_hostile_names() {
    let server = RedisServer::start();
    let client = server.client();
    let names = prop::collection::vec(hostile_string(), 1..8);
    runner(32)
        .run(&names, |names| {
            let mut conn = server.conn();
            let _: () = redis::cmd("FLUSHALL").query(&mut conn).unwrap();
            let mut distinct: Vec<&String> = names.iter().filter(|n| !n.is_empty()).collect();
            distinct.sort();
            distinct.dedup();
            for name in &distinct {
                let lock = Lock::new(&client, name.as_str()).unwrap();
                prop_assert!(lock.try_acquire().unwrap());
            }
            prop_assert_eq!(
                redis_blpop_lock::reset_all(&client).unwrap(),
                distinct.len()
            );
            for name in &distinct {
                prop_assert!(!conn.exists::<_, bool>(key("lock:", name)).unwrap());
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn any_timeout_on_a_busy_lock_returns_in_time_or_once_the_holder_expires() {
    let server = RedisServer::start();
    let client = server.client();
    let timeouts = prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(Duration::MAX),
        (0u64..300_000_000).prop_map(Duration::from_nanos),
    ];
    let holder_expiries = (1u64..300).prop_map(Duration::from_millis);
    runner(32)
        .run(&(timeouts, holder_expiries), |(timeout, expire)| {
            let _: () = redis::cmd("FLUSHALL").query(&mut server.conn()).unwrap();
            let holder = Lock::builder(&client, "busy")
                .expire(expire)
                .build()
                .unwrap();
            let waiter = Lock::new(&client, "busy").unwrap();
            prop_assert!(holder.try_acquire().unwrap());
            let started = Instant::now();
            let got = waiter.acquire_timeout(timeout);
            let took = started.elapsed();
            expect("acquire_timeout", &got, |r| r.is_ok())?;
            // Whatever the timeout, the wait never outlasts the holder's expiry by much.
            prop_assert!(took < expire + Duration::from_secs(10), "took {:?}", took);
            if timeout > expire + Duration::from_secs(5) {
                prop_assert!(got.unwrap(), "an expired holder's lock was not taken");
            }
            let _ = waiter.release();
            Ok(())
        })
        .unwrap();
}
