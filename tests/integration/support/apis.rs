//! One behaviour suite for both APIs. [`Api`] makes each API's calls blocking calls (the
//! async API's run on a runtime the suites share), so a suite written once over `A: Api` pins
//! the blocking and the async handles alike, and [`both_apis!`] makes a test of each: the two
//! APIs cannot drift.

use std::ops::Deref;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use redis_blpop_lock::handle::{
    Election, Hold, Leadership, Lock, LockGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    Semaphore, SemaphorePermit, Watch,
};
use redis_blpop_lock::{Blocking, Error, Holder, Leader, LockBuilder, Runtime, Watched};

/// The calls of one API, each run to its end on the calling thread.
pub trait Api: Runtime + Sized {
    /// A plain lock's guard on this API.
    type Guard<'a>: Deref<Target = Hold<Self>>;

    fn lock_on(client: &redis::Client, name: &str) -> LockBuilder<Lock<Self>>;
    fn acquire_lock(lock: &Lock<Self>) -> Result<(), Error>;
    fn try_acquire_lock(lock: &Lock<Self>) -> Result<bool, Error>;
    fn acquire_timeout(lock: &Lock<Self>, timeout: Duration) -> Result<bool, Error>;
    fn release_lock(lock: &Lock<Self>) -> Result<(), Error>;
    fn extend(lock: &Lock<Self>, expire: Option<Duration>) -> Result<(), Error>;
    fn reset(lock: &Lock<Self>) -> Result<bool, Error>;
    fn holder(lock: &Lock<Self>) -> Result<Option<Holder>, Error>;
    fn locked(lock: &Lock<Self>) -> Result<bool, Error>;
    fn owner_id(lock: &Lock<Self>) -> Result<Option<String>, Error>;
    fn guard(lock: &Lock<Self>) -> Result<Self::Guard<'_>, Error>;
    fn try_guard(lock: &Lock<Self>) -> Result<Option<Self::Guard<'_>>, Error>;
    fn try_guard_for(
        lock: &Lock<Self>,
        timeout: Duration,
    ) -> Result<Option<Self::Guard<'_>>, Error>;
    fn unlock(guard: Self::Guard<'_>) -> Result<(), Error>;
    fn extend_guard(guard: &Self::Guard<'_>, expire: Option<Duration>) -> Result<(), Error>;

    fn rwlock(client: &redis::Client, name: &str) -> RwLock<Self>;
    fn read(lock: &RwLock<Self>) -> Result<RwLockReadGuard<'_, Self>, Error>;
    fn try_read(lock: &RwLock<Self>) -> Result<Option<RwLockReadGuard<'_, Self>>, Error>;
    fn try_read_for(
        lock: &RwLock<Self>,
        timeout: Duration,
    ) -> Result<Option<RwLockReadGuard<'_, Self>>, Error>;
    fn write(lock: &RwLock<Self>) -> Result<RwLockWriteGuard<'_, Self>, Error>;
    fn try_write(lock: &RwLock<Self>) -> Result<Option<RwLockWriteGuard<'_, Self>>, Error>;
    fn try_write_for(
        lock: &RwLock<Self>,
        timeout: Duration,
    ) -> Result<Option<RwLockWriteGuard<'_, Self>>, Error>;
    fn downgrade(write: RwLockWriteGuard<'_, Self>) -> Result<RwLockReadGuard<'_, Self>, Error>;
    fn unlock_read(read: RwLockReadGuard<'_, Self>) -> Result<(), Error>;

    fn semaphore(client: &redis::Client, name: &str, permits: u32) -> LockBuilder<Semaphore<Self>>;
    fn acquire(semaphore: &Semaphore<Self>) -> Result<SemaphorePermit<'_, Self>, Error>;
    fn acquire_many(
        semaphore: &Semaphore<Self>,
        n: u32,
    ) -> Result<SemaphorePermit<'_, Self>, Error>;
    fn try_acquire(semaphore: &Semaphore<Self>)
        -> Result<Option<SemaphorePermit<'_, Self>>, Error>;
    fn try_acquire_for(
        semaphore: &Semaphore<Self>,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit<'_, Self>>, Error>;
    fn try_acquire_many(
        semaphore: &Semaphore<Self>,
        n: u32,
    ) -> Result<Option<SemaphorePermit<'_, Self>>, Error>;
    fn try_acquire_many_for(
        semaphore: &Semaphore<Self>,
        n: u32,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit<'_, Self>>, Error>;
    fn available(semaphore: &Semaphore<Self>) -> Result<u32, Error>;
    fn release(permit: SemaphorePermit<'_, Self>) -> Result<(), Error>;

    fn election(client: &redis::Client, name: &str) -> LockBuilder<Election<Self>>;
    fn campaign(election: &Election<Self>, info: &str) -> Result<Leadership<Self>, Error>;
    fn try_campaign_for(
        election: &Election<Self>,
        info: &str,
        timeout: Duration,
    ) -> Result<Option<Leadership<Self>>, Error>;
    fn leader(election: &Election<Self>) -> Result<Option<Leader>, Error>;
    fn resign(leadership: Leadership<Self>) -> Result<(), Error>;
    fn watch(election: &Election<Self>) -> Result<Watch<Self>, Error>;
    /// The watch's next change, or `None` when none came within `timeout`.
    fn changed_for(watch: &mut Watch<Self>, timeout: Duration) -> Option<Watched>;
}

impl Api for Blocking {
    type Guard<'a> = LockGuard<'a>;

    fn lock_on(client: &redis::Client, name: &str) -> LockBuilder<Lock<Self>> {
        redis_blpop_lock::Lock::builder(client, name)
    }
    fn acquire_lock(lock: &Lock<Self>) -> Result<(), Error> {
        lock.acquire()
    }
    fn try_acquire_lock(lock: &Lock<Self>) -> Result<bool, Error> {
        lock.try_acquire()
    }
    fn acquire_timeout(lock: &Lock<Self>, timeout: Duration) -> Result<bool, Error> {
        lock.acquire_timeout(timeout)
    }
    fn release_lock(lock: &Lock<Self>) -> Result<(), Error> {
        lock.release()
    }
    fn extend(lock: &Lock<Self>, expire: Option<Duration>) -> Result<(), Error> {
        lock.extend(expire)
    }
    fn reset(lock: &Lock<Self>) -> Result<bool, Error> {
        lock.reset()
    }
    fn holder(lock: &Lock<Self>) -> Result<Option<Holder>, Error> {
        lock.holder()
    }
    fn locked(lock: &Lock<Self>) -> Result<bool, Error> {
        lock.locked()
    }
    fn owner_id(lock: &Lock<Self>) -> Result<Option<String>, Error> {
        lock.owner_id()
    }
    fn guard(lock: &Lock<Self>) -> Result<LockGuard<'_>, Error> {
        lock.lock()
    }
    fn try_guard(lock: &Lock<Self>) -> Result<Option<LockGuard<'_>>, Error> {
        lock.try_lock()
    }
    fn try_guard_for(lock: &Lock<Self>, timeout: Duration) -> Result<Option<LockGuard<'_>>, Error> {
        lock.try_lock_for(timeout)
    }
    fn unlock(guard: LockGuard<'_>) -> Result<(), Error> {
        guard.unlock()
    }
    fn extend_guard(guard: &LockGuard<'_>, expire: Option<Duration>) -> Result<(), Error> {
        guard.extend(expire)
    }

    fn rwlock(client: &redis::Client, name: &str) -> RwLock<Self> {
        redis_blpop_lock::RwLock::new(client, name).unwrap()
    }
    fn read(lock: &RwLock<Self>) -> Result<RwLockReadGuard<'_, Self>, Error> {
        lock.read()
    }
    fn try_read(lock: &RwLock<Self>) -> Result<Option<RwLockReadGuard<'_, Self>>, Error> {
        lock.try_read()
    }
    fn try_read_for(
        lock: &RwLock<Self>,
        timeout: Duration,
    ) -> Result<Option<RwLockReadGuard<'_, Self>>, Error> {
        lock.try_read_for(timeout)
    }
    fn write(lock: &RwLock<Self>) -> Result<RwLockWriteGuard<'_, Self>, Error> {
        lock.write()
    }
    fn try_write(lock: &RwLock<Self>) -> Result<Option<RwLockWriteGuard<'_, Self>>, Error> {
        lock.try_write()
    }
    fn try_write_for(
        lock: &RwLock<Self>,
        timeout: Duration,
    ) -> Result<Option<RwLockWriteGuard<'_, Self>>, Error> {
        lock.try_write_for(timeout)
    }
    fn downgrade(write: RwLockWriteGuard<'_, Self>) -> Result<RwLockReadGuard<'_, Self>, Error> {
        write.downgrade()
    }
    fn unlock_read(read: RwLockReadGuard<'_, Self>) -> Result<(), Error> {
        read.unlock()
    }

    fn semaphore(client: &redis::Client, name: &str, permits: u32) -> LockBuilder<Semaphore<Self>> {
        redis_blpop_lock::Semaphore::builder(client, name, permits)
    }
    fn acquire(semaphore: &Semaphore<Self>) -> Result<SemaphorePermit<'_, Self>, Error> {
        semaphore.acquire()
    }
    fn acquire_many(
        semaphore: &Semaphore<Self>,
        n: u32,
    ) -> Result<SemaphorePermit<'_, Self>, Error> {
        semaphore.acquire_many(n)
    }
    fn try_acquire(
        semaphore: &Semaphore<Self>,
    ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
        semaphore.try_acquire()
    }
    fn try_acquire_for(
        semaphore: &Semaphore<Self>,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
        semaphore.try_acquire_for(timeout)
    }
    fn try_acquire_many(
        semaphore: &Semaphore<Self>,
        n: u32,
    ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
        semaphore.try_acquire_many(n)
    }
    fn try_acquire_many_for(
        semaphore: &Semaphore<Self>,
        n: u32,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
        semaphore.try_acquire_many_for(n, timeout)
    }
    fn available(semaphore: &Semaphore<Self>) -> Result<u32, Error> {
        semaphore.available()
    }
    fn release(permit: SemaphorePermit<'_, Self>) -> Result<(), Error> {
        permit.release()
    }

    fn election(client: &redis::Client, name: &str) -> LockBuilder<Election<Self>> {
        redis_blpop_lock::Election::builder(client, name)
    }
    fn campaign(election: &Election<Self>, info: &str) -> Result<Leadership<Self>, Error> {
        election.campaign(info)
    }
    fn try_campaign_for(
        election: &Election<Self>,
        info: &str,
        timeout: Duration,
    ) -> Result<Option<Leadership<Self>>, Error> {
        election.try_campaign_for(info, timeout)
    }
    fn leader(election: &Election<Self>) -> Result<Option<Leader>, Error> {
        election.leader()
    }
    fn resign(leadership: Leadership<Self>) -> Result<(), Error> {
        leadership.resign()
    }
    fn watch(election: &Election<Self>) -> Result<Watch<Self>, Error> {
        election.watch()
    }
    fn changed_for(watch: &mut Watch<Self>, timeout: Duration) -> Option<Watched> {
        watch.changed_for(timeout)
    }
}

