//! The [`RwLock`](crate::RwLock) shell, for both APIs: a reader takes one unit of the queue
//! engine's [`Acquirer`](crate::driver::acquirer::Acquirer), a writer all of them.

use std::collections::HashMap;
use std::thread::{self, ThreadId};

use parking_lot::Mutex;

/// Who holds a read lock: a task, or, outside any task, a thread.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reader {
    #[cfg(feature = "tokio")]
    Task(tokio::task::Id),
    Thread(ThreadId),
}

impl Reader {
    pub(crate) fn current() -> Reader {
        #[cfg(feature = "tokio")]
        if let Some(task) = tokio::task::try_id() {
            return Reader::Task(task);
        }
        Reader::Thread(thread::current().id())
    }
}

/// How many read locks each reader holds through one handle: a write lock one of them waited
/// for would wait for itself. (A read guard sent elsewhere still counts for the one that took
/// it.)
#[derive(Default)]
pub(crate) struct Readers(Mutex<HashMap<Reader, usize>>);

impl Readers {
    /// Whether the current reader holds a read lock of the handle.
    pub(crate) fn reading_here(&self) -> bool {
        self.0.lock().contains_key(&Reader::current())
    }

    /// A read lock of `reader`, counted while the result lives.
    pub(crate) fn enter(&self, reader: Reader) -> Reading<'_> {
        *self.0.lock().entry(reader).or_default() += 1;
        Reading {
            readers: self,
            reader,
        }
    }
}

/// A read lock counted as its reader's while it lives.
pub(crate) struct Reading<'a> {
    readers: &'a Readers,
    reader: Reader,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut readers = self.readers.0.lock();
        if let Some(count) = readers.get_mut(&self.reader) {
            *count -= 1;
            if *count == 0 {
                readers.remove(&self.reader);
            }
        }
    }
}

