//! The handles, each generic over the [`Runtime`] it runs on, as `lock_api`'s are over their
//! raw lock: the crate root's names are these types on [`Blocking`], and [`crate::aio`]'s the
//! same types on `Tokio`, as `parking_lot` names `lock_api`'s. Rustdoc shows each type's two
//! APIs on one page.
//!
//! What both APIs share is written once, on `impl<R: Runtime>`; the methods that wait are
//! written once per API, each a line over the same `async` core: the blocking one runs it on
//! the caller's thread, the async one awaits it. Code for both APIs names a handle here:
//!
//! ```no_run
//! use redis_blpop_lock::{handle::Semaphore, Runtime};
//!
//! fn describe<R: Runtime>(semaphore: &Semaphore<R>) -> String {
//!     format!("{} ({} permits)", semaphore.name(), semaphore.permits())
//! }
//! ```
//!
//! # The queue engine
//!
//! The [`Semaphore`], the fair [`Lock`] (`Lock::builder(..).fair(true)`), the [`RwLock`] and the
//! [`Election`] are one engine, a fair queue on the server.
//!
//! A primitive has a capacity (a semaphore's permits, 1 for a fair lock, a million for a
//! read-write lock, where a reader takes one unit and a writer all of them) and every
//! acquisition asks for some units:
//!
//! - **Arrival order.** An acquisition that cannot be served at once takes a ticket, and
//!   grants go strictly in ticket order: the first waiter whose units do not fit stops the
//!   ones behind it, so a request for many permits, or a writer, is never starved by later
//!   small requests. A try ([`Semaphore::try_acquire`], `try_lock`) never passes a waiter.
//! - **No lost wake-ups.** Whatever frees units (a release, a waiter leaving, an expiry or
//!   lapse found by any script) grants them in the same script to exactly the waiters that
//!   now fit, pushing each grant (its fencing token and the waiter's id) to the inbox of the
//!   waiter's process: k permits released wake k waiters. A grant stays in the inbox until
//!   read, and one lost with a connection is found by the waiter's next ask, which reads what
//!   its id holds.
//! - **One waiting connection per process.** All the queue engine's waiters of a process on
//!   one server (blocking threads and async tasks, every primitive and name) share one
//!   connection with the plain locks' waiters: see [One waiting connection per
//!   process](crate#one-waiting-connection-per-process). A waiter wakes by itself only at its next
//!   event (the expiry of the holder it waits for, the lapse of another process's waiter just
//!   ahead) or its deadline, to the millisecond; idle, it costs the server nothing.
//! - **Crash safety.** Every hold is a lease (30 s by default, renewed while held, by the
//!   process's renewal threads), so a crashed holder's units come back at its expiry, and
//!   the first waiter wakes at that instant. A process heartbeats once for all its waiters in
//!   a primitive's line (every [`heartbeat`](LockBuilder::heartbeat), 1 s by default); one
//!   that misses two lapses, and all its waiters with it: each is taken out of the queue by
//!   the next script that meets it, and a waiter of another process just behind looks
//!   exactly then. A grant pushed to a waiter lasts only until its process's heartbeat would
//!   lapse, unless the waiter claims it (an extend on waking): a process killed just before
//!   its turn holds the queue up no longer than a lapse window.
//! - **Server time only.** Leases, heartbeats and lapses are counted in the server's `TIME`
//!   inside the scripts, never a client's clock.
//! - **Safe to repeat.** Every script is idempotent by acquisition id, so a request whose
//!   reply was lost is sent again, never settled by guessing: a lost acquire holds exactly one
//!   grant, a lost release is a release. A process stopped past its lapse (`SIGSTOP`, a paused
//!   VM) is told so when it resumes (by its heartbeat, or a waiter's ask), and its waiters
//!   leave and join again at the back; none holds what it was not granted. A waiter that
//!   times out or is cancelled leaves the queue, handing on any grant that came meanwhile.
//! - **One primary.** All keys of a primitive share one hash slot (see below), so it works
//!   on a Redis Cluster (a waiter follows its slot when it moves) and behind
//!   [`Sentinel`](crate::Sentinel). On a [`Quorum`](crate::Quorum) it is refused
//!   ([`Error::Unsupported`](crate::Error::Unsupported)): a count across independent servers
//!   cannot be kept safely.
//!
//! Keys of the primitive `<kind>` (`semaphore`, `fair-lock`, `rwlock`) named `<name>` all
//! start with one base, the same on one server and on a cluster. An acquisition's id ends in
//! `@<process id>` (16 hex digits, random for each process and server): its process's
//! heartbeat keeps it in line, and its grants go to its process's inbox. An id without it (an
//! earlier version's) is its own process, with a signal list of its own: such waiters are
//! served, but an earlier version's scripts drop the waiters of this one from the line (they
//! read heartbeats by waiter id), so run one version's waiters on a name at a time.
//!
//! The keys:
//!
//! - `<kind>:{<name>}:` for a name without a hash tag of its own (`jobs`: `semaphore:{jobs}:`),
//!   so the name is their hash tag;
//! - `<kind>:=<name>:` for a name with one, a non-empty `{...}` as Redis Cluster reads it
//!   (`{tenant7}:jobs`: `semaphore:={tenant7}:jobs:`): the name as it is, so its own tag
//!   decides the slot, and the primitive sits with the other keys of that tag.
//!
//! The two never meet (`<kind>:{` against `<kind>:=`) and each keeps the whole name, so two
//! names never share a key: `x` and `{x}` are two semaphores. A name that starts with `}` and
//! has no tag of its own cannot be put in braces (`{}` is no tag), so on a cluster its keys
//! fall in several slots and Redis refuses its scripts (`CROSSSLOT`); give it a tag.
//!
//! The plain lock is the exception: it keeps python-redis-lock's `lock:<name>`, which on a
//! cluster becomes `lock:{<name>}` unless the name has a tag, since that is the key a
//! python-redis-lock user names there. So on a cluster only, the plain locks `x` and `{x}`
//! are one lock.
//!
//! | key | type | what |
//! |---|---|---|
//! | `<base>holders` | sorted set | acquisition id → lease expiry (server ms) |
//! | `<base>held` | hash | acquisition id → `<units>:<fencing token>` |
//! | `<base>queue` | sorted set | waiter id → ticket |
//! | `<base>beats` | sorted set | process id → when its waiters lapse (server ms); expires with the last heartbeat |
//! | `<base>wants` | hash | waiter id → `<units>:<lease ms>` |
//! | `<base>tickets` | string (counter) | the last ticket (gone with the queue) |
//! | `<base>fence` | string (counter) | the last fencing token handed out |
//! | `<base>signal:<process id>` | list | a process's inbox: `<token>:<waiter id>` per grant; expires with its heartbeat |
//! | `<base>count` | string | `<units in use>:<fencing counter>:<holders>`, kept by the scripts (gone with the last holder) |
//!
//! **The kept count.** No script reads every holder: each keeps the units in use in
//! `<base>count`, with the fencing counter and the number of holders it wrote it at, and
//! reads only what it changes, so its server time does not grow with the holders or the
//! waiters. A count whose marks do not match (a holder written by an older version, or by
//! hand), or that is not a count, is counted again before anything is granted. A count
//! edited by hand to another well-formed value with the right marks is trusted until an
//! operator's read ([`inspect::queue`](crate::inspect::queue), `redis-lock status`), which
//! recounts every time, finds it off: it logs a warning, counts
//! `redis_lock_count_repairs_total`, and has the next script count again. Older versions
//! recount on every call, so they may share a name with this one: the marks catch their grants
//! and releases (a downgrade of theirs is caught by the next operator's read, and until then
//! only grants less).
//!
//! **Migrating keys of the earlier rule.** Earlier versions gave a name with a tag of its own
//! the base `<kind>:<name>:` (`{x}` had `semaphore:{x}:`, the keys of `x`; `a:{b}` had
//! `semaphore:a:{b}:`). A process of the earlier version and one of this one do not exclude
//! each other on such a name, so stop the old ones on it before starting new ones: let their
//! holds end, or free them with the old version's `redis-lock reset --semaphore NAME` (or
//! `--fair`, `--rwlock`). If the name is not another name in braces (`a:{b}`), what is left
//! is found with `SCAN MATCH <kind>:<name>:*` and may be deleted: its fencing counter (tokens start
//! again from 1 under the new base unless you first `SET <kind>:=<name>:fence` to its value)
//! and signal lists that expire by themselves. If it is (`{x}`), those keys are now the keys
//! of the other name (`x`): leave them. Names without a tag of their own keep their keys.
//!
//! The scripts (`scripts/queue_*.lua`, each sent after `queue_head.lua` and, but for
//! `queue_reset_all`, `queue_reads.lua` and `queue_engine.lua`, their shared parts, of which
//! `queue_extend` takes only the reads; `queue_acquire` and `queue_release` answer their
//! common cases, a hand-off to the head of the line too, in a fast part before the engine):
//! `queue_acquire` (take, join the queue, or heartbeat), `queue_release` (give back, or leave
//! the queue), `queue_extend` (renew a lease), `queue_shrink` (a read-write lock's downgrade),
//! `queue_reset` (an operator's reset of one holder or all) and `queue_state` (a holder's
//! read of its own entry, or the operator's read of everything, with the recount).
//!

