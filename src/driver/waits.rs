//! Waiting shared by the tasks of one process: per name, one connection blocked in
//! `BLPOP lock-signal:<name>` for all the tasks that wait on it, and a bench of those tasks in
//! arrival order. Behind the `BLPOP` goes the first task's try, as behind a blocking waiter's
//! own, so Redis hands the lock over in the instant it wakes the bench; the try's replies go to
//! that task, which settles them as a blocking waiter does.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;
use tokio::sync::Notify;

use crate::config::settings::Settings;
use crate::protocol::keys::Keys;
use crate::protocol::lock;
use crate::protocol::redirect;
use crate::protocol::request::Request;
use crate::transport::admin::closed_by_end;
use crate::transport::aio::{finish, AsyncTransport, AsyncWaiter};
use crate::transport::send::{longer, send_repeatable, AnyTransport, FIRST_PAUSE};
use crate::transport::{Admin, ConnId, Fault};
use crate::CancelToken;

/// The shared waits on one transport, by signal key.
#[derive(Default)]
pub(crate) struct Waits {
    benches: Mutex<HashMap<String, Arc<Bench>>>,
}

/// The shared waits of each transport alive, kept here rather than by the transport, which
/// knows nothing of waiting.
static ALL: LazyLock<Mutex<Vec<WaitsOf>>> = LazyLock::new(Default::default);

/// A transport, and its shared waits.
type WaitsOf = (Weak<dyn AsyncTransport>, Arc<Waits>);

/// The tasks waiting on one name, and the one `BLPOP` they share.
struct Bench {
    keys: Keys,
    io_timeout: Duration,
    state: Mutex<State>,
    /// Told when a task sits down, leaves, or gives up its try in flight.
    changed: Notify,
}

#[derive(Default)]
struct State {
    /// The seated tasks, by arrival.
    seats: BTreeMap<u64, Arc<Seat>>,
    next: u64,
    /// The tickets alive, seated or not: the bench lasts while any is.
    tickets: usize,
    /// Whether a task runs the `BLPOP`.
    running: bool,
    /// Why the server refused the last `BLPOP` (the signal key is not a list, an ACL).
    refused: Option<redis::ServerError>,
}

/// One waiting task's place in a bench, and what it tries as.
struct Seat {
    arrival: u64,
    tries_as: TriesAs,
    /// When its wait ends (the holder's expiry, its deadline, or the longest block), and by
    /// when the replies of its try must be in (the blocking waiter's bound for its own).
    until: Mutex<(Instant, Instant)>,
    /// Its try is behind the `BLPOP` now: its replies will come to it.
    in_flight: AtomicBool,
    /// Its replies came and it has not sat again yet: the bench waits for it, its place
    /// being first.
    answered: AtomicBool,
    /// It was cancelled with its try in flight: the `BLPOP` ends now.
    leaving: AtomicBool,
    /// Its ticket is gone: a try of its that took the lock is given back.
    gone: AtomicBool,
    /// The replies of its try, for it to take.
    waited: Mutex<Option<Replied>>,
    /// The shared wait failed: it looks at the lock by itself.
    look: AtomicBool,
    woken: Notify,
}

/// What a seated task's try is sent as, and released as if nobody takes it.
struct TriesAs {
    id: String,
    expire_ms: Option<u64>,
    fencing: bool,
    replicas: Option<(u32, u64)>,
    signal_expire_ms: u64,
}

/// A `BLPOP` + try of a seated task, and what came of it.
pub(crate) struct Replied {
    pub(crate) request: Request,
    /// When it was sent: a key it set expires no earlier than its expiry from then.
    pub(crate) sent: Instant,
    pub(crate) replies: Result<Vec<Value>, Fault>,
}