/// The read-write lock's types and methods on one API (see [`for_api`]).
macro_rules! rwlock {
    (
        rt = $rt:ty,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
        prefix = $prefix:literal,
    ) => {
        mod rwlock_api {
            use std::time::{Duration, Instant};

            use $crate::{Backend, CancelToken, Error, LockBuilder};
            use $crate::driver::acquirer::{Acquirer, Acquisition};
            use $crate::protocol::lease::Wait;
            use $crate::protocol::primitive::{Primitive, WRITER_UNITS};
            use $crate::shell::ended;
            use $crate::shell::rwlock::{Reader, Readers, Reading};
            use $crate::shell::$run;

            /// A read-write lock shared by every handle of the same name, on the fair queue
            /// engine (see the crate docs' "Read-write lock" section for its keys and scripts):
            /// many readers or one writer, served in the order they asked, so a waiting writer is
            /// never starved by a stream of readers. The blocking and the async handles of one
            /// name are the same lock.
            ///
            /// A reader holds one share of a million and a writer all of them, in one queue
            /// served in order: readers that come while a writer waits queue behind it. Each hold
            /// is a lease of its own (30 s by default, renewed while held), so a reader's renewal
            /// renews only its own entry, and a crashed holder's hold comes back at its expiry. An
            /// async wait dropped at an `.await` leaves the queue, giving back a hold that came
            /// meanwhile; an async guard dropped unreleased is given back from a task (or, as the
            /// runtime ends, from the dropping thread).
            ///
            /// ```no_run
            #[doc = $head]
            /// let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
            #[doc = concat!("let read = config.read()", $aw, "?;")]
            /// // ... many read at once ...
            #[doc = concat!("read.unlock()", $aw, "?;")]
            #[doc = concat!("let write = config.write()", $aw, "?;")]
            /// // ... one writes, nobody reads ...
            #[doc = concat!("write.unlock()", $aw, "?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub struct RwLock {
                acquirer: Acquirer<$rt>,
                readers: Readers,
            }

            /// A read lock held: given back by [`unlock`](Self::unlock), or when dropped.
            #[must_use = "the read lock is released as soon as the guard is dropped"]
            pub struct RwLockReadGuard<'a> {
                pub(super) held: Acquisition<$rt>,
                _reading: Reading<'a>,
            }

            /// The write lock held: given back by [`unlock`](Self::unlock), or when dropped.
            #[must_use = "the write lock is released as soon as the guard is dropped"]
            pub struct RwLockWriteGuard<'a> {
                lock: &'a RwLock,
                pub(super) held: Acquisition<$rt>,
            }

            impl RwLock {
                /// A handle on the read-write lock `name`, with the default settings. Refused on
                /// a [`Quorum`](crate::Quorum) ([`Error::Unsupported`]).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub fn new(
                    backend: &(impl Backend + ?Sized),
                    name: impl Into<String>,
                ) -> Result<RwLock, Error> {
                    RwLock::builder(backend, name).build()
                }

                /// A builder for a read-write lock handle: expiry, renewal, heartbeat, I/O
                /// timeout, id, cancel token.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let config = ", $path, "RwLock::builder(&client, \"config\")")]
                ///     .expire(Duration::from_secs(10))
                ///     .build()?;
                /// # Ok(())
                /// # }
                /// ```
                pub fn builder<B: Backend + ?Sized>(
                    backend: &B,
                    name: impl Into<String>,
                ) -> LockBuilder<RwLock> {
                    LockBuilder::new(backend, name.into()).on_queue_engine()
                }

                /// The lock's name (its keys are `rwlock:{<name>}:*`, or `rwlock:=<name>:*` for a
                /// name with a hash tag of its own).
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                /// assert_eq!(config.name(), "config");
                /// # Ok(())
                /// # }
                /// ```
                pub fn name(&self) -> &str {
                    &self.acquirer.settings.name
                }

                /// Waits until a read lock is ours: at once when only readers hold it and no
                /// writer waits.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("let read = config.read()", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn read(&self) -> Result<RwLockReadGuard<'_>, Error> {
                    $run!(self.reading(Wait::Forever))?.ok_or_else(ended)
                }

                /// A read lock if no writer holds the lock or waits for it.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("if let Some(read) = config.try_read()", $aw, "? {")]
                #[doc = concat!("    read.unlock()", $aw, "?;")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_read(
                    &self,
                ) -> Result<Option<RwLockReadGuard<'_>>, Error> {
                    $run!(self.reading(Wait::Never))
                }

                /// Waits up to `timeout` for a read lock.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("let read = config.try_read_for(Duration::from_secs(1))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_read_for(
                    &self,
                    timeout: Duration,
                ) -> Result<Option<RwLockReadGuard<'_>>, Error> {
                    $run!(self.reading(Wait::timeout(Instant::now(), timeout)))
                }

                /// Waits until `deadline` at the latest for a read lock.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::{Duration, Instant};
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("let read = config.try_read_until(Instant::now() + Duration::from_secs(1))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_read_until(
                    &self,
                    deadline: Instant,
                ) -> Result<Option<RwLockReadGuard<'_>>, Error> {
                    $run!(self.reading(Wait::Until(deadline)))
                }

                /// Waits until the write lock is ours. Refused with [`Error::WouldDeadlock`] when
                /// this thread (or task) holds a read lock of this handle: an upgrade would wait
                /// for itself (release the read lock first). So are the timed forms, while
                /// [`try_write`](Self::try_write) then finds the lock taken.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("let write = config.write()", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn write(&self) -> Result<RwLockWriteGuard<'_>, Error> {
                    $run!(self.writing(Wait::Forever))?.ok_or_else(ended)
                }

                /// The write lock if nobody holds the lock or waits for it.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("if let Some(write) = config.try_write()", $aw, "? {")]
                #[doc = concat!("    write.unlock()", $aw, "?;")]
                /// }
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_write(
                    &self,
                ) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
                    $run!(self.writing(Wait::Never))
                }

                /// Waits up to `timeout` for the write lock.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::Duration;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("let write = config.try_write_for(Duration::from_secs(1))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_write_for(
                    &self,
                    timeout: Duration,
                ) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
                    $run!(self.writing(Wait::timeout(Instant::now(), timeout)))
                }

                /// Waits until `deadline` at the latest for the write lock.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// use std::time::{Duration, Instant};
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("let write = config.try_write_until(Instant::now() + Duration::from_secs(1))", $aw, "?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn try_write_until(
                    &self,
                    deadline: Instant,
                ) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
                    $run!(self.writing(Wait::Until(deadline)))
                }

                async fn reading(&self, wait: Wait) -> Result<Option<RwLockReadGuard<'_>>, Error> {
                    let reader = Reader::current();
                    let held = self.acquirer.take(1, wait).await?;
                    Ok(held.map(|held| self.read_guard(held, reader)))
                }

                fn read_guard(
                    &self,
                    held: Acquisition<$rt>,
                    reader: Reader,
                ) -> RwLockReadGuard<'_> {
                    RwLockReadGuard {
                        held,
                        _reading: self.readers.enter(reader),
                    }
                }

                async fn writing(&self, wait: Wait) -> Result<Option<RwLockWriteGuard<'_>>, Error> {
                    // A try cannot wait for itself: it only finds the lock taken.
                    if wait != Wait::Never && self.readers.reading_here() {
                        return Err(Error::WouldDeadlock {
                            name: self.name().into(),
                        });
                    }
                    let held = self.acquirer.take(WRITER_UNITS, wait).await?;
                    Ok(held.map(|held| RwLockWriteGuard { lock: self, held }))
                }
            }

            impl LockBuilder<RwLock> {
                /// Lets `token` cancel this handle's waits from anywhere; see
                /// [`CancelToken`](crate::CancelToken). A cancelled waiter leaves the queue, and
                /// its wait returns [`Error::Cancelled`].
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                /// let token = redis_blpop_lock::CancelToken::new();
                #[doc = concat!("let config = ", $path, "RwLock::builder(&client, \"config\")")]
                ///     .cancel_token(token.clone())
                ///     .build()?;
                /// # Ok(())
                /// # }
                /// ```
                pub fn cancel_token(self, token: CancelToken) -> Self {
                    self.cancelled_by(token)
                }

                /// Checks the settings and makes the handle. No connection is opened yet.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::builder(&client, \"config\").build()?;")]
                /// # Ok(())
                /// # }
                /// ```
                pub fn build(self) -> Result<RwLock, Error> {
                    let (settings, transport, capacity) = self.checked_for(Primitive::RwLock)?;
                    Ok(RwLock {
                        acquirer: Acquirer::new(Primitive::RwLock, settings, transport, capacity),
                        readers: Readers::default(),
                    })
                }
            }

            $crate::shell::rwlock::guard_methods!(
                RwLockReadGuard<'_>, "read",
                asyncness = [$($asyncness)?], run = $run, head = $head, path = $path, aw = $aw,
            );
            $crate::shell::rwlock::guard_methods!(
                RwLockWriteGuard<'_>, "write",
                asyncness = [$($asyncness)?], run = $run, head = $head, path = $path, aw = $aw,
            );

            impl<'a> RwLockWriteGuard<'a> {
                /// Turns the write lock into a read lock without letting a writer in between; the
                /// readers queued behind it come in at once.
                ///
                /// ```no_run
                #[doc = $head]
                /// # let client = redis::Client::open("redis://127.0.0.1/")?;
                #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
                #[doc = concat!("let write = config.write()", $aw, "?;")]
                /// // ... write ...
                #[doc = concat!("let read = write.downgrade()", $aw, "?;")]
                /// // ... go on reading what was written ...
                /// # Ok(())
                /// # }
                /// ```
                pub $($asyncness)? fn downgrade(self) -> Result<RwLockReadGuard<'a>, Error> {
                    if !$run!(self.held.shrink(1))? {
                        return Err(Error::NotAcquired {
                            name: self.lock.name().into(),
                        });
                    }
                    Ok(self.lock.read_guard(self.held, Reader::current()))
                }
            }

            impl std::fmt::Debug for RwLock {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.debug_struct(concat!($prefix, "RwLock"))
                        .field("name", &self.name())
                        .finish_non_exhaustive()
                }
            }
        }
        pub use rwlock_api::*;
    };
}

