//! Distributed locks on Redis that wait in `BLPOP` instead of polling; wire-compatible with
//! [python-redis-lock](https://github.com/ionelmc/python-redis-lock).
//!
//! A lock is the key `lock:<name>` holding its owner's random id, taken with `SET NX` (with an
//! optional expiry) and released by a Lua script that checks the owner. Waiters never poll:
//! a failed acquire blocks in `BLPOP lock-signal:<name>`, and a release pushes one element to
//! that list, waking exactly one waiter. Every wait is also bounded by the holder's remaining
//! expiry, so when a holder crashes the next waiter takes the lock as soon as it expires. A
//! Python service using python-redis-lock and a Rust service using this crate can share a lock by
//! name: each blocks the other and each wakes the other's waiters.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//! use redis_blpop_lock::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//!
//! // Closure style.
//! redis_blpop_lock::with_lock(&client, "report", || println!("only one of us at a time"))?;
//!
//! // Guard style, with an expiry kept alive by a renewal thread.
//! let lock = Lock::builder(&client, "report")
//!     .expire(Duration::from_secs(30))
//!     .auto_renewal(true)
//!     .build()?;
//! if let Some(guard) = lock.try_lock_for(Duration::from_secs(5))? {
//!     // ... work; `guard.lost()` says if the lock slipped away ...
//!     guard.unlock()?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Usage
//!
//! The same tour as python-redis-lock's README, in Rust. Every call that talks to Redis returns
//! `Result<_, redis_blpop_lock::Error>`; a handle ([`Lock`]) is `Send + Sync` and may be shared
//! between threads.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//! use redis_blpop_lock::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//!
//! // Explicit style: blocks until the lock is ours.
//! let lock = Lock::new(&client, "name-of-the-lock")?;
//! lock.acquire()?;
//! // ... critical section ...
//! lock.release()?;
//!
//! // Non-blocking: Ok(false) if someone else holds it.
//! if lock.try_acquire()? {
//!     lock.release()?;
//! } else {
//!     println!("someone else has it: {:?}", lock.owner_id()?);
//! }
//!
//! // Waiting, up to a limit (any Duration; zero is one try).
//! if lock.acquire_timeout(Duration::from_secs(3))? {
//!     lock.release()?;
//! }
//!
//! // Guard style, like parking_lot: released when the guard is dropped.
//! {
//!     let _guard = lock.lock()?;
//!     // ... critical section ...
//! }
//! if let Some(guard) = lock.try_lock_for(Duration::from_millis(500))? {
//!     guard.unlock()?; // release now and see any error, instead of logging it in drop
//! }
//!
//! // Closure style: acquire, run, release (also when the closure panics).
//! let answer = redis_blpop_lock::with_lock(&client, "name-of-the-lock", || 6 * 7)?;
//! assert_eq!(answer, 42);
//! # Ok(())
//! # }
//! ```
//!
//! The free function [`with_lock`] takes the lock with a 30 s expiry that a renewal thread keeps
//! alive while the closure runs, so a crashed process does not hold it forever. For other
//! settings, build the lock and call `Lock::with_lock` on it:
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = redis_blpop_lock::Lock::builder(&client, "nightly-report")
//!     .expire(Duration::from_secs(120))
//!     .auto_renewal(true)
//!     .fencing(true)
//!     .build()?;
//! let rows = lock.with_lock(|| 6 * 7)?;
//! assert_eq!(rows, 42);
//! # Ok(())
//! # }
//! ```
//!
//! ## Owner ids
//!
//! Each handle has an owner id, 18 random bytes from the OS, base64-encoded (24 characters), as in
//! python-redis-lock. Give your own to let another handle or process act as the same owner:
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use redis_blpop_lock::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = Lock::builder(&client, "invoices").id("worker-7").build()?;
//! lock.acquire()?;
//! assert_eq!(lock.owner_id()?.as_deref(), Some("worker-7"));
//!
//! // Another handle with the same id may extend and release it...
//! let same = Lock::builder(&client, "invoices").id("worker-7").build()?;
//! same.release()?;
//! // ...but acquiring a lock your own id already holds is an error: locks are not reentrant.
//! # Ok(())
//! # }
//! ```
//!
//! ## Expiry, auto-renewal and `lost()`
//!
//! Without an expiry a lock held by a crashed process stays until an operator resets it. With one,
//! it frees itself; auto-renewal keeps it alive while the holder works (a thread extends it when a
//! third of the expiry is left, by what the handle knows: two thirds of the way through).
//!
//! An expiring lock can be **lost** without its holder doing anything wrong: a pause (GC, swap, a
//! stopped VM) or a network stall outlasts the expiry, or the server restarts without the key.
//! [`Lock::lost`] (and [`LockGuard::lost`](handle::Hold::lost)) is what the handle knows, with no round trip: it is
//! true once the expiry passed without a renewal getting through, or a renewal or `extend` found
//! another id in the key, and it stays true until the handle releases or acquires again. The
//! expiry is counted from when the request that took the lock was *sent*, never from when its
//! reply came, so a late reply cannot make a holder believe in a lock that has already expired.
//! A holder that sees `lost()` must stop writing: someone else may hold the lock now.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//! use redis_blpop_lock::Lock;
//!
//! # fn process(_batch: u32) {}
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = Lock::builder(&client, "rebuild-index")
//!     .expire(Duration::from_secs(60))
//!     .auto_renewal(true) // a thread extends it every 40 s while held
//!     .build()?;
//! let guard = lock.lock()?;
//! for batch in 0..100 {
//!     if guard.lost() {
//!         // The renewal failed until the expiry passed, or someone took the lock away:
//!         // another worker may be in here now. Stop writing.
//!         break;
//!     }
//!     process(batch);
//! }
//! drop(guard);
//!
//! // By hand: a new expiry, or the configured one again.
//! lock.acquire()?;
//! lock.extend(Some(Duration::from_secs(300)))?;
//! lock.extend(None)?;
//! lock.release()?;
//! # Ok(())
//! # }
//! ```
//!
//! The renewals hold only a weak reference: drop the handle and the renewing stops, so the lock
//! expires. Release stops its renewal, waiting for one under way. Renewals run on one lane per
//! server, so one frozen server never makes another's renewals late (docs/design.md, "The
//! renewal rule"). A renewal error is logged and retried until the
//! expiry; after that, or when the key holds another id, the lock counts as lost and an error is
//! logged. A lock without an expiry never counts as lost; use an expiry and
//! `auto_renewal(true)` when you need `lost()`.
//!
//! ## Told when a lock is lost: `lost_token()`, `when_lost()`, `max_hold`
//!
//! `lost()` answers when asked; a worker deep in its work may not ask in time. Every guard and
//! permit, in both APIs ([`LockGuard`], [`ArcLockGuard`], [`SemaphorePermit`],
//! [`ArcSemaphorePermit`], [`RwLockReadGuard`], [`RwLockWriteGuard`], and their `aio` names;
//! a fair lock's guards are [`LockGuard`]s), derefs to its [`handle::Hold`], and so also has
//! `lost_token()`: a [`CancelToken`] that the crate cancels when that acquisition is lost. Hand it to the work, which checks
//! `is_cancelled()` between steps; in async code `select!` on `token.cancelled()` or on the
//! guard's `when_lost()`, which resolves at the same moment.
//!
//! It is cancelled as soon as the loss can be known, within one renewal interval (two thirds
//! of the expiry):
//!
//! - a renewal or [`extend`](Lock::extend) finds another id in the key, or none (someone
//!   reset the lock, or took it after it expired): at that renewal, so a reset is told at the
//!   next one;
//! - the lease runs out: renewals could not get through until its expiry (a server away), the
//!   lock does not renew, or the hold reached `max_hold` (below): at the expiry the handle
//!   believes (counted from before the request that set it, so never after the server's), by
//!   the process's timer thread, which holds only a weak reference to the handle.
//!
//! It is never cancelled while the acquisition holds, nor by a release (`unlock`, a dropped
//! guard, the handle's `release`): a released acquisition's token stays as it was, so a
//! worker can tell "lost" from "done". Once cancelled it stays so and `lost()` is true, for
//! good: a renewal that gets through after the expiry does not undo it. A token taken after
//! the loss is cancelled already, and each acquisition has its own. A lock without an expiry is
//! only ever found lost by an `extend`.
//!
//! [`LockBuilder::max_hold`] bounds a hold whose holder is stuck (a hung thread, a deadlock)
//! while its renewal keeps the lock alive: the renewal stops at `max_hold` from the grant (the
//! last one extends the lease only up to that point), so the lock expires then, the next waiter
//! takes it, and the holder is told as for any loss. It needs an expire at most as long, and
//! works for every primitive.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//! use redis_blpop_lock::Lock;
//!
//! # fn process(_batch: u32) {}
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = Lock::builder(&client, "rebuild-index")
//!     .expire(Duration::from_secs(30))
//!     .auto_renewal(true)
//!     .max_hold(Duration::from_secs(600)) // a rebuild that takes longer is stuck
//!     .build()?;
//! let guard = lock.lock()?;
//! let lost = guard.lost_token();
//! let worker = std::thread::spawn(move || {
//!     for batch in 0..100 {
//!         if lost.is_cancelled() {
//!             return false; // someone else may hold the lock now: stop writing
//!         }
//!         process(batch);
//!     }
//!     true
//! });
//! let finished = worker.join().unwrap_or(false);
//! drop(guard); // a release: the token, if not cancelled by now, never will be
//! println!("finished: {finished}");
//! # Ok(())
//! # }
//! ```
//!
//! ## Fencing tokens
//!
//! `lost()` can only notice after the fact. No lock can stop a holder that was paused past its
//! expiry from waking up and writing; a fencing token lets the storage refuse that stale write.
//! With [`fencing(true)`](LockBuilder::fencing) every acquisition takes a number in the same
//! round trip, greater than every token handed out before for that name (the fair lock, a
//! semaphore's permits, both read-write lock guards and an election's term always have one):
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = redis_blpop_lock::Lock::builder(&client, "ledger")
//!     .expire(Duration::from_secs(10))
//!     .fencing(true)
//!     .build()?;
//! let guard = lock.lock()?;
//! if let Some(token) = guard.fencing_token() {
//!     // The store keeps the highest token it has accepted and refuses lower ones, e.g. in
//!     // SQL: UPDATE ledger SET balance = $1, fence = $token WHERE id = $2 AND fence <= $token
//!     println!("writing with token {token}");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! A token is a hybrid logical clock: the server's `TIME` in microseconds, or the last token
//! (kept in `lock-fence:<name>`) + 1 when that is not above it. So it keeps growing across an
//! empty restart, a `FLUSHALL`, an eviction of the counter and a failover to a replica that
//! missed the last grants, provided the servers' clocks are within a failover's time of each
//! other (NTP); a server that kept its counter keeps it growing even if its clock steps back.
//! A handle given a token not above one it was given before logs a warning and counts it in
//! `redis_lock_fence_regressions_total`. The repository's `docs/fencing.md` has the guarantee,
//! its assumption and the checks in PostgreSQL, a Redis script and an object store. Holders using
//! python-redis-lock do not take tokens; mixing them with fencing is safe for mutual exclusion
//! but gives their writes no token to check.
//!
//! ## Servers that evict keys
//!
//! A Redis that is also a cache (`maxmemory` with a `maxmemory-policy` other than
//! `noeviction`) may delete a held lock's key to make room: another process then takes the
//! lock while the first still works, which learns it only at its next renewal (`lost()`, as for
//! any loss). `volatile-*` policies evict keys that carry an expiry, so every lock with one
//! (`volatile-ttl` the soonest-expiring first); `allkeys-*` evict any key, also
//! `lock-fence:<name>`, and then fencing tokens rest on the server's clock alone. Use
//! `noeviction` for locks, or a Redis instance of their own.
//!
//! The lock reads each server's policy once, from `INFO memory`, sent with the first request
//! to it, and logs one warning per server that can evict; [`inspect::evicting`] lists them
//! and `redis-lock status` and `list` print them. [`LockBuilder::refuse_evicting`] refuses to
//! acquire there instead. A server whose ACL refuses `INFO` is not judged, and not warned
//! about. A handle that is given a fencing token not above one it took before logs a warning
//! (and counts it in `redis_lock_fence_regressions_total`) rather than failing, since the lock
//! is held by then: it cannot see a counter reset between other processes' acquisitions, so
//! the store's own check (refusing tokens not above the highest it has seen) stays the guard.
//!
//! ## Looking at a lock, and resetting it
//!
//! [`Lock::locked`] and [`Lock::owner_id`] each cost one round trip; `Lock::holder` reads the
//! owner's id and the remaining expiry together, in one round trip (`ttl` is `None` for a lock
//! without an expiry):
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = redis_blpop_lock::Lock::new(&client, "nightly-report")?;
//! match lock.holder()? {
//!     Some(holder) => println!("held by {} for {:?} more", holder.id, holder.ttl),
//!     None => println!("free"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! An operator frees a lock whose holder will never release it with [`Lock::reset`], or every
//! lock at once with [`reset_all`]:
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use redis_blpop_lock::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! // One lock, whoever holds it (wakes one waiter):
//! Lock::new(&client, "stuck-job")?.reset()?;
//! // Every lock: returns how many it deleted.
//! let n = redis_blpop_lock::reset_all(&client)?;
//! println!("reset {n} locks");
//! # Ok(())
//! # }
//! ```
//!
//! `reset` deletes only the owner it read (`scripts/reset.lua`), so it never deletes a lock
//! someone took after it looked. `reset_all` finds `lock:*` keys with `SCAN` from the client, a batch of 1000 at a time,
//! and resets each batch in one script call, so a big keyspace never blocks the server
//! (python-redis-lock's version runs `KEYS` inside a script). Keys under `lock:*` that are not
//! strings are not locks and are left alone. `reset_all` also ends every hold and line of the
//! semaphores, fair locks and read-write locks (`scripts/queue_reset_all.lua`, one call per
//! primitive): each waiter is woken and joins the line anew, and the fencing counters are
//! kept; its count is of holds ended, a lock being one. [`inspect::reset_queue`] ends one
//! holder's hold (or all) on one of them and hands it on to the line.
//!
//! The [`inspect`] module is the operator's wider view: [`inspect::holders`] lists every held
//! lock (name, owner id, remaining expiry) on every primary, found with `SCAN` as `reset_all`
//! finds them; [`inspect::clear_corrupt`] deletes a key at a lock's name that is not a lock,
//! which every other call reports as [`Error::Corrupt`] and leaves alone; [`inspect::queues`]
//! and [`inspect::queue`] show the semaphores', fair locks' and read-write locks' holders (id,
//! units, remaining lease, fencing token) and their waiters in line order:
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! for held in redis_blpop_lock::inspect::holders(&client, Duration::from_secs(5))? {
//!     println!("{}: held by {} for {:?}", held.name, held.id, held.ttl);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## Deadlines
//!
//! Every round trip to Redis has a deadline, so a frozen or unreachable server costs a bounded
//! time and never hangs a thread:
//!
//! - waits have the caller's deadline: [`Lock::acquire_timeout`] and [`Lock::try_lock_for`] take a
//!   `Duration`, `Lock::try_lock_until` an `Instant` (handy when one deadline covers several
//!   locks); [`Lock::acquire`] and [`Lock::lock`] wait as long as it takes;
//! - calls without a timeout of their own (release, extend, reset, the holder and owner queries,
//!   and each round trip of `acquire()`) end after `LockBuilder::io_timeout`, 5 s by default: a
//!   frozen server costs at most that, never more;
//! - an untimed acquire rides out a server that is away (a restart, a failover) for the I/O
//!   timeout, then returns its error (the queue primitives' after leaving the queue, within the
//!   grace); a refused connection on its first request is `Error::Redis` at once.
//!
//! Waits end to the millisecond at the holder's expiry or the caller's deadline, whatever the
//! server's `hz` setting: the waiter keeps the time itself, and tries (or gives up) at its own
//! time, while its process's one waiting connection blocks on for the others (see [One waiting
//! connection per process](#one-waiting-connection-per-process)). No other client's command
//! ends a wait, so no wait needs a `CLIENT` right.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::{Duration, Instant};
//! use redis_blpop_lock::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let deadline = Instant::now() + Duration::from_secs(2);
//! let a = Lock::builder(&client, "account:1")
//!     .io_timeout(Duration::from_millis(500))
//!     .build()?;
//! let b = Lock::builder(&client, "account:2")
//!     .io_timeout(Duration::from_millis(500))
//!     .build()?;
//! // Both locks within the same two seconds, or neither.
//! if let Some(ga) = a.try_lock_until(deadline)? {
//!     if let Some(gb) = b.try_lock_until(deadline)? {
//!         // ... move money from account 1 to account 2 ...
//!         gb.unlock()?;
//!     }
//!     ga.unlock()?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## Cancelling a wait
//!
//! A wait can also end because the program no longer wants the lock (shutdown, a client that went
//! away). Give the handle a `CancelToken`; cancelling it from any thread ends a wait on that
//! handle with `Error::Cancelled { name }`. A grant that lands after the cancel is released
//! again, and its wake-up is passed on to the next waiter, so a cancelled waiter never keeps a
//! lock nobody uses.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use redis_blpop_lock::{CancelToken, Error, Lock};
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let token = CancelToken::new();
//! let lock = Lock::builder(&client, "exports")
//!     .cancel_token(token.clone())
//!     .build()?;
//!
//! // Elsewhere, e.g. in a shutdown handler.
//! let canceller = token.clone();
//! std::thread::spawn(move || canceller.cancel());
//!
//! match lock.lock() {
//!     Ok(guard) => {
//!         // ... export ...
//!         guard.unlock()?;
//!     }
//!     Err(Error::Cancelled { name, .. }) => println!("stopped waiting for {name}"),
//!     Err(e) => return Err(e),
//! }
//! assert!(token.is_cancelled());
//! # Ok(())
//! # }
//! ```
//!
//! ## One waiting connection per process
//!
//! All the waiters of a process on one server share one connection: blocking threads and
//! async tasks, plain locks and the queue engine's primitives, every name. It belongs to a
//! thread of the process's own (its *hub*), which runs while anyone waits and blocks in one
//! `BLPOP` over python-redis-lock's `lock-signal:<name>` of every plain lock waited on, the
//! process's inboxes of the queue engine, and `lock-hub:<process id>`, a list only it listens
//! on: a waiter on a name it does not listen on yet pushes there, so that it listens again.
//!
//! - **A release's signal** goes to the process's first waiter of that name (in arrival
//!   order) that is not trying already. When the hub listens on one plain lock, that waiter's
//!   try rides in the same pipeline behind the hub's `BLPOP`, so Redis runs it the instant
//!   the release wakes the `BLPOP`; with several, the waiter is woken and tries, a round trip
//!   later. A signal no waiter of the process takes (its waiter left, or each was woken
//!   already) is pushed back to the list for another process's waiter. python-redis-lock's
//!   waiters and this crate's keep waking each other, as each release still pushes one
//!   element to `lock-signal:<name>`.
//! - **Each waiter keeps its own time**: at the holder's expiry (a crashed holder) or its
//!   deadline it tries, or gives up, by itself. No wait is ended by `CLIENT UNBLOCK` or
//!   `CLIENT KILL`.
//! - **Faults.** When the hub's connection fails (a `BLPOP` whose reply is lost may have
//!   popped a signal), every waiter tries once, and the hub connects again. A signal list of
//!   the wrong type is found with `TYPE`, left out, and its waiters get [`Error::Corrupt`];
//!   the others wait on.
//! - **Where.** On a Redis Cluster there is one waiting connection per hash slot in use, since
//!   one `BLPOP` cannot span slots: one per name, unless names share a hash tag. Behind a
//!   [`Quorum`] it blocks on one of its servers, as a python-redis-lock waiter would. With
//!   no waiter left the hub stops within a second, and closes its connection.
//!
//! ## Owned guards for threads
//!
//! A [`LockGuard`] borrows its [`Lock`]. To hand a held lock to another thread, share the handle
//! in an `Arc` and take an owned guard, as with parking_lot's `lock_arc`: `Lock::lock_arc`,
//! `try_lock_arc`, `try_lock_arc_for(duration)` and `try_lock_arc_until(instant)` return an
//! `ArcLockGuard`, which is `'static` and can be moved into a thread:
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use redis_blpop_lock::Lock;
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = Arc::new(
//!     Lock::builder(&client, "exports")
//!         .expire(Duration::from_secs(30))
//!         .auto_renewal(true)
//!         .build()?,
//! );
//! let guard = lock.lock_arc()?;
//! let worker = std::thread::spawn(move || {
//!     // ... export, checking guard.lost() between steps ...
//!     drop(guard); // released here, on the worker thread
//! });
//! if worker.join().is_err() {
//!     eprintln!("the worker panicked; its guard released the lock as it unwound");
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## Dogpile protection
//!
//! When a hot cache entry is missing or expires, every request tends to recompute it at once (a
//! cache stampede). [`Cache::get_or_set`] lets one caller compute it under the lock
//! `get_or_set:<key>` while the others wait in `BLPOP` and then read the stored value;
//! [`Cache::get_or_revalidate`] serves a stale value to everyone while one background thread
//! recomputes it. See [`Cache`] for the details and the keys it writes.
//!
//! # Beyond the mutex: Semaphore, fair Lock, RwLock
//!
//! Three primitives share one engine, a fair queue on the server: a [`Semaphore`] (at most N
//! holders), a fair [`Lock`] (`Lock::builder(..).fair(true)`: first come, first served across
//! processes) and a [`RwLock`] (many readers or one writer). Like the lock, they block in
//! `BLPOP` and wake in about one round trip; unlike it, they are not python-redis-lock's.
//! With the `tokio` feature, `aio::Semaphore`, `aio::RwLock` and `aio::Lock`'s `.fair(true)` are
//! the same for async code; a dropped acquire future leaves the queue.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use redis_blpop_lock::{Lock, RwLock, Semaphore};
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let backups = Semaphore::new(&client, "backups", 2)?;
//! let permit = backups.acquire()?; // at most two hosts back up at once
//! drop(permit);
//!
//! let tickets = Lock::builder(&client, "tickets").fair(true).build()?;
//! let guard = tickets.lock()?; // in the order the callers asked
//! drop(guard);
//!
//! let config = RwLock::new(&client, "config")?;
//! let read = config.read()?; // readers share; a waiting writer goes before later readers
//! drop(read);
//! # Ok(())
//! # }
//! ```
//!
//! ## The queue engine
//!
//! The three share one fair queue on the server, with arrival order, no lost wake-ups, one
//! waiting connection per process, crash safety by leases and heartbeats, server time only,
//! and scripts that are safe to repeat. How it works, its keys and scripts, and how to move
//! keys of an earlier version: [the queue engine](handle#the-queue-engine), in [`handle`]'s
//! docs.
//!
//! ## Semaphore
//!
//! [`Semaphore::new`]`(&backend, name, permits)`; [`Semaphore::acquire`],
//! [`try_acquire`](Semaphore::try_acquire), [`try_acquire_for`](Semaphore::try_acquire_for),
//! [`acquire_many`](Semaphore::acquire_many) and their `_arc` forms return a permit guard with
//! `lost()`, `fencing_token()` and `release()`. Every handle says how many permits there are,
//! and each script uses the count of the handle that sent it: to change the count of a live
//! semaphore, make handles with the new count. A larger count lets waiters in at the next
//! request any handle makes; a smaller one takes nothing back from holders and grants nothing
//! until the permits in use fall below it.
//!
//! ## Fair lock
//!
//! `Lock::builder(&backend, name).fair(true)` is the same [`Lock`] API (guards, `lost()`,
//! fencing tokens, `reset`) on the queue engine with a capacity of one: a release hands the
//! lock to the waiter that asked first, and a newcomer never takes it ahead of a waiter. Its
//! keys are `fair-lock:{<name>}:*` (or `fair-lock:=<name>:*`), so it does not exclude a plain
//! lock of the same name: every handle on one name must agree.
//!
//! ## Read-write lock
//!
//! [`RwLock::read`] and [`RwLock::write`] (and their `try_` forms) return guards; readers share,
//! a writer is alone, and a writer that waits goes before readers that come after it. Each
//! read hold is a lease of its own, so a reader's renewal renews only its own entry.
//! [`RwLockWriteGuard::downgrade`] turns a write hold into a read hold and lets the readers
//! queued behind it in. An upgrade would wait for itself: a blocking `write()` by a thread
//! that holds a read guard of the same handle is [`Error::WouldDeadlock`].
//!
//! # Leader election
//!
//! An [`Election`] runs something on exactly one node at a time and lets the others know who:
//! [`campaign`](Election::campaign) waits in line (first come, first served, on the queue
//! engine with a capacity of one) and returns a [`Leadership`] with its
//! [`term`](Leadership::term), larger for every new leader (a fencing token), `lost()`, and
//! [`resign`](Leadership::resign). A leader publishes a short text when it takes office (its
//! address, say); anyone reads the leader ([`Election::leader`]: id, info, term, since) or
//! watches it change ([`Election::watch`]: a blocking iterator, or `changed().await` in
//! [`aio::Election`]) without campaigning; a watch reports [`Watched::Unknown`], once, when it
//! can no longer tell (the server is away). A crashed leader is succeeded at its lease's
//! expiry by the candidate that waited longest, as a crashed holder of any queue primitive is.
//!
//! A scheduler that runs jobs only while it leads, and stops them on the loss notice (a
//! pause past its lease, a server that forgot it, an operator's reset): each job gets the
//! leadership's [`lost_token`](Leadership::lost_token) and checks it between steps, and the
//! scheduler waits on it between rounds, so that it stops at once instead of at the next
//! round.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//! use redis_blpop_lock::{CancelToken, Election};
//!
//! /// One job: a few steps, each a write that carries the term, which a store that saw a
//! /// higher term refuses.
//! fn run_job(job: u32, term: u64, stop: &CancelToken) {
//!     for step in 0..10 {
//!         if stop.is_cancelled() {
//!             eprintln!("job {job}: stopped at step {step}, no longer leader");
//!             return;
//!         }
//!         # let _ = (term, step);
//!         // write(step, term) ...
//!     }
//! }
//!
//! let client = redis::Client::open("redis://127.0.0.1/")?;
//! let election = Election::builder(&client, "scheduler")
//!     .expire(Duration::from_secs(10))
//!     .build()?;
//! loop {
//!     let leadership = election.campaign("scheduler-1.internal:8080")?;
//!     let (term, stop) = (leadership.term(), leadership.lost_token());
//!     println!("leading in term {term}");
//!     let mut round = 0;
//!     // Rounds once a second, until the office is lost.
//!     while !stop.wait_timeout(Duration::from_secs(1)) {
//!         std::thread::scope(|jobs| {
//!             for job in 0..4 {
//!                 let stop = &stop;
//!                 jobs.spawn(move || run_job(round * 4 + job, term, stop));
//!             }
//!         });
//!         round += 1;
//!     }
//!     eprintln!("lost the office in term {term}; campaigning again");
//! }
//! # }
//! ```
//!
//! And a node that only wants to know where the leader is:
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! # let client = redis::Client::open("redis://127.0.0.1/")?;
//! use redis_blpop_lock::Watched;
//!
//! let election = redis_blpop_lock::Election::new(&client, "scheduler")?;
//! for change in election.watch()? {
//!     match change {
//!         Watched::Leader(leader) => println!("send jobs to {} (term {})", leader.info, leader.term),
//!         Watched::Nobody => println!("no scheduler now"),
//!         // The server is away: whoever led may still lead, or not.
//!         Watched::Unknown { reason } => println!("no telling where the scheduler is: {reason}"),
//!         other => println!("{other:?}"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! How it works, on the queue engine's keys (`election:{<name>}:*`, or `election:=<name>:*`),
//! plus `<base>leader`, a hash of the leader's `term`, `id`, `since` (server ms) and `info`:
//!
//! - **The term** is the fencing token of the campaign's grant. A new leader writes its record
//!   (`scripts/election_announce.lua`) only while it holds that term; a read trusts a record
//!   only while its id holds the same term, so a crashed leader's record says nothing once its
//!   lease ends. The record is kept beside the fencing counter until the next leader or a
//!   resignation replaces it.
//! - **Watches are told, not polling.** A new leader's announcement, and a resignation that
//!   leaves the election empty (`scripts/election_vacate.lua`), push a `watch` to the inbox of
//!   every process whose heartbeat is live in the election. Each watching process keeps one
//!   (its hub's read of the leader, `scripts/election_read.lua`, beats for it), and its
//!   waiting connection, shared with every waiter of the process, reads the leader once for
//!   all its watches. A leader that crashes with nobody in line announces nothing: the
//!   watching process reads again when the lease it last read ends, or the watching handle's
//!   own lease after the last read, whichever comes first (so at most one read a lease, even
//!   while nobody leads). A leader that crashes with candidates in line is reported as its
//!   successor, not as "nobody" first, unless no successor takes over within 100 ms.
//! - **A watch says when it does not know.** What a watch reports holds only while the
//!   server answers: a read that fails (a server killed is found at once, by the waiting
//!   connection that breaks), or no word from the server by the read that was due plus the
//!   I/O timeout (a frozen server, a network cut: within the lease and the I/O timeout, and a
//!   grace of at most 250 ms, of its last word), is reported as [`Watched::Unknown`], once;
//!   the next read that gets through reports the leader, or nobody, again.
//! - **Leases.** The leader's lease is the builder's `expire` (30 s by default), renewed while
//!   it leads; a standby takes over at its expiry. Keep it short where a fast fail-over
//!   matters: a shorter lease means more renewals, not more waiting traffic.
//! - **Where.** One server, [`Sentinel`] and Redis Cluster (all keys in one slot); a
//!   [`Quorum`] refuses it ([`Error::Unsupported`]), as it refuses every queue primitive.
//!
//! # Async (tokio)
//!
//! With the `tokio` feature, [`aio`] has the same locks for async code: the same names and
//! semantics, built with the same [`LockBuilder`], on the same keys, scripts and outcome rules
//! (one driver serves both APIs). An async lock and a blocking one of the same name are the
//! same lock, and wake each other. Each handle is one type with both APIs, generic over its
//! [`Runtime`]: `Lock` is [`handle::Lock`]`<`[`Blocking`]`>` and `aio::Lock` is
//! `handle::Lock<`[`aio::Tokio`]`>`, as `parking_lot`'s types are `lock_api`'s. What each
//! future does when it is dropped, the guards, one handle's turns, the shared waiting and the
//! backends: the [`aio`] module's docs.
//!
//! # Redis Cluster and Sentinel
//!
//! Locks live wherever a [`Backend`] says: a [`redis::Client`] (one server), a
//! [`redis::cluster::ClusterClient`] (feature `cluster`) or a [`Sentinel`] (feature
//! `sentinel`). The handle, its guards, `lost()`, renewal, fencing and the outcome rules are the
//! same on each.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! # #[cfg(feature = "cluster")]
//! # {
//! let cluster = redis::cluster::ClusterClient::new(vec!["redis://10.0.0.1:7000/"])?;
//! let lock = redis_blpop_lock::Lock::new(&cluster, "nightly-report")?; // key lock:{nightly-report}
//! let _guard = lock.lock()?;
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! **Keys on a cluster.** The unlock script and the fencing try need all of a lock's keys in
//! one hash slot, so on a cluster the name is their hash tag: `lock:{name}`,
//! `lock-signal:{name}`, `lock-fence:{name}`. A name that already has a tag (`{tenant7}:jobs`)
//! is used as it is, and its tag decides the slot. A python-redis-lock user on the same cluster
//! reaches the same lock by naming it `{name}` (python-redis-lock adds no braces of its own),
//! and so does this crate: on a cluster the locks `x` and `{x}` are one. The queue primitives
//! keep the two apart ([the queue engine's keys](handle#the-queue-engine)).
//! [`Cache`]'s freshness marker is `{key}:fresh` there, in its value's slot. On one server,
//! keys stay `lock:<name>`.
//!
//! **Routing and failover.** The client learns which primary serves which slot (`CLUSTER
//! SLOTS`), sends each request there, and follows `MOVED` and `ASK` during a resharding. A
//! process's waiters block on one connection per hash slot in use, to its primary; when the
//! slot moves, Redis turns the `BLPOP` away with `MOVED` (it checks blocked clients about once
//! a second), every waiter there tries once, and the connection carries on at the slot's new
//! primary. A waiter's try goes to wherever the lock key lives. A script whose keys are split across the two nodes meanwhile
//! (a release: the lock key not moved yet, its signal list at the target) is answered
//! `TRYAGAIN` and retried until the call's deadline, so keep migrations of lock slots short. When a primary dies,
//! requests that could not have run (a refused connection, `CLUSTERDOWN`, `TRYAGAIN`,
//! `READONLY`) are retried with a short backoff while the replica takes over, within the call's
//! deadline; a try whose reply was lost is settled as on one server, by reading the owner on
//! the new primary. A failover takes the cluster's `cluster-node-timeout` (15 s by default)
//! plus the election: a waiter in `lock()` rides it out only if the handle's
//! [`io_timeout`](LockBuilder::io_timeout) is longer. [`reset_all`] scans every primary.
//!
//! **Sentinel.** [`Sentinel`] asks the sentinels for the primary, checks it with `ROLE`, and asks
//! again when the primary stops serving (refused connections, `READONLY` or `UNBLOCKED` after a
//! demotion; Sentinel also closes the old primary's client connections when it reconfigures
//! it).
//!
//! **What a failover does to a held lock.** Replication is asynchronous: a lock the old primary
//! had not passed on to the promoted replica is gone after the failover, and another client can
//! take it. The holder learns it as on one server: its renewal (or [`Lock::extend`]) finds the
//! key missing and [`Lock::lost`] turns true. [`LockBuilder::replicas`] narrows the window: after
//! taking, extending or releasing, the same connection sends `WAIT n timeout`, and fewer
//! acknowledgements is [`Error::NotReplicated`] (an acquisition is released first). It buys
//! this: a failover to a replica that acknowledged keeps the lock. It does not buy consensus:
//! Sentinel or the cluster may still promote a replica that did not acknowledge (one that lagged
//! or was cut off), and then the lock is lost as before. Where that matters, use fencing tokens
//! with a single primary, or a consensus store.
//!
//! Until its holder learns of it, another client must not hold the lock. So what a handle
//! takes within [`LockBuilder::after_failover`] (by default its own expiry) of learning that a
//! new primary serves the lock's keys is held, renewed if it renews, and handed to its caller
//! only once that has passed: by then a holder of the old primary whose lease is no longer has
//! lost it, or kept it by renewing on the new primary. A `Sentinel` backend learns of a switch
//! at the sentinels' `+switch-master`, a cluster when a slot's primary is a node that served
//! none, and one server when a new connection finds another `run_id` (a restart). Every
//! renewing holder of the process then renews at once, on the new server. The cost
//! and what remains (a holder partitioned from the sentinels but not from the old primary) are
//! in docs/faults.md, "A failover, or a restart".
//!
//! **Rights per node.** Every primary needs the ACL rule of [Least privilege](#least-privilege);
//! a cluster client also needs `+cluster|slots +asking`, a Sentinel client `+role` on the data nodes,
//! and `+wait` with `replicas`. The sentinels themselves need to answer
//! `SENTINEL GET-MASTER-ADDR-BY-NAME`.
//!
//! # Redlock: a quorum of independent servers
//!
//! A single primary, even with replicas, can lose a lock in a failover, because replication is
//! asynchronous. [`Quorum`] takes the lock on a majority of N ≥ 3 independent servers (not
//! replicas of each other), so it survives the loss of a minority: the Redlock algorithm of the
//! Redis documentation, with waiting that stays blocking. Every peer implementation polls
//! (redsync retries 32 times at random 50–250 ms intervals); here a process's waiting
//! connection blocks in `BLPOP` on one server's signal list, which every release pushes to,
//! and a waiter tries the quorum again when woken or at the holder's shortest remaining TTL.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! use std::time::Duration;
//!
//! let quorum = redis_blpop_lock::Quorum::new(
//!     ["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"]
//!         .map(redis::Client::open)
//!         .into_iter()
//!         .collect::<Result<Vec<_>, _>>()?,
//! )?;
//! let lock = redis_blpop_lock::Lock::builder(&quorum, "ledger")
//!     .expire(Duration::from_secs(10))
//!     .auto_renewal(true)
//!     .build()?;
//! let guard = lock.lock()?;
//! // ... while !guard.lost() ...
//! # drop(guard);
//! # Ok(())
//! # }
//! ```
//!
//! - **Taking it.** The try goes to every server at once with the same id and `PX` expiry, each
//!   server bounded by [`Quorum::server_timeout`] (100 ms by default: a dead server costs a
//!   refused connection, a frozen one that long). It is held when a majority said yes and
//!   validity is left: expiry − time since before the first request went out − drift (1 % of
//!   the expiry + 2 ms). [`Lock::lost`] and the renewal count from that validity. A try that
//!   did not win is given back (owner-checked) on every server that may hold it, including
//!   those whose reply was lost; a reply that is an error (a server at `maxmemory`, an ACL)
//!   counts as no answer. Fewer answers than a majority is an [`Error::Redis`] saying so, by
//!   the deadline (or [`Error::OutcomeUnknown`] when replies were lost, settled as on one
//!   server). A frozen server costs its own timeout, never the others' answers.
//! - **Split votes.** When no contender reached a majority, every contender gives its keys back
//!   at once, without a wake-up signal (it would wake the very waiters that hold them), and
//!   waits a random 1–10 ms, so the next round is not in lock-step. A majority
//!   won too late to be valid is given back with a signal, and its taker waits likewise.
//! - **Renewal.** An extend goes to every server and holds if the key is still ours on a
//!   majority, within the validity; the key is then taken again where it went missing (a
//!   server that restarted empty). Keys taken again do not count toward the majority: a lock
//!   reset, or forgotten by a majority, and used by someone else meanwhile is lost, as on one
//!   server. Fewer answers than a majority is an error, and the renewal tries again.
//! - **Release, `reset`, [`reset_all`]**: on every server, owner-checked.
//!
//! When to use it: when losing a lock in a failover matters more than a few hundred
//! microseconds per acquisition, and you run independent primaries for it. When not: it is
//! still not consensus. Its safety assumes bounded clock drift and process pauses shorter than
//! the validity; a paused holder learns of it only through `lost()`, like any lease.
//!
//! **A server that restarts empty** (no persistence, or `appendfsync` off) forgets the locks it
//! held, and a second majority can then form while the first holder still thinks it holds the
//! lock. The published remedy: keep a restarted server out for longer than the longest expiry
//! (or run it with `appendfsync always`). The renewal's re-take narrows the window but cannot
//! close it.
//!
//! **No fencing tokens.** A counter on each of N independent servers cannot be made to grow
//! monotonically across them, which is what a fencing token needs (Kleppmann's critique of
//! Redlock makes this point), so `.fencing(true)` with a quorum is refused with
//! [`Error::InvalidArgument`]. When correctness depends on fencing, use one server with
//! `.fencing(true)` (and replicas with [`LockBuilder::replicas`]), or a consensus store.
//!
//! # Metrics and tracing
//!
//! With the `metrics` feature, every handle reports through the [`metrics`](https://docs.rs/metrics) facade, to the
//! exporter the application installs, with the label `lock`:
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `redis_lock_wait_seconds` | histogram | `outcome` | from an acquire-style call's start to its end |
//! | `redis_lock_acquisitions_total` | counter | `outcome` | `acquired`, `timed_out`, `cancelled`, `error` |
//! | `redis_lock_hold_seconds` | histogram | | from the grant to the release, or the loss noticed |
//! | `redis_lock_handoffs_total` | counter | | grants that followed a wait (woken, or at the holder's expiry) |
//! | `redis_lock_lost_total` | counter | | `lost()` turned true (at most once per acquisition; a lock that does not renew and outlived its expiry counts at its release) |
//! | `redis_lock_renewal_failures_total` | counter | | a renewal that failed, to be tried again |
//! | `redis_lock_settlements_total` | counter | `outcome` | a lost reply settled by the call (`settled`) or by the background settle (`settled`), or given up on at the expiry (`unknown`) |
//! | `redis_lock_fence_regressions_total` | counter | | a fencing token not above one the handle took before (see [eviction](#servers-that-evict-keys)) |
//! | `redis_lock_evicting_servers` | gauge | `policy` (no `lock`) | servers found to evict keys, once each |
//!
//! A lock name never becomes a label by itself, since names can be unbounded: `lock` is
//! `"other"` unless the handle was given [`LockBuilder::metrics_label`], or the application
//! maps names to a bounded set with [`observe::label_lock_names`].
//!
//! With the `tracing` feature, each acquire-style call runs in a `redis_lock.acquire` span and
//! each hold is a `redis_lock.hold` span (from the grant to the release), both with the fields
//! `name` and `owner`; a loss, a failed renewal and a settled lost reply are `WARN` events. A
//! plain lock's hand-off marks its steps (the hub's pop, the waiter's wake) with `TRACE`
//! events of target `redis_lock::handoff` (docs/metrics.md). The `log` lines stay as they
//! are. With both features off, none of this is compiled in.
//!
//! ```no_run
//! # fn main() -> Result<(), redis_blpop_lock::Error> {
//! # let client = redis::Client::open("redis://127.0.0.1/")?;
//! let lock = redis_blpop_lock::Lock::builder(&client, "nightly-export")
//!     .metrics_label("export")
//!     .build()?;
//! lock.acquire()?; // counts in redis_lock_acquisitions_total{lock="export",outcome="acquired"}
//! lock.release()?; // and observes redis_lock_hold_seconds{lock="export"}
//! # Ok(())
//! # }
//! ```
//!
//! # Outcome rules
//!
//! A reply can be lost: the connection is killed, the network drops, the server stalls past the
//! deadline. The request may or may not have run, and on a stalled server it may still run
//! later. Every request the lock sends is in one of two classes, and the rule for each is
//! enforced in one place (`src/transport/send.rs` and the driver's settle path,
//! `src/driver/settle.rs`), and pinned by unit tests without a server (`src/driver/tests.rs`):
//!
//! - **Safe to send twice**, because a second run does no more than the first: reads (owner and
//!   TTL in one `MULTI`, `SCAN`, `MGET`); the unlock, which deletes only the owner it is given
//!   (also `reset`'s delete, with the owner it read); `extend`, which checks the owner; `CLIENT
//!   KILL`. When its reply is lost, it is sent once more on a new
//!   connection.
//! - **Not safe to send twice**: a try at the lock (`SET NX`, or `acquire.lua` with fencing),
//!   since a second run could take a lock freed after the
//!   first. When its reply is lost it is never sent again. First the connection it went out on
//!   is closed at the server (`CLIENT KILL ID`), so the try cannot still run later; then the
//!   outcome is settled by reading whose id `lock:<name>` holds (ours: the lock was taken, and
//!   its expiry counts from that read). While the server is away this is retried until the
//!   wait's deadline (or for the I/O timeout). When it cannot be done in time, the call returns
//!   `Error::OutcomeUnknown { name, operation }` and the handle asks Redis before its next
//!   acquire or release, instead of trusting what it believed. Meanwhile a background settle
//!   (a short-lived thread, or a task in async code; one per handle at most) goes on closing
//!   that connection and giving back whatever holds the handle's id (owner-checked) as soon as
//!   the servers answer, until that is done or the lock's expiry has passed, so a try that
//!   lands late never holds the lock for nobody; it outlives a handle dropped in that state.
//!   The handle and the settle take turns: only one of them counts on a give-back.
//! - **A request that never left** cannot have run: a connection the server closed while it
//!   sat idle is found closed before the request goes out (and a new one is used), and a
//!   refused connection is `Error::Redis`, at once, never `OutcomeUnknown`. A signal that
//!   stops and continues the process (SIGSTOP/SIGCONT, a debugger) does not lose a reply: the
//!   read goes on with the time left (over `rediss://`, the `redis` crate's connection, it
//!   can still).
//!
//! What callers can rely on as a result:
//!
//! - [`Lock::release`] never reports [`Error::NotAcquired`] for a lock its own unlock released:
//!   when the reply was lost and the second send finds the lock gone, that is success. When
//!   neither reply came back, it is `OutcomeUnknown`, and the next acquire asks Redis rather
//!   than refusing with `AlreadyAcquired`.
//! - [`Lock::reset`] deletes only the owner it read, so it can never delete a lock taken after it
//!   looked; [`reset_all`] likewise, batch by batch.
//! - A guard releases only its own acquisition: a guard dropped late never releases a later
//!   acquisition of the same handle.
//! - A fencing acquire takes the token and the lock together or neither; a corrupt counter is
//!   `Error::Corrupt` and nothing is written.
//!
//! # Server versions
//!
//! The lock runs on Redis 6.2 and later and on Valkey; `.ci/matrix` runs a compatibility suite
//! (every primitive, sync and async, the CLI and a chaos run of pauses and kills) against
//! Redis 6.2.14, 7.0.15 and 8.2.3 and Valkey 8.1.8 on every CI run. No wait is ever ended by
//! a command of another client: the older servers crash, losing every key, when `CLIENT
//! UNBLOCK` reaches a client whose command `CLIENT PAUSE` holds back (redis/redis#14164,
//! valkey-io/valkey#2117), and any pause holds back a waiter's `BLPOP` (an operator's,
//! `FAILOVER`, a manual `CLUSTER FAILOVER`). A waiter keeps its own time, and a process's
//! waiting connection is woken by a push to a list it listens on, the same on every server.
//!
//! # Least privilege
//!
//! A Redis user needs exactly this (`tests/integration/ops/security.rs` removes each right in turn
//! and shows an operation that then fails):
//!
//! ```text
//! ACL SETUSER locker on >password resetkeys ~lock:* ~lock-signal:* ~lock-fence:* ~lock-hub:* ~semaphore:* ~fair-lock:* ~rwlock:* ~election:* resetchannels -@all +set +get +pttl +blpop +evalsha +eval +multi +exec +scan +mget +incr +pexpire +del +lpush +lpop +type +time +zadd +zrem +zrange +zrangebyscore +zscore +zrank +zcard +hset +hget +hmget +hdel +client|id +client|kill +info
//! ```
//!
//! - `~semaphore:* ~fair-lock:* ~rwlock:* ~election:*` and `+time +zadd +zrem +zrange
//!   +zrangebyscore +zscore +zrank +zcard +hset +hget +hmget +hdel` are for the semaphore, the
//!   fair lock, the read-write lock and the election: the commands inside
//!   `scripts/queue_*.lua` and `scripts/election_*.lua` (their line is a sorted set, their
//!   holders a sorted set and a hash, their clock the server's `TIME`). A program that uses
//!   only the default lock can leave them out.
//! - `+multi +exec` read the owner and its TTL together ([`Lock::holder`], and settling a lost
//!   reply); `+scan +mget` are for [`reset_all`] and [`inspect::holders`] (`+scan`); `+type`
//!   is for `reset_all` and `reset` (`scripts/reset.lua`).
//! - `+info` reads the server's eviction policy (see
//!   [Servers that evict keys](#servers-that-evict-keys)), and its `run_id` on each new
//!   connection, by which a restart is known (see
//!   [Redis Cluster and Sentinel](#redis-cluster-and-sentinel)); without it the lock works,
//!   says nothing of eviction, and hands over at once what it takes after a restart.
//! - `+lpop` takes, in the round trip of the waiting connection's `BLPOP`, the other grants
//!   already in the process's inbox of a semaphore, fair lock, read-write lock or election,
//!   so that several released at once reach their waiters together. Without it they still
//!   do, one `BLPOP` each.
//! - `~lock-hub:*` is the list each process's waiting connection always listens on (see
//!   [One waiting connection per process](#one-waiting-connection-per-process)): a waiter on a
//!   new name pushes there so that it listens on that name too.
//! - `+client|id +client|kill` close a connection whose reply was lost (see [Outcome
//!   rules](#outcome-rules)). Without them the lock still works, as it does where the server
//!   does not know `CLIENT` (`rename-command CLIENT ""`, some proxies): lost replies are
//!   settled by reading state only, and the lock says so once in its log. These rights are
//!   not limited by key patterns: a user holding them may kill any connection on the server.
//!   Leave them out where that matters more.
//!
//! A missing right is an [`Error::Redis`]: `NOPERM` for a command the client sends (`EXECABORT`
//! naming `NOPERM` inside a `MULTI`); for a command inside a script Redis 7.0 answers
//! `ERR The user executing the script can't run this command or subcommand`.
//!
//! # Passwords and TLS
//!
//! Credentials go in the URL: `redis://:password@host:6379/` or `redis://user:password@host/`
//! (percent-encode special characters). A wrong password is an [`Error::Redis`].
//!
//! With the `tls` feature (the `redis` crate's rustls support with the ring provider) `rediss://`
//! URLs work and trust the system's root certificates. For a private CA:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # #[cfg(feature = "tls")]
//! # {
//! let client = redis::Client::build_with_tls(
//!     "rediss://redis.internal:6380/",
//!     redis::TlsCertificates { client_tls: None, root_cert: Some(std::fs::read("ca.pem")?) },
//! )?;
//! let lock = redis_blpop_lock::Lock::new(&client, "report")?;
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! If your application also enables rustls's `aws-lc-rs` provider, install one process-wide
//! provider before connecting (`rustls::crypto::ring::default_provider().install_default()`).
//!
//! # Errors
//!
//! [`Error`] has a variant for each thing a caller may want to handle: `AlreadyAcquired` (this id
//! already holds the lock), `NotAcquired` (release or extend of a lock that is not ours; nothing
//! changed), `NotExpirable`, `InvalidArgument` (empty name or id, an expiry of zero or over
//! 2^40 ms, auto-renewal without an expiry, a `max_hold` of zero, without an expiry or shorter
//! than it; checked when the handle is built), `Redis` (the
//! server's own message: `WRONGTYPE`, `NOPERM`, `READONLY`, a refused connection, ...),
//! `UnexpectedReply`, `Random` (the OS random source failed: no weaker fallback) and `Thread`;
//! and, with the deadline and outcome rules above, `Cancelled { name }` (the handle's
//! `CancelToken` was cancelled during a wait), `OutcomeUnknown { name, operation }` (a reply was
//! lost and the outcome could not be settled by reading Redis before the deadline) and
//! `Corrupt { key, reason }` (a key of the lock holds something no lock writes, such as a
//! non-integer fencing counter or a list at `lock:<name>`); with the `tokio` feature,
//! `Lost { name }` (the async `with_lock` dropped its work because the lock was lost while it
//! ran). No call panics on any input or any reply. Log lines go through the `log` crate and
//! name the lock.
//!
//! # Keys
//!
//! | key | type | what |
//! |---|---|---|
//! | `lock:<name>` | string | the owner's id, with a `PX` expiry when the lock has one |
//! | `lock-signal:<name>` | list | one element pushed by a release or reset; expires after `signal_expire` |
//! | `lock-fence:<name>` | string (counter) | the last fencing token handed out (only with `.fencing(true)`) |
//!
//! These are python-redis-lock 4.x's key names, ids and unlock script, which is what makes the
//! two interoperate. On a cluster `<name>` is `{<name>}` unless the name has a hash tag of its
//! own, so there, and only there, the locks `x` and `{x}` are one lock. The semaphore's, the
//! fair lock's, the read-write lock's and the election's keys are listed in [the queue
//! engine](handle#the-queue-engine) and [Leader election](#leader-election). How waiting works,
//! the connection pool and the scripts are described in the repository's `docs/design.md`.
//!
//! # Names
//!
//! One word for each idea, here and in the code (`docs/design.md` names the internal ones):
//!
//! - **lock**: python-redis-lock's mutex on `lock:<name>` ([`Lock`]).
//! - **queue engine**: the fair queue on the server (`scripts/queue_*.lua`) under the three
//!   **primitives** ([`inspect::Primitive`]): the semaphore, the fair lock, the read-write
//!   lock and the election. A primitive has a **capacity**, and each acquisition asks for **units** of it.
//! - **fair**: served in arrival order. A **fair lock** is a [`Lock`] built with
//!   `.fair(true)`, on the queue engine.
//! - **handle**: a [`Lock`], [`Semaphore`], [`RwLock`], [`Election`] or [`Cache`] value;
//!   many handles, in many processes, may name one lock. Each is one type ([`handle`]) on
//!   either **runtime** ([`Runtime`]): [`Blocking`] or `Tokio`.
//! - **acquisition**: one take of a lock or of units; it is given back once. A **guard** (a
//!   **permit**, for a semaphore) stands for one and gives it back when dropped; it derefs to
//!   its **hold** ([`handle::Hold`]), which says whether it was lost.
//! - **lease**: what an acquisition holds on the server, with its expiry; a **renewal**
//!   extends it. An acquisition is **lost** when its lease may have ended.
//! - **holder**: whoever holds a lease. [`Holder`] describes a lock's, and
//!   [`inspect::Held`] a lock as a listing finds it.
//! - **waiter**: an acquisition that waits. On the queue engine it stands in the primitive's
//!   **line** (its queue of tickets), and its process proves all its waiters alive by one
//!   **heartbeat**; a process that misses two **lapses**, and its waiters leave the line.
//!   The process's **inbox** (a list per primitive) brings their grants, read by its
//!   **hub**: its one waiting connection on that server.
//!
//! # Cargo features
//!
//! The library takes clients of the `redis` crate it depends on (1.8 or a later 1.x);
//! [`redis_blpop_lock::redis`](crate::redis) re-exports that crate, for an application whose
//! own `redis` dependency is another version.
//!
//! - `tls`: `rediss://` URLs, through rustls with the ring crypto provider.
//! - `cluster`: [`redis::cluster::ClusterClient`] as a [`Backend`] (the `redis` crate's
//!   `cluster` feature).
//! - `sentinel`: [`Sentinel`] (no extra dependency). [`Quorum`] needs no feature.
//! - `tokio`: the async API, [`aio`] (the `redis` crate's `tokio-comp`).
//! - `metrics`: metrics through the `metrics` facade; see [Metrics and
//!   tracing](#metrics-and-tracing).
//! - `tracing`: spans and events through `tracing`.
//! - `cli`: the `redis-lock` command-line tool (flock(1) for a fleet, and the operator's reset;
//!   `--cluster` and `--sentinel` included); see the repository's `docs/cli.md`.
#![deny(missing_docs)]

#[cfg(feature = "tokio")]
pub mod aio;
mod backend;
mod cancel;
mod config;
mod driver;
mod error;
pub mod handle;
pub mod inspect;
#[cfg(feature = "model")]
#[doc(hidden)]
pub mod model;
pub mod observe;
mod protocol;
mod transport;

pub use backend::quorum::Quorum;
#[cfg(feature = "sentinel")]
pub use backend::sentinel::Sentinel;
pub use backend::Backend;
pub use cancel::CancelToken;
pub use driver::Holder;
pub use error::Error;
pub use handle::LockBuilder;
pub use handle::{with_lock, ArcLockGuard, Blocking, LockGuard, Runtime};

/// A distributed lock, blocking: [`handle::Lock`] on the [`Blocking`] runtime.
pub type Lock = handle::Lock<Blocking>;

/// A semaphore, blocking: [`handle::Semaphore`] on the [`Blocking`] runtime.
pub type Semaphore = handle::Semaphore<Blocking>;
/// A permit of a blocking [`Semaphore`].
pub type SemaphorePermit<'a> = handle::SemaphorePermit<'a, Blocking>;
/// A blocking permit that owns an `Arc` of its [`Semaphore`].
pub type ArcSemaphorePermit = handle::ArcSemaphorePermit<Blocking>;
/// A read-write lock, blocking: [`handle::RwLock`] on the [`Blocking`] runtime.
pub type RwLock = handle::RwLock<Blocking>;
/// A read lock of a blocking [`RwLock`].
pub type RwLockReadGuard<'a> = handle::RwLockReadGuard<'a, Blocking>;
/// The write lock of a blocking [`RwLock`].
pub type RwLockWriteGuard<'a> = handle::RwLockWriteGuard<'a, Blocking>;
/// A dogpile cache, blocking: [`handle::Cache`] on the [`Blocking`] runtime.
pub type Cache = handle::Cache<Blocking>;
/// A leader election, blocking: [`handle::Election`] on the [`Blocking`] runtime.
pub type Election = handle::Election<Blocking>;
/// A term of office won through a blocking [`Election`].
pub type Leadership = handle::Leadership<Blocking>;
/// A blocking watch of an [`Election`]'s leader: an iterator of its changes.
pub type Watch = handle::Watch<Blocking>;
pub use inspect::reset_all::reset_all;
pub use protocol::election::{Leader, Watched};

/// The `redis` crate this library is built against.
///
/// The API takes that crate's clients: [`redis::Client`], and with the `cluster` feature
/// `redis::cluster::ClusterClient`. An application whose own `redis` dependency is another
/// version has another `redis::Client` type, which the API does not take; it can name ours
/// through this re-export instead, as `deadpool-redis` and `bb8-redis` re-export theirs.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use redis_blpop_lock::Lock;
///
/// let client = redis_blpop_lock::redis::Client::open("redis://127.0.0.1/")?;
/// let lock = Lock::new(&client, "nightly-report")?;
/// let _guard = lock.lock()?;
/// # Ok(())
/// # }
/// ```
pub use redis;