/// Why a wait ended.
pub(crate) enum Woken {
    /// The bench's `BLPOP` ended (a signal, or this task's time) and its try behind it came
    /// back.
    Replied(Box<Replied>),
    /// This task's own time came while another task's try was behind the `BLPOP`: it tries
    /// by itself.
    Try,
    /// The shared wait failed (the connection, the server): it looks at the lock by itself.
    Look,
    /// The server refused the `BLPOP`.
    Refused(redis::ServerError),
    Cancelled,
}

/// A task's place in the bench of one name, kept across its waits so that it keeps its turn.
pub(crate) struct Ticket {
    transport: Arc<dyn AsyncTransport>,
    bench: Arc<Bench>,
    seat: Arc<Seat>,
}

impl Waits {
    /// The shared waits on `transport`.
    fn of(transport: &Arc<dyn AsyncTransport>) -> Arc<Waits> {
        let mut all = ALL.lock();
        all.retain(|(alive, _)| alive.strong_count() > 0);
        let found = all
            .iter()
            .find(|(alive, _)| std::ptr::addr_eq(alive.as_ptr(), Arc::as_ptr(transport)));
        if let Some((_, waits)) = found {
            return Arc::clone(waits);
        }
        let waits = Arc::new(Waits::default());
        all.push((Arc::downgrade(transport), Arc::clone(&waits)));
        waits
    }

    /// A place at the end of the bench of lock `keys`, for a handle with `settings`; the
    /// bench's `BLPOP` starts if none runs.
    pub(crate) fn join(
        transport: &Arc<dyn AsyncTransport>,
        keys: &Keys,
        settings: &Settings,
    ) -> Ticket {
        let waits = Waits::of(transport);
        let mut benches = waits.benches.lock();
        let bench = benches.entry(keys.signal.clone()).or_insert_with(|| {
            Arc::new(Bench {
                keys: keys.clone(),
                io_timeout: settings.io_timeout,
                state: Mutex::default(),
                changed: Notify::new(),
            })
        });
        // Counted under the benches' lock: a bench is only retired from the map with no
        // ticket alive, so no ticket is ever in a bench that is not the name's.
        let arrival = {
            let mut state = bench.state.lock();
            state.next += 1;
            state.tickets += 1;
            state.next
        };
        let seat = Arc::new(Seat {
            arrival,
            tries_as: TriesAs {
                id: settings.id.clone(),
                expire_ms: settings.expire_ms,
                fencing: settings.fencing,
                replicas: settings.replicas,
                signal_expire_ms: settings.signal_expire_ms,
            },
            until: Mutex::new((Instant::now(), Instant::now())),
            in_flight: AtomicBool::new(false),
            answered: AtomicBool::new(false),
            leaving: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            waited: Mutex::new(None),
            look: AtomicBool::new(false),
            woken: Notify::new(),
        });
        Ticket {
            transport: Arc::clone(transport),
            bench: Arc::clone(bench),
            seat,
        }
    }
}

impl Ticket {
    /// Waits for the lock until `until`, or until `cancel`; the replies of a try behind the
    /// `BLPOP` are due by `reply_by`. With its try in flight a cancel ends the `BLPOP` and the
    /// wait still returns the try's replies, for the caller to give back a lock it took.
    pub(crate) async fn wait(
        &self,
        until: Instant,
        reply_by: Instant,
        cancel: &CancelToken,
    ) -> Woken {
        *self.seat.until.lock() = (until, reply_by);
        self.sit();
        let alarm = tokio::time::sleep_until(until.into());
        tokio::pin!(alarm);
        let (mut rang, mut cancelled) = (false, false);
        loop {
            // Replies that came are taken first, whatever else woke the task at the same time.
            if let Some(waited) = self.seat.waited.lock().take() {
                return Woken::Replied(Box::new(waited));
            }
            tokio::select! {
                () = self.seat.woken.notified() => {
                    // Out of the bench first, as for a try alone: not while the bench sends
                    // a try of this task's own.
                    if self.seat.look.swap(false, Ordering::SeqCst) && self.stand_up() {
                        return Woken::Look;
                    }
                    let refused = self.bench.state.lock().refused.clone();
                    if let Some(refused) = refused.filter(|_| self.stand_up()) {
                        return Woken::Refused(refused);
                    }
                }
                // In flight, the bench ends the `BLPOP` at this same time.
                () = &mut alarm, if !rang => {
                    rang = true;
                    if self.stand_up() {
                        return Woken::Try;
                    }
                }
                () = cancel.cancelled(), if !cancelled => {
                    cancelled = true;
                    if self.stand_up() {
                        return Woken::Cancelled;
                    }
                    self.seat.leaving.store(true, Ordering::SeqCst);
                    self.bench.changed.notify_one();
                }
            }
        }
    }

