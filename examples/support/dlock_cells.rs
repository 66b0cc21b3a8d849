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
use distributed_lock_redis::{
    RedisDistributedReaderWriterLock, RedisLockProvider, RedisReadLockHandle, RedisSemaphoreHandle,
    RedisWriteLockHandle,
};

use super::async_cells::{async_pinger, join_tasks, run_contenders, runtime};
use super::queue_cells::{by_role, measure_held, Occupancy};
use super::{Place, ThreadStats, Turns};

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
    run_contenders(contenders, || {
        let (turns, pinger) = (turns.clone(), Some(async_pinger(place, name)?));
        let (url, name, occupancy) = (url.clone(), name.to_string(), Arc::clone(occupancy));
        Ok(async move {
            let semaphore = &provider(url).await?.create_semaphore(&name, permits);
            measure_held(
                turns,
                pinger,
                (&occupancy, false),
                || async move { semaphore.acquire(None).await.map_err(|e| e.to_string()) },
                |permit: RedisSemaphoreHandle| async move {
                    permit.release().await.map_err(|e| e.to_string())
                },
            )
            .await
        })
    })
}

/// `readers` + `writers` tasks on one read-write lock: `acquire_read(None)` (retried, see
/// [`READ_RETRY_FIRST`]) or `acquire_write(None)` (its loop: a try, then a sleep of 50 ms
/// doubling up to 1 s) → hold → `release()`. The readers' stats, then the writers'.
pub fn rwlock_tasks(
    place: &Place,
    name: &str,
    roles: (usize, usize),
    turns: &Turns,
    occupancy: &Arc<Occupancy>,
) -> Result<(Vec<ThreadStats>, Vec<ThreadStats>), String> {
    let url = place.node_for(name)?;
    let spawn = |write: bool| {
        let (turns, pinger) = (turns.clone(), Some(async_pinger(place, name)?));
        let (url, name, occupancy) = (url.clone(), name.to_string(), Arc::clone(occupancy));
        Ok(runtime().spawn(async move {
            let lock = &provider(url).await?.create_reader_writer_lock(&name);
            let counted = (&*occupancy, write);
            if write {
                measure_held(
                    turns,
                    pinger,
                    counted,
                    || async move { lock.acquire_write(None).await.map_err(|e| e.to_string()) },
                    |held: RedisWriteLockHandle| async move {
                        held.release().await.map_err(|e| e.to_string())
                    },
                )
                .await
            } else {
                measure_held(
                    turns,
                    pinger,
                    counted,
                    || read(lock),
                    |held: RedisReadLockHandle| async move {
                        held.release().await.map_err(|e| e.to_string())
                    },
                )
                .await
            }
        }))
    };
    by_role(roles, spawn, join_tasks)
}

/// A read hold, trying again while `acquire_read` refuses (it says `Timeout` at once).
async fn read(lock: &RedisDistributedReaderWriterLock) -> Result<RedisReadLockHandle, String> {
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