/// What both guards say and do, written once (a guard's `lease`).
macro_rules! guard_methods {
    (
        $guard:ty, $take:literal,
        asyncness = [$($asyncness:tt)?],
        run = $run:ident,
        head = $head:literal,
        path = $path:literal,
        aw = $aw:literal,
    ) => {
        impl $guard {
            /// Whether the hold may have slipped away (its lease expired unrenewed, or it was
            /// reset). Once true, it stays true. No round trip.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
            #[doc = concat!("assert!(!config.", $take, "()", $aw, "?.lost());")]
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost(&self) -> bool {
                self.held.lost()
            }

            /// A token cancelled when the hold is lost: a renewal finds it gone (it was
            /// reset), its lease runs out (renewals failed, or
            /// [`max_hold`](crate::LockBuilder::max_hold) was reached). Never while it holds,
            /// nor by its release; cancelled already when taken after the loss. A write lock
            /// downgraded keeps its token. When and how, as for a lock:
            /// [`LockGuard::lost_token`](crate::LockGuard::lost_token).
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
            #[doc = concat!("assert!(!config.", $take, "()", $aw, "?.lost_token().is_cancelled());")]
            /// # Ok(())
            /// # }
            /// ```
            pub fn lost_token(&self) -> CancelToken {
                self.held.lost_token()
            }

            /// This hold's fencing token, larger for every grant of this lock.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
            #[doc = concat!("assert!(config.", $take, "()", $aw, "?.fencing_token().is_some());")]
            /// # Ok(())
            /// # }
            /// ```
            pub fn fencing_token(&self) -> Option<u64> {
                self.held.fencing_token()
            }

            /// Releases now and reports how that went, instead of logging it in drop. An
            /// async release whose future is dropped is done again unattended.
            ///
            /// ```no_run
            #[doc = $head]
            /// # let client = redis::Client::open("redis://127.0.0.1/")?;
            #[doc = concat!("let config = ", $path, "RwLock::new(&client, \"config\")?;")]
            #[doc = concat!("config.", $take, "()", $aw, "?.unlock()", $aw, "?;")]
            /// # Ok(())
            /// # }
            /// ```
            pub $($asyncness)? fn unlock(self) -> Result<(), Error> {
                $run!(self.held.release())
            }
        }
    };
}

pub(crate) use {guard_methods, rwlock};
