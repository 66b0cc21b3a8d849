//! The `distributed-lock` peer (the `distributed-lock-redis` crate, 0.2: async on tokio and
//! fred) in the `semaphore` and `rwlock` cells (feature `bench-distributed-lock`); see the top
//! of `bench.rs`.

use std::sync::Arc;
use std::time::Duration;

use distributed_lock_core::error::LockError;
use distributed_lock_core::traits::{
    DistributedReaderWriterLock, DistributedSemaphore, LockHandle, ReaderWriterLockProvider,
    SemaphoreProvider,
};
use distributed_lock_redis::RedisLockProvider;

use super::async_cells::{async_pinger, join_tasks, runtime};
use super::queue_cells::Occupancy;
use super::{measure, Place, ThreadStats, Turns};

/// Its `acquire_read` does not wait: it fails at once while a writer holds or waits, so a
/// reader that needs the lock tries again, with the back-off the crate's own semaphore uses.
const READ_RETRY_FIRST: Duration = Duration::from_millis(10);
const READ_RETRY_MOST: Duration = Duration::from_millis(200);

/// A provider of its own for each contender (a connection of its own, as separate services
/// would have), with the crate's defaults: 30 s expiry, extended every 10 s.
async fn provider(url: String) -> Result<RedisLockProvider, String> {
    RedisLockProvider::new(url).await.map_err(|e| e.to_string())
}

/// `contenders` tasks on one semaphore of `permits`: `acquire(None)` (its loop: a try, then
/// a sleep of 10 ms doubling up to 200 ms) → hold → `release()`.
pub fn semaphore_tasks(
    place: &Place,
    name: &str,
    (permits, contenders): (u32, usize),
    turns: &Turns,
    occupancy: &Arc<Occupancy>,
) -> Result<Vec<ThreadStats>, String> {
    let url = place.node_for(name)?;
    let tasks = (0..contenders)
        .map(|_| {
            let (turns, pinger) = (turns.clone(), Some(async_pinger(place, name)?));
            let (url, name, occupancy) = (url.clone(), name.to_string(), Arc::clone(occupancy));
            Ok(runtime().spawn(async move {
                let semaphore = Arc::new(provider(url).await?.create_semaphore(&name, permits));
                measure(
                    turns,
                    pinger,
                    || {
                        let (semaphore, occupancy) =
                            (Arc::clone(&semaphore), Arc::clone(&occupancy));
                        async move {
                            let permit =
                                semaphore.acquire(None).await.map_err(|e| e.to_string())?;
                            occupancy.enter_shared();
                            Ok(permit)
                        }
                    },
                    |permit: distributed_lock_redis::RedisSemaphoreHandle| {
                        occupancy.leave_shared();
                        async move { permit.release().await.map_err(|e| e.to_string()) }
                    },
                )
                .await
            }))
        })
        .collect::<Result<Vec<_>, String>>()?;
    join_tasks(tasks)
}

/// `readers` + `writers` tasks on one read-write lock: `acquire_read(None)` (retried, see
/// [`READ_RETRY_FIRST`]) or `acquire_write(None)` (its loop: a try, then a sleep of 50 ms
/// doubling up to 1 s) → hold → `release()`. The readers' stats, then the writers'.
pub fn rwlock_tasks(
    place: &Place,
    name: &str,
    (readers, writers): (usize, usize),
    turns: &Turns,
    occupancy: &Arc<Occupancy>,
) -> Result<(Vec<ThreadStats>, Vec<ThreadStats>), String> {
    let url = place.node_for(name)?;
    let spawn = |write: bool| {
        let (turns, pinger) = (turns.clone(), Some(async_pinger(place, name)?));
        let (url, name, occupancy) = (url.clone(), name.to_string(), Arc::clone(occupancy));
        Ok::<_, String>(runtime().spawn(async move {
            let lock = Arc::new(provider(url).await?.create_reader_writer_lock(&name));
            if write {
                measure(
                    turns,
                    pinger,
                    || {
                        let (lock, occupancy) = (Arc::clone(&lock), Arc::clone(&occupancy));
                        async move {
                            let held = lock.acquire_write(None).await.map_err(|e| e.to_string())?;
                            occupancy.enter_exclusive();
                            Ok(held)
                        }
                    },
                    |held: distributed_lock_redis::RedisWriteLockHandle| {
                        occupancy.leave_exclusive();
                        async move { held.release().await.map_err(|e| e.to_string()) }
                    },
                )
                .await
            } else {
                measure(
                    turns,
                    pinger,
                    || {
                        let (lock, occupancy) = (Arc::clone(&lock), Arc::clone(&occupancy));
                        async move {
                            let held = read(&lock).await?;
                            occupancy.enter_shared();
                            Ok(held)
                        }
                    },
                    |held: distributed_lock_redis::RedisReadLockHandle| {
                        occupancy.leave_shared();
                        async move { held.release().await.map_err(|e| e.to_string()) }
                    },
                )
                .await
            }
        }))
    };
    let reading = (0..readers)
        .map(|_| spawn(false))
        .collect::<Result<Vec<_>, _>>()?;
    let writing = (0..writers)
        .map(|_| spawn(true))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((join_tasks(reading)?, join_tasks(writing)?))
}

/// A read hold, trying again while `acquire_read` refuses (it says `Timeout` at once).
async fn read(
    lock: &distributed_lock_redis::RedisDistributedReaderWriterLock,
) -> Result<distributed_lock_redis::RedisReadLockHandle, String> {
    let mut pause = READ_RETRY_FIRST;
    loop {
        match lock.acquire_read(None).await {
            Err(LockError::Timeout(_)) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(READ_RETRY_MOST);
            }
            held => return held.map_err(|e| e.to_string()),
        }
    }
}
