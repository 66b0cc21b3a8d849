//! What `run` takes and holds while its command runs: the lock (python-redis-lock's, or the
//! fair one), a permit of a semaphore, or a shared or exclusive hold of a read-write lock;
//! and what `lead` campaigns for, the leadership of an election. One shape for the waiting and
//! the watching of each.

use std::ops::Deref;
use std::time::Duration;

use redis_blpop_lock::handle;
use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::{
    CancelToken, Election, Error, Leadership, Lock, LockBuilder, RwLock, RwLockReadGuard,
    RwLockWriteGuard, Semaphore, SemaphorePermit,
};

use crate::place::Place;
use crate::queues::not_on_a_quorum;
use crate::render;
use crate::{Failure, RunArgs};

/// What `run` takes.
pub(crate) enum Target {
    /// python-redis-lock's lock.
    Lock(Lock),
    /// The fair lock: a `Lock` on the queue engine.
    FairLock(Lock),
    /// One permit of a semaphore.
    Permit(Semaphore),
    /// A read-write lock, shared.
    Read(RwLock),
    /// A read-write lock, exclusive.
    Write(RwLock),
    /// The leadership of an election (`lead`), and the info its leader publishes.
    Election(Election, String),
}

/// A hold that `run` keeps while its command runs.
pub(crate) trait Hold: Send {
    /// Whether the hold was lost (reset, or not renewed in time): a local check.
    fn lost(&self) -> bool;
    /// Gives the hold back; `Error::NotAcquired` when it was no longer ours.
    fn release(self: Box<Self>) -> Result<(), Error>;
    /// What the command is told of the hold, in its environment: its fencing token, if it
    /// has one, for the command to fence its writes with.
    fn env(&self) -> Vec<(&'static str, String)> {
        self.fencing_token()
            .map(|token| ("REDIS_LOCK_FENCE", token.to_string()))
            .into_iter()
            .collect()
    }
    /// The hold's fencing token: none for python-redis-lock's lock without `--fencing`.
    fn fencing_token(&self) -> Option<u64>;
}

/// A held lock: the handle is the hold.
struct LockHold<'a>(&'a Lock);

impl Hold for LockHold<'_> {
    fn lost(&self) -> bool {
        self.0.lost()
    }

    fn release(self: Box<Self>) -> Result<(), Error> {
        self.0.release()
    }

    fn fencing_token(&self) -> Option<u64> {
        self.0.fencing_token()
    }
}

/// A guard or permit: what it knows is its [`handle::Hold`]'s; how it gives itself back is
/// its own.
trait Guard: Deref<Target = handle::Hold> + Send {
    fn give_back(self) -> Result<(), Error>;
}

impl<G: Guard> Hold for G {
    fn lost(&self) -> bool {
        (**self).lost()
    }

    fn fencing_token(&self) -> Option<u64> {
        (**self).fencing_token()
    }

    fn release(self: Box<Self>) -> Result<(), Error> {
        (*self).give_back()
    }
}

impl Guard for SemaphorePermit<'_> {
    fn give_back(self) -> Result<(), Error> {
        self.release()
    }
}

impl Guard for RwLockReadGuard<'_> {
    fn give_back(self) -> Result<(), Error> {
        self.unlock()
    }
}

impl Guard for RwLockWriteGuard<'_> {
    fn give_back(self) -> Result<(), Error> {
        self.unlock()
    }
}

impl Hold for Leadership {
    fn lost(&self) -> bool {
        Leadership::lost(self)
    }

    fn release(self: Box<Self>) -> Result<(), Error> {
        self.resign()
    }

    /// The term, for the command to fence its writes with (also as $REDIS_LOCK_FENCE, as every
    /// other hold's token); and the info, so that the command says of itself what the
    /// election's readers are told.
    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("REDIS_LOCK_TERM", self.term().to_string()),
            ("REDIS_LOCK_FENCE", self.term().to_string()),
            ("REDIS_LOCK_INFO", self.info().to_string()),
        ]
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.term())
    }
}

/// The outcome of a try or a wait: the hold, `None` when it is busy or the time ran out.
pub(crate) type Took<'t> = Result<Option<Box<dyn Hold + 't>>, Error>;

fn boxed<'t>(hold: Option<impl Hold + 't>) -> Option<Box<dyn Hold + 't>> {
    hold.map(|hold| Box::new(hold) as Box<dyn Hold + 't>)
}

impl Target {
    /// What `run`'s options name, renewed every 2/3 of `--expire` while held; its waits end
    /// on `cancel` (a queue's waiter then leaves the line).
    pub(crate) fn new(
        place: &Place,
        args: &RunArgs,
        id: String,
        cancel: &CancelToken,
    ) -> Result<Target, Failure> {
        let name = args.name.as_str();
        let built = if let Some(permits) = args.permits {
            leased(
                Semaphore::builder(place.backend(), name, permits),
                place,
                args,
                &id,
            )
            .cancel_token(cancel.clone())
            .build()
            .map(Target::Permit)
        } else if args.read || args.write {
            let target = if args.read {
                Target::Read
            } else {
                Target::Write
            };
            leased(RwLock::builder(place.backend(), name), place, args, &id)
                .cancel_token(cancel.clone())
                .build()
                .map(target)
        } else {
            let target = if args.fair {
                Target::FairLock
            } else {
                Target::Lock
            };
            leased(place.lock(name), place, args, &id)
                .fair(args.fair)
                .fencing(args.fencing)
                .cancel_token(cancel.clone())
                .build()
                .map(target)
        };
        built.map_err(|e| place.failure(e))
    }