    /// Takes this task's seat, or takes it again in its first place; starts the `BLPOP` if
    /// none runs.
    fn sit(&self) {
        let mut state = self.bench.state.lock();
        state
            .seats
            .entry(self.seat.arrival)
            .or_insert_with(|| Arc::clone(&self.seat));
        self.seat.leaving.store(false, Ordering::SeqCst);
        self.seat.answered.store(false, Ordering::SeqCst);
        self.seat.look.store(false, Ordering::SeqCst);
        if !state.running
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            state.running = true;
            drop(state);
            runtime.spawn(run(Arc::clone(&self.bench), Arc::clone(&self.transport)));
            return;
        }
        drop(state);
        self.bench.changed.notify_one();
    }

    /// Leaves the seat to try alone, unless its try is in flight already or its replies have
    /// come.
    fn stand_up(&self) -> bool {
        let mut state = self.bench.state.lock();
        if self.seat.in_flight.load(Ordering::SeqCst) || self.seat.waited.lock().is_some() {
            return false;
        }
        state.seats.remove(&self.seat.arrival);
        true
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let waited = {
            let mut state = self.bench.state.lock();
            state.seats.remove(&self.seat.arrival);
            state.tickets -= 1;
            // Marked under the lock the bench delivers under: replies that come later are
            // given back by the bench; ones already here, by this ticket.
            self.seat.gone.store(true, Ordering::SeqCst);
            self.seat.waited.lock().take()
        };
        if let Some(waited) = waited {
            give_back(&self.transport, &self.bench, &self.seat, &waited);
        }
        self.bench.changed.notify_one();
    }
}

/// What the bench's task does next.
enum Duty {
    /// Block for this seat, its try behind the `BLPOP`.
    Wait(Arc<Seat>),
    /// No task is seated, or the first is settling its replies; the tasks with tickets will
    /// sit again or leave.
    Idle,
    /// No ticket is left: the bench is retired.
    Stop,
}

impl Bench {
    /// The first seat, marked in flight; or what to do when there is none.
    fn next_duty(self: &Arc<Self>, transport: &Arc<dyn AsyncTransport>) -> Duty {
        let waits = Waits::of(transport);
        let mut benches = waits.benches.lock();
        let mut state = self.state.lock();
        if let Some(seat) = state.seats.values().next() {
            if seat.answered.load(Ordering::SeqCst) {
                return Duty::Idle;
            }
            seat.in_flight.store(true, Ordering::SeqCst);
            return Duty::Wait(Arc::clone(seat));
        }
        if state.tickets > 0 {
            return Duty::Idle;
        }
        state.running = false;
        if benches
            .get(&self.keys.signal)
            .is_some_and(|bench| Arc::ptr_eq(bench, self))
        {
            benches.remove(&self.keys.signal);
        }
        Duty::Stop
    }

    /// Hands `waited` to `seat`, which keeps its place until it sits again or leaves; gives
    /// back what it took if its ticket is gone.
    fn deliver(&self, transport: &Arc<dyn AsyncTransport>, seat: &Seat, waited: Replied) {
        let gone = {
            let state = self.state.lock();
            seat.in_flight.store(false, Ordering::SeqCst);
            seat.answered.store(true, Ordering::SeqCst);
            let gone = seat.gone.load(Ordering::SeqCst);
            if !gone {
                *seat.waited.lock() = Some(waited);
                drop(state);
                seat.woken.notify_one();
                return;
            }
            waited
        };
        give_back(transport, self, seat, &gone);
    }

