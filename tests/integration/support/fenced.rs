//! Every primitive that hands out a fencing token, as a way to take one: the fencing tests'
//! (`fencing.rs`, `observe.rs`, and the failovers of the slow group).

use std::time::Duration;

use redis_blpop_lock::{Backend, Election, Error, Lock, RwLock, Semaphore};

/// The queue primitives' expiry.
const EXPIRE: Duration = Duration::from_secs(2);

/// A primitive's name here, how to take one token (held, then given back) and its counter.
pub struct Fenced {
    pub what: &'static str,
    pub take: Box<dyn Fn() -> Result<u64, Error>>,
    pub counter: String,
}

/// Every primitive with a fencing token, on `backend`, with metrics label `label`; `tag` (a
/// hash tag such as `{f}`, or "") starts their names, so that on a cluster all of them can
/// live in one slot.
pub fn every_primitive<B: Backend + ?Sized>(
    backend: &B,
    label: &'static str,
    tag: &str,
) -> Vec<Fenced> {
    let name = |name: &str| format!("{tag}{name}");
    // A queue primitive's keys: `<kind>:{NAME}:*`, or `<kind>:=NAME:*` for a NAME with a tag.
    let counter = |kind: &str, name: &str| match tag {
        "" => format!("{kind}:{{{name}}}:fence"),
        _ => format!("{kind}:={tag}{name}:fence"),
    };
    let plain = (Lock::builder(backend, name("plain")).fencing(true))
        .metrics_label(label)
        .build()
        .unwrap();
    // The queue primitives' expiry is short: after a failover, what a handle takes is held
    // back for one expiry (`after_failover`).
    let fair = (Lock::builder(backend, name("fair")).fair(true))
        .expire(EXPIRE)
        .metrics_label(label)
        .build()
        .unwrap();
    let semaphore = (Semaphore::builder(backend, name("permits"), 2))
        .expire(EXPIRE)
        .metrics_label(label)
        .build()
        .unwrap();
    // A handle for each guard: a handle reports a token below one any of its guards had.
    let [reading, writing] = [(); 2].map(|()| {
        (RwLock::builder(backend, name("rw")))
            .expire(EXPIRE)
            .metrics_label(label)
            .build()
            .unwrap()
    });
    let election = (Election::builder(backend, name("leader")))
        .expire(EXPIRE)
        .metrics_label(label)
        .build()
        .unwrap();
    vec![
        Fenced {
            what: "plain lock",
            take: Box::new(move || Ok(plain.lock()?.fencing_token().unwrap())),
            counter: format!("lock-fence:{}", name("plain")),
        },
        Fenced {
            what: "fair lock",
            take: Box::new(move || Ok(fair.lock()?.fencing_token().unwrap())),
            counter: counter("fair-lock", "fair"),
        },
        Fenced {
            what: "permit",
            take: Box::new(move || Ok(semaphore.acquire()?.fencing_token().unwrap())),
            counter: counter("semaphore", "permits"),
        },
        Fenced {
            what: "read guard",
            take: Box::new(move || Ok(reading.read()?.fencing_token().unwrap())),
            counter: counter("rwlock", "rw"),
        },
        Fenced {
            what: "write guard",
            take: Box::new(move || Ok(writing.write()?.fencing_token().unwrap())),
            counter: counter("rwlock", "rw"),
        },
        Fenced {
            what: "election term",
            take: Box::new(move || Ok(election.campaign("here")?.term())),
            counter: counter("election", "leader"),
        },
    ]
}