    /// The election `args.name`, to lead with `info`, with the run's lease; its campaigns end
    /// on `cancel` (the candidate then leaves the line).
    pub(crate) fn election(
        place: &Place,
        args: &RunArgs,
        id: String,
        cancel: &CancelToken,
        info: String,
    ) -> Result<Target, Failure> {
        not_on_a_quorum(place, Primitive::Election, &args.name)?;
        leased(
            Election::builder(place.backend(), &args.name),
            place,
            args,
            &id,
        )
        .cancel_token(cancel.clone())
        .build()
        .map(|election| Target::Election(election, info))
        .map_err(|e| place.failure(e))
    }

    /// What is taken, for redis-lock's messages: `lock "NAME"` (whatever kind of lock, as
    /// `run` has always said), or the leadership of an election.
    pub(crate) fn what(&self) -> String {
        let name = match self {
            Target::Election(election, _) => {
                return format!("the leadership of election {:?}", election.name())
            }
            Target::Lock(lock) | Target::FairLock(lock) => lock.name(),
            Target::Permit(semaphore) => semaphore.name(),
            Target::Read(rw) | Target::Write(rw) => rw.name(),
        };
        format!("lock {name:?}")
    }

    /// One try, never waiting.
    pub(crate) fn try_take(&self) -> Took<'_> {
        Ok(match self {
            Target::Lock(lock) | Target::FairLock(lock) => lock.try_acquire()?.then(|| held(lock)),
            Target::Permit(semaphore) => boxed(semaphore.try_acquire()?),
            Target::Read(rw) => boxed(rw.try_read()?),
            Target::Write(rw) => boxed(rw.try_write()?),
            Target::Election(election, info) => {
                boxed(election.try_campaign_for(info, Duration::ZERO)?)
            }
        })
    }

    /// Waits up to `timeout` (`None`: for as long as it takes).
    pub(crate) fn take(&self, timeout: Option<Duration>) -> Took<'_> {
        Ok(match (self, timeout) {
            (Target::Lock(lock) | Target::FairLock(lock), Some(timeout)) => {
                lock.acquire_timeout(timeout)?.then(|| held(lock))
            }
            (Target::Lock(lock) | Target::FairLock(lock), None) => {
                lock.acquire()?;
                Some(held(lock))
            }
            (Target::Permit(semaphore), Some(timeout)) => {
                boxed(semaphore.try_acquire_for(timeout)?)
            }
            (Target::Permit(semaphore), None) => boxed(Some(semaphore.acquire()?)),
            (Target::Read(rw), Some(timeout)) => boxed(rw.try_read_for(timeout)?),
            (Target::Read(rw), None) => boxed(Some(rw.read()?)),
            (Target::Write(rw), Some(timeout)) => boxed(rw.try_write_for(timeout)?),
            (Target::Write(rw), None) => boxed(Some(rw.write()?)),
            (Target::Election(election, info), Some(timeout)) => {
                boxed(election.try_campaign_for(info, timeout)?)
            }
            (Target::Election(election, info), None) => boxed(Some(election.campaign(info)?)),
        })
    }

    /// ", held by ..." for the user who finds it busy; nothing when that cannot be said.
    pub(crate) fn held_by(&self, place: &Place) -> String {
        let (kind, name) = match self {
            Target::Lock(lock) => {
                return match lock.holder() {
                    Ok(Some(holder)) => format!(", {}", render::describe(&holder)),
                    // Freed just now, or Redis went away: the busy answer stands either way.
                    Ok(None) | Err(_) => String::new(),
                };
            }
            Target::Election(election, _) => {
                return match election.leader() {
                    Ok(Some(leader)) => {
                        format!(", led by {:?} in term {}", leader.info, leader.term)
                    }
                    // Nobody between two terms, or Redis went away: the wait will tell.
                    Ok(None) | Err(_) => String::new(),
                };
            }
            Target::FairLock(lock) => (Primitive::FairLock, lock.name()),
            Target::Permit(semaphore) => (Primitive::Semaphore, semaphore.name()),
            Target::Read(rw) | Target::Write(rw) => (Primitive::RwLock, rw.name()),
        };
        match inspect::queue(place.backend(), kind, name, place.io_timeout()) {
            Ok(queue) => format!(
                ", {} holding, {} waiting",
                queue.holders.len(),
                queue.waiters.len()
            ),
            Err(_) => String::new(),
        }
    }
}

/// `builder` with the run's lease: `--expire`, renewed every 2/3 of it while held.
fn leased<K>(builder: LockBuilder<K>, place: &Place, args: &RunArgs, id: &str) -> LockBuilder<K> {
    builder
        .io_timeout(place.io_timeout())
        .expire(args.expire)
        .auto_renewal(true)
        .id(id)
        .refuse_evicting(args.refuse_evicting)
}

fn held(lock: &Lock) -> Box<dyn Hold + '_> {
    Box::new(LockHold(lock))
}