    /// Tells `seat`, whose wait ended by closing its connection at its time, to look at the
    /// lock by itself; the bench waits for it as for one settling its replies. What a try of
    /// a task that is gone may have taken is given back.
    fn look_alone(&self, transport: &Arc<dyn AsyncTransport>, seat: &Seat) {
        let state = self.state.lock();
        seat.in_flight.store(false, Ordering::SeqCst);
        if seat.gone.load(Ordering::SeqCst) {
            drop(state);
            give_back_on(transport, self, seat, None);
            return;
        }
        seat.answered.store(true, Ordering::SeqCst);
        seat.look.store(true, Ordering::SeqCst);
        drop(state);
        seat.woken.notify_one();
    }

    /// Wakes every seated task: to hear that the server refused the wait (`refused`), or to
    /// look at the lock by itself because the wait failed (`None`).
    fn wake_all(&self, refused: Option<redis::ServerError>) {
        let mut state = self.state.lock();
        let look = refused.is_none();
        state.refused = refused;
        for seat in state.seats.values() {
            seat.look.store(look, Ordering::SeqCst);
            seat.woken.notify_one();
        }
    }
}

/// A try behind the `BLPOP` whose task is gone may have taken the lock: it is released,
/// owner-checked (which wakes the next waiter). A handle's next call waits for its turn until
/// the task is done, so no later acquisition of that id is there to be released.
fn give_back(transport: &Arc<dyn AsyncTransport>, bench: &Bench, seat: &Seat, waited: &Replied) {
    // A try whose reply was lost may yet run: its connection is closed first.
    let lost_on = match &waited.replies {
        Ok(replies) => {
            let mut tried = replies.get(1..).unwrap_or_default().to_vec();
            let _ = waited.request.acks(&mut tried);
            let taken = lock::parse_try(&bench.keys, &tried);
            if !matches!(taken, Ok(lock::Attempt::Acquired { .. })) {
                return;
            }
            None
        }
        Err(Fault::NotSent(_)) => return,
        Err(Fault::Lost { conn, .. }) => *conn,
    };
    give_back_on(transport, bench, seat, lost_on);
}

/// Gives back what a try of `seat`'s may have taken, after closing `lost_on`, the connection
/// where it may yet run.
fn give_back_on(
    transport: &Arc<dyn AsyncTransport>,
    bench: &Bench,
    seat: &Seat,
    lost_on: Option<ConnId>,
) {
    let unlock = lock::unlock(
        &bench.keys,
        seat.tries_as.id.as_bytes(),
        seat.tries_as.signal_expire_ms,
    );
    let deadline = Instant::now() + bench.io_timeout;
    let name = &bench.keys.lock;
    give_back_unattended(
        Arc::clone(transport),
        lost_on,
        unlock,
        deadline,
        format!("{name:?}: a lock taken for a task that is gone stays until it expires"),
    );
}