mod builder;
mod cache;
mod dogpile;
mod election;
mod hold;
mod lock;
mod rwlock;
mod semaphore;

pub use builder::LockBuilder;
pub use cache::Cache;
pub use election::{Election, Leadership, Watch};
pub use hold::Hold;
#[cfg(feature = "tokio")]
pub use lock::OwnedLockGuard;
pub use lock::{with_lock, ArcLockGuard, Lock, LockGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{ArcSemaphorePermit, Semaphore, SemaphorePermit};

pub use crate::driver::blocking::Blocking;
#[cfg(feature = "tokio")]
pub use crate::driver::tokio::Tokio;

/// The runtime a handle runs on: [`Blocking`] (the default: each call blocks the calling
/// thread in its round trips) or [`Tokio`] (feature `tokio`: each call is a future). Sealed:
/// the crate's two runtimes are its only ones.
///
/// Code written for both APIs names it as a bound:
///
/// ```no_run
/// use redis_blpop_lock::{handle::Semaphore, Runtime};
///
/// fn describe<R: Runtime>(semaphore: &Semaphore<R>) -> String {
///     format!("{} ({} permits)", semaphore.name(), semaphore.permits())
/// }
/// ```
// Sealed: the bound is the driver's trait, which no one outside the crate can name.
#[allow(private_bounds)]
pub trait Runtime: crate::driver::Runtime {}

impl Runtime for Blocking {}

#[cfg(feature = "tokio")]
impl Runtime for Tokio {}

#[cfg(feature = "tokio")]
pub(crate) use lock::WITH_LOCK_EXPIRE;

/// What a wait without a deadline that ended without a hold is: against the protocol.
pub(crate) fn ended() -> crate::Error {
    crate::Error::unexpected(&"a wait without deadline that ended")
}