#[cfg(feature = "tokio")]
mod on_tokio {
    use std::future::Future;
    use std::sync::OnceLock;
    use std::time::Duration;

    use redis_blpop_lock::aio::Tokio;
    use redis_blpop_lock::handle::{
        Election, Leadership, Lock, OwnedLockGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
        Semaphore, SemaphorePermit, Watch,
    };
    use redis_blpop_lock::{Error, Holder, Leader, LockBuilder, Watched};

    use super::Api;

    /// Runs `future` on the calling thread, on the runtime the suites share (whose workers run
    /// the renewals and the releases of dropped guards).
    fn run<F: Future>(future: F) -> F::Output {
        static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
        let runtime = RUNTIME.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap()
        });
        runtime.block_on(future)
    }

    impl Api for Tokio {
        type Guard<'a> = OwnedLockGuard;

        fn lock_on(client: &redis::Client, name: &str) -> LockBuilder<Lock<Self>> {
            redis_blpop_lock::aio::Lock::builder(client, name)
        }
        fn acquire_lock(lock: &Lock<Self>) -> Result<(), Error> {
            run(lock.acquire())
        }
        fn try_acquire_lock(lock: &Lock<Self>) -> Result<bool, Error> {
            run(lock.try_acquire())
        }
        fn acquire_timeout(lock: &Lock<Self>, timeout: Duration) -> Result<bool, Error> {
            run(lock.acquire_timeout(timeout))
        }
        fn release_lock(lock: &Lock<Self>) -> Result<(), Error> {
            run(lock.release())
        }
        fn extend(lock: &Lock<Self>, expire: Option<Duration>) -> Result<(), Error> {
            run(lock.extend(expire))
        }
        fn reset(lock: &Lock<Self>) -> Result<bool, Error> {
            run(lock.reset())
        }
        fn holder(lock: &Lock<Self>) -> Result<Option<Holder>, Error> {
            run(lock.holder())
        }
        fn locked(lock: &Lock<Self>) -> Result<bool, Error> {
            run(lock.locked())
        }
        fn owner_id(lock: &Lock<Self>) -> Result<Option<String>, Error> {
            run(lock.owner_id())
        }
        fn guard(lock: &Lock<Self>) -> Result<OwnedLockGuard, Error> {
            run(lock.lock())
        }
        fn try_guard(lock: &Lock<Self>) -> Result<Option<OwnedLockGuard>, Error> {
            run(lock.try_lock())
        }
        fn try_guard_for(
            lock: &Lock<Self>,
            timeout: Duration,
        ) -> Result<Option<OwnedLockGuard>, Error> {
            run(lock.try_lock_for(timeout))
        }
        fn unlock(guard: OwnedLockGuard) -> Result<(), Error> {
            run(guard.unlock())
        }
        fn extend_guard(guard: &OwnedLockGuard, expire: Option<Duration>) -> Result<(), Error> {
            run(guard.extend(expire))
        }

        fn rwlock(client: &redis::Client, name: &str) -> RwLock<Self> {
            redis_blpop_lock::aio::RwLock::new(client, name).unwrap()
        }
        fn read(lock: &RwLock<Self>) -> Result<RwLockReadGuard<'_, Self>, Error> {
            run(lock.read())
        }
        fn try_read(lock: &RwLock<Self>) -> Result<Option<RwLockReadGuard<'_, Self>>, Error> {
            run(lock.try_read())
        }
        fn try_read_for(
            lock: &RwLock<Self>,
            timeout: Duration,
        ) -> Result<Option<RwLockReadGuard<'_, Self>>, Error> {
            run(lock.try_read_for(timeout))
        }
        fn write(lock: &RwLock<Self>) -> Result<RwLockWriteGuard<'_, Self>, Error> {
            run(lock.write())
        }
        fn try_write(lock: &RwLock<Self>) -> Result<Option<RwLockWriteGuard<'_, Self>>, Error> {
            run(lock.try_write())
        }
        fn try_write_for(
            lock: &RwLock<Self>,
            timeout: Duration,
        ) -> Result<Option<RwLockWriteGuard<'_, Self>>, Error> {
            run(lock.try_write_for(timeout))
        }
        fn downgrade(
            write: RwLockWriteGuard<'_, Self>,
        ) -> Result<RwLockReadGuard<'_, Self>, Error> {
            run(write.downgrade())
        }
        fn unlock_read(read: RwLockReadGuard<'_, Self>) -> Result<(), Error> {
            run(read.unlock())
        }

        fn semaphore(
            client: &redis::Client,
            name: &str,
            permits: u32,
        ) -> LockBuilder<Semaphore<Self>> {
            redis_blpop_lock::aio::Semaphore::builder(client, name, permits)
        }
        fn acquire(semaphore: &Semaphore<Self>) -> Result<SemaphorePermit<'_, Self>, Error> {
            run(semaphore.acquire())
        }
        fn acquire_many(
            semaphore: &Semaphore<Self>,
            n: u32,
        ) -> Result<SemaphorePermit<'_, Self>, Error> {
            run(semaphore.acquire_many(n))
        }
        fn try_acquire(
            semaphore: &Semaphore<Self>,
        ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
            run(semaphore.try_acquire())
        }
        fn try_acquire_for(
            semaphore: &Semaphore<Self>,
            timeout: Duration,
        ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
            run(semaphore.try_acquire_for(timeout))
        }
        fn try_acquire_many(
            semaphore: &Semaphore<Self>,
            n: u32,
        ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
            run(semaphore.try_acquire_many(n))
        }
        fn try_acquire_many_for(
            semaphore: &Semaphore<Self>,
            n: u32,
            timeout: Duration,
        ) -> Result<Option<SemaphorePermit<'_, Self>>, Error> {
            run(semaphore.try_acquire_many_for(n, timeout))
        }
        fn available(semaphore: &Semaphore<Self>) -> Result<u32, Error> {
            run(semaphore.available())
        }
        fn release(permit: SemaphorePermit<'_, Self>) -> Result<(), Error> {
            run(permit.release())
        }

        fn election(client: &redis::Client, name: &str) -> LockBuilder<Election<Self>> {
            redis_blpop_lock::aio::Election::builder(client, name)
        }
        fn campaign(election: &Election<Self>, info: &str) -> Result<Leadership<Self>, Error> {
            run(election.campaign(info))
        }
        fn try_campaign_for(
            election: &Election<Self>,
            info: &str,
            timeout: Duration,
        ) -> Result<Option<Leadership<Self>>, Error> {
            run(election.try_campaign_for(info, timeout))
        }
        fn leader(election: &Election<Self>) -> Result<Option<Leader>, Error> {
            run(election.leader())
        }
        fn resign(leadership: Leadership<Self>) -> Result<(), Error> {
            run(leadership.resign())
        }
        fn watch(election: &Election<Self>) -> Result<Watch<Self>, Error> {
            run(election.watch())
        }
        fn changed_for(watch: &mut Watch<Self>, timeout: Duration) -> Option<Watched> {
            // A watch's `changed` is cancel-safe: dropped at its time, it loses no change.
            run(async { tokio::time::timeout(timeout, watch.changed()).await.ok() })
        }
    }
}

/// A thread waiting up to a minute for `lock` on API `A`, returned once it has blocked at
/// `server` (one more client blocked there than before).
pub fn blocked_waiter<A: Api>(
    server: &super::RedisServer,
    lock: Lock<A>,
) -> JoinHandle<Result<bool, Error>> {
    let before = server.blocked_clients();
    let waiter = thread::spawn(move || A::acquire_timeout(&lock, Duration::from_secs(60)));
    server.until_blocked(before + 1, Duration::from_secs(20), || waiter.is_finished());
    waiter
}

/// A test of each API for each suite function named, generic over `A: Api`: `blocking::name`
/// and, with the `tokio` feature, `aio::name`.
macro_rules! both_apis {
    ($($test:ident),* $(,)?) => {
        mod blocking {
            $(
                #[test]
                fn $test() {
                    super::$test::<redis_blpop_lock::Blocking>();
                }
            )*
        }

        #[cfg(feature = "tokio")]
        mod aio {
            $(
                #[test]
                fn $test() {
                    super::$test::<redis_blpop_lock::aio::Tokio>();
                }
            )*
        }
    };
}

pub(crate) use both_apis;