/// The shared `BLPOP` of one name: blocks for the first seated task, its try behind.
async fn run(bench: Arc<Bench>, transport: Arc<dyn AsyncTransport>) {
    let _running = Running(Arc::clone(&bench));
    let mut conn: Option<Box<dyn AsyncWaiter>> = None;
    let mut pause = FIRST_PAUSE;
    loop {
        let seat = {
            // Registered before the bench is looked at, so that no change in between is
            // missed; and only then, or it would take the notices meant for the wait below.
            let changed = bench.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            match bench.next_duty(&transport) {
                Duty::Wait(seat) => seat,
                Duty::Idle => {
                    changed.await;
                    continue;
                }
                Duty::Stop => break,
            }
        };
        let (waited, closed) = wait_once(&bench, &transport, &mut conn, &seat).await;
        // What the other seated tasks are to hear; the first hears it from its own replies.
        let others: Option<Option<redis::ServerError>> = match (closed, &waited.replies) {
            // The `BLPOP` was ended by closing its connection, for this seat alone.
            (Some(Ended::AtTime), _) => {
                bench.look_alone(&transport, &seat);
                continue;
            }
            (Some(Ended::Leaving), _) => None,
            (None, Ok(replies)) => match replies.first() {
                Some(Value::ServerError(e)) if redirect::of(e).is_some() => {
                    // The key lives elsewhere now: the next wait takes a connection there.
                    conn = None;
                    Some(None)
                }
                Some(Value::ServerError(e)) => Some(Some(e.clone())),
                _ => {
                    bench.state.lock().refused = None;
                    None
                }
            },
            (None, Err(fault)) => {
                log::warn!(
                    "the shared wait on {:?} failed: {fault:?}",
                    bench.keys.signal
                );
                conn = None;
                Some(None)
            }
        };
        bench.deliver(&transport, &seat, waited);
        let Some(refused) = others else {
            pause = FIRST_PAUSE;
            continue;
        };
        bench.wake_all(refused);
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = bench.changed.notified() => {}
        }
        pause = longer(pause);
    }
    if let Some(conn) = conn {
        transport.rest(conn);
    }
}

/// A bench's `BLPOP` task, which its runtime may drop at any `.await` when it shuts down (tasks
/// of other runtimes may be queued too): the tasks seated then look at the lock by themselves
/// (a try in flight has been given back by then, see [`InFlight`]), and the next to sit starts
/// the `BLPOP` again on its own runtime.
struct Running(Arc<Bench>);

impl Drop for Running {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.running = false;
        for seat in state.seats.values() {
            seat.in_flight.store(false, Ordering::SeqCst);
            seat.look.store(true, Ordering::SeqCst);
            seat.woken.notify_one();
        }
    }
}

/// How the bench ended a `BLPOP` by closing its connection (where `CLIENT UNBLOCK` is not
/// safe), which is then no failure of the shared wait.
#[derive(Clone, Copy)]
enum Ended {
    /// At the seat's time: its try did not run, and it looks at the lock by itself.
    AtTime,
    /// For a seat that left: its replies are lost, and it settles them as any lost reply.
    Leaving,
}

/// One `BLPOP` with `seat`'s try behind it. The `BLPOP` ends at the seat's time, or at once
/// when it leaves, with `CLIENT UNBLOCK`: the try then runs, as after a wake-up. Where
/// `CLIENT UNBLOCK` is not safe the connection is closed instead, and the wait says so.
async fn wait_once(
    bench: &Bench,
    transport: &Arc<dyn AsyncTransport>,
    conn: &mut Option<Box<dyn AsyncWaiter>>,
    seat: &Seat,
) -> (Replied, Option<Ended>) {
    let (until, reply_by) = *seat.until.lock();
    let tries_as = &seat.tries_as;
    let block = until.saturating_duration_since(Instant::now());
    let request = lock::wait_then_try(
        &bench.keys,
        &tries_as.id,
        tries_as.expire_ms,
        tries_as.fencing,
        Some(block),
    )
    .replicated(tries_as.replicas);
    let deadline = (Instant::now() + bench.io_timeout).min(reply_by);
    let waiter = match conn {
        Some(waiter) => waiter,
        None => match transport.waiter(bench.keys.slot, deadline).await {
            Ok(waiter) => conn.insert(waiter),
            Err(fault) => return (not_sent(request, fault), None),
        },
    };
    if let Err(fault) = waiter.ready(deadline).await {
        *conn = None;
        return (not_sent(request, fault), None);
    }
    let id = waiter.id();
    let sent = Instant::now();
    let in_flight = InFlight {
        transport,
        bench,
        seat,
        conn: id,
        landed: false,
    };
    let mut ended = None;
    let replies = {
        let waiting = waiter.wait(&request, reply_by);
        tokio::pin!(waiting);
        let alarm = tokio::time::sleep_until(until.into());
        tokio::pin!(alarm);
        loop {
            // The wait is polled first: it goes out before anything may end it.
            tokio::select! {
                biased;
                replies = &mut waiting => break replies,
                () = &mut alarm, if ended.is_none() => {
                    ended = Some(Ended::AtTime);
                    end(transport, id, reply_by, false).await;
                }
                () = bench.changed.notified(), if ended.is_none() => {
                    if seat.leaving.load(Ordering::SeqCst) || seat.gone.load(Ordering::SeqCst) {
                        ended = Some(Ended::Leaving);
                        end(transport, id, reply_by, true).await;
                    }
                }
            }
        }
    };
    in_flight.landed();
    if replies.is_err() {
        *conn = None;
    }
    let closed = match &replies {
        Err(Fault::Lost { error, .. }) if closed_by_end(id, error) => ended,
        _ => None,
    };
    let waited = Replied {
        request,
        sent,
        replies,
    };
    (waited, closed)
}

