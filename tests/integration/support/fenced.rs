//! Every primitive that hands out a fencing token, as a way to take one: the fencing tests'
//! (`fencing.rs`, `observe.rs`, and the failovers of the slow group).

use redis_blpop_lock::{Backend, Election, Error, Lock, RwLock, Semaphore};

/// A primitive's name here, how to take one token (held, then given back) and its counter.
pub struct Fenced {
    pub what: &'static str,
    pub take: Box<dyn Fn() -> Result<u64, Error>>,
    pub counter: &'static str,
}

/// Every primitive with a fencing token, on `backend`, with metrics label `label`.
pub fn every_primitive<B: Backend + ?Sized>(backend: &B, label: &'static str) -> Vec<Fenced> {
    let plain = (Lock::builder(backend, "plain").fencing(true))
        .metrics_label(label)
        .build()
        .unwrap();
    let fair = (Lock::builder(backend, "fair").fair(true))
        .metrics_label(label)
        .build()
        .unwrap();
    let semaphore = (Semaphore::builder(backend, "permits", 2))
        .metrics_label(label)
        .build()
        .unwrap();
    // A handle for each guard: a handle reports a token below one any of its guards had.
    let [reading, writing] = [(); 2].map(|()| {
        (RwLock::builder(backend, "rw"))
            .metrics_label(label)
            .build()
            .unwrap()
    });
    let election = (Election::builder(backend, "leader"))
        .metrics_label(label)
        .build()
        .unwrap();
    vec![
        Fenced {
            what: "plain lock",
            take: Box::new(move || Ok(plain.lock()?.fencing_token().unwrap())),
            counter: "lock-fence:plain",
        },
        Fenced {
            what: "fair lock",
            take: Box::new(move || Ok(fair.lock()?.fencing_token().unwrap())),
            counter: "fair-lock:{fair}:fence",
        },
        Fenced {
            what: "permit",
            take: Box::new(move || Ok(semaphore.acquire()?.fencing_token().unwrap())),
            counter: "semaphore:{permits}:fence",
        },
        Fenced {
            what: "read guard",
            take: Box::new(move || Ok(reading.read()?.fencing_token().unwrap())),
            counter: "rwlock:{rw}:fence",
        },
        Fenced {
            what: "write guard",
            take: Box::new(move || Ok(writing.write()?.fencing_token().unwrap())),
            counter: "rwlock:{rw}:fence",
        },
        Fenced {
            what: "election term",
            take: Box::new(move || Ok(election.campaign("here")?.term())),
            counter: "election:{leader}:fence",
        },
    ]
}