/// A `BLPOP` + try on its way. Should the bench's task be dropped before its replies come (its
/// runtime ended), the try may yet take the lock for a task that is gone too, and a lock
/// without expiry would stay taken for good: its connection is closed and what it took given
/// back, before the seated tasks are told to look for themselves.
struct InFlight<'a> {
    transport: &'a Arc<dyn AsyncTransport>,
    bench: &'a Bench,
    seat: &'a Seat,
    conn: Option<ConnId>,
    landed: bool,
}

impl InFlight<'_> {
    /// Its replies came, or its fault: the seat settles them.
    fn landed(mut self) {
        self.landed = true;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.landed {
            give_back_on(self.transport, self.bench, self.seat, self.conn);
        }
    }
}

/// A wait that never went out: its try did not run.
fn not_sent(request: Request, fault: Fault) -> Replied {
    Replied {
        request,
        sent: Instant::now(),
        replies: Err(Fault::NotSent(fault.into_error())),
    }
}

/// Ends the `BLPOP` of connection `id` as if it had timed out, by `deadline`; the try behind
/// it (if any: a queue waiter's `BLPOP` has none) then runs. Without the right to (an ACL) it ends at the server's own timer, a little
/// later. For a task that left (`at_once`), a `BLPOP` not blocked yet (the `UNBLOCK` overtook
/// it on its way) is cut off by closing the connection instead: its try then never runs.
pub(super) async fn end(
    transport: &Arc<dyn AsyncTransport>,
    id: Option<ConnId>,
    deadline: Instant,
    at_once: bool,
) {
    let Some(id) = id else { return };
    if let Ok(Admin::Nothing) = transport.unblock(id, deadline).await
        && at_once
    {
        let _ = transport.kill(id, deadline).await;
    }
}

/// Gives back a lock that a request nobody waits for may have taken: closes `conn`, where
/// that request may yet run, then sends `unlock`, by `deadline`; unattended (see
/// [`finish`](crate::transport::aio::finish)), a failure logged after `failed`.
pub(crate) fn give_back_unattended(
    transport: Arc<dyn AsyncTransport>,
    conn: Option<ConnId>,
    unlock: Request,
    deadline: Instant,
    failed: String,
) {
    let giving = settle(
        Arc::clone(&transport),
        conn,
        unlock.clone(),
        deadline,
        failed.clone(),
    );
    finish::spawn_or_block(giving, move || {
        settle(transport, conn, unlock, deadline, failed)
    });
}

async fn settle(
    transport: Arc<dyn AsyncTransport>,
    conn: Option<ConnId>,
    unlock: Request,
    deadline: Instant,
    failed: String,
) {
    if let Some(conn) = conn {
        let _ = transport.close(conn, deadline).await;
    }
    if let Err(e) = send_repeatable(&*transport, &unlock, deadline).await {
        log::error!("{failed}: {e}");
    }
}
