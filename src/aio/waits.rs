//! Waiting shared by the tasks of one process: one connection blocked in
//! `BLPOP lock-signal:<name>` per name, whoever many tasks wait on it, and a queue of those
//! tasks in arrival order. A signal goes to the first task in the queue; one handed to a task
//! that is gone goes to the next, or back to Redis when there is none.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::Value;
use tokio::sync::Notify;

use crate::protocol::keys::Keys;
use crate::protocol::lease::MAX_BLOCK;
use crate::protocol::redirect;
use crate::protocol::requests;
use crate::transport::aio::{Async, AsyncTransport, AsyncWaiter};
use crate::CancelToken;

/// The first pause after a failed wait; it doubles up to [`MAX_PAUSE`].
const MIN_PAUSE: Duration = Duration::from_millis(10);
const MAX_PAUSE: Duration = Duration::from_millis(500);

/// The shared waits at one place, by signal key.
#[derive(Default)]
pub(crate) struct Waits {
    queues: Mutex<HashMap<String, Arc<Queue>>>,
}

/// The tasks waiting on one name, and the state of the one `BLPOP` they share.
struct Queue {
    keys: Keys,
    io_timeout: Duration,
    state: Mutex<State>,
    /// Told when the last task leaves, so that the `BLPOP` under way ends at once.
    emptied: Notify,
}

#[derive(Default)]
struct State {
    /// The waiting tasks' seats, by arrival.
    seats: BTreeMap<u64, Arc<Seat>>,
    next: u64,
    /// Whether a task runs the `BLPOP`.
    running: bool,
    /// Why the server refused the `BLPOP` (the signal key is not a list, an ACL), for the
    /// tasks woken to hear it.
    refused: Option<redis::ServerError>,
}

/// One waiting task's place in a queue.
#[derive(Default)]
struct Seat {
    /// A wake-up signal was handed to this task and not yet taken.
    signalled: AtomicBool,
    /// The shared wait failed: this task tries by itself.
    retry: AtomicBool,
    woken: Notify,
}

/// A task's place in the queue of one name, kept across its waits so that it keeps its turn.
pub(crate) struct Ticket {
    transport: Arc<dyn AsyncTransport>,
    queue: Arc<Queue>,
    arrival: u64,
    seat: Arc<Seat>,
}

/// Why a wait ended.
pub(crate) enum Woken {
    /// A release's signal, or the wait's own time: either way the task tries now.
    Try,
    /// The server refused the `BLPOP`.
    Refused(redis::ServerError),
    Cancelled,
}

impl Waits {
    /// A place at the end of the queue of lock `keys`, starting its `BLPOP` if none runs.
    pub(crate) fn join(
        transport: &Arc<dyn AsyncTransport>,
        keys: &Keys,
        io_timeout: Duration,
    ) -> Ticket {
        let queue = {
            let mut queues = transport.waits().queues.lock();
            let queue = queues.entry(keys.signal.clone()).or_insert_with(|| {
                Arc::new(Queue {
                    keys: keys.clone(),
                    io_timeout,
                    state: Mutex::default(),
                    emptied: Notify::new(),
                })
            });
            Arc::clone(queue)
        };
        let arrival = {
            let mut state = queue.state.lock();
            state.next += 1;
            state.next
        };
        let ticket = Ticket {
            transport: Arc::clone(transport),
            queue,
            arrival,
            seat: Arc::default(),
        };
        ticket.sit();
        ticket
    }
}

impl Ticket {
    /// Takes this ticket's seat again if a signal took it out of the queue, in its first
    /// place; starts the `BLPOP` if none runs.
    fn sit(&self) {
        let mut state = self.queue.state.lock();
        state
            .seats
            .entry(self.arrival)
            .or_insert_with(|| Arc::clone(&self.seat));
        if state.running {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            state.running = true;
            drop(state);
            runtime.spawn(run(Arc::clone(&self.queue), Arc::clone(&self.transport)));
        }
    }

    /// Waits for a signal until `until` at the latest, or until `cancel`.
    pub(crate) async fn wait(&self, until: Instant, cancel: &CancelToken) -> Woken {
        self.sit();
        let sleep = tokio::time::sleep_until(until.into());
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                () = self.seat.woken.notified() => {
                    if self.seat.signalled.swap(false, Ordering::SeqCst)
                        || self.seat.retry.swap(false, Ordering::SeqCst)
                    {
                        return Woken::Try;
                    }
                    if let Some(refused) = self.queue.state.lock().refused.clone() {
                        return Woken::Refused(refused);
                    }
                }
                () = &mut sleep => return Woken::Try,
                () = cancel.cancelled() => return Woken::Cancelled,
            }
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        // Under the queue's lock, as a hand-off marks a seat: a signal is either seen here or
        // handed to the next seat.
        let (empty, signalled) = {
            let mut state = self.queue.state.lock();
            state.seats.remove(&self.arrival);
            let signalled = self.seat.signalled.swap(false, Ordering::SeqCst);
            (state.seats.is_empty(), signalled)
        };
        // A signal handed to this task and not taken is the next one's.
        if signalled && !self.queue.hand_off() {
            pass_on(&self.transport, &self.queue);
        }
        if empty {
            self.queue.emptied.notify_one();
        }
    }
}

impl Queue {
    /// Hands a signal to the first task in the queue, taking it out of the queue; false when
    /// there is none.
    fn hand_off(&self) -> bool {
        let mut state = self.state.lock();
        let Some((_, seat)) = state.seats.pop_first() else {
            return false;
        };
        seat.signalled.store(true, Ordering::SeqCst);
        drop(state);
        seat.woken.notify_one();
        true
    }

    /// Wakes every task, to hear that the server refused the wait (`refused`), or to try the
    /// lock themselves when the wait was turned away (`None`).
    fn wake_all(&self, refused: Option<redis::ServerError>) {
        let mut state = self.state.lock();
        let retry = refused.is_none();
        state.refused = refused;
        for seat in state.seats.values() {
            seat.retry.store(retry, Ordering::SeqCst);
            seat.woken.notify_one();
        }
    }

    fn is_empty(&self) -> bool {
        self.state.lock().seats.is_empty()
    }

    /// Whether the `BLPOP` goes on: not once the last task has left.
    fn goes_on(&self, transport: &Arc<dyn AsyncTransport>) -> bool {
        let mut state = self.state.lock();
        if !state.seats.is_empty() {
            return true;
        }
        state.running = false;
        drop(state);
        let mut queues = transport.waits().queues.lock();
        if queues
            .get(&self.keys.signal)
            .is_some_and(|queue| std::ptr::eq(&**queue, self))
        {
            queues.remove(&self.keys.signal);
        }
        false
    }
}

/// Puts a signal nobody here will use back in Redis, for another process's waiter.
fn pass_on(transport: &Arc<dyn AsyncTransport>, queue: &Arc<Queue>) {
    let transport = Arc::clone(transport);
    let keys = queue.keys.clone();
    let deadline = Instant::now() + queue.io_timeout;
    let passing = async move {
        let request = requests::pass_on(&keys);
        let sent = crate::driver::send_repeatable(&Async(transport), &request, deadline).await;
        if let Err(e) = sent {
            log::error!(
                "a wake-up signal of {:?} could not be passed on: {e}",
                keys.signal
            );
        }
    };
    super::spawn_or_run(passing);
}

/// The shared `BLPOP` of one name: blocks while tasks wait, hands each signal to the first.
async fn run(queue: Arc<Queue>, transport: Arc<dyn AsyncTransport>) {
    let mut conn: Option<Box<dyn AsyncWaiter>> = None;
    let mut pause = MIN_PAUSE;
    while queue.goes_on(&transport) {
        let waited = wait_once(&queue, &transport, &mut conn).await;
        if matches!(waited, Ok(ref reply) if !matches!(reply, Value::ServerError(_))) {
            queue.state.lock().refused = None;
        }
        let failed = match waited {
            Ok(Value::Nil) => false,
            Ok(Value::ServerError(e)) if redirect::of(&e).is_some() => {
                // The key lives elsewhere now: a task's try finds where, the next wait
                // takes a connection there.
                conn = None;
                queue.wake_all(None);
                true
            }
            Ok(Value::ServerError(e)) => {
                queue.wake_all(Some(e));
                true
            }
            Ok(_) => {
                if !queue.hand_off() {
                    pass_on(&transport, &queue);
                }
                false
            }
            Err(e) => {
                log::warn!("the shared wait on {:?} failed: {e}", queue.keys.signal);
                conn = None;
                true
            }
        };
        if !failed {
            pause = MIN_PAUSE;
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = queue.emptied.notified() => {}
        }
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// One `BLPOP` of at most [`MAX_BLOCK`]; ended early with `CLIENT UNBLOCK` when the last
/// task leaves, since its connection is closed then (a signal it took meanwhile is passed
/// on by the caller).
async fn wait_once(
    queue: &Queue,
    transport: &Arc<dyn AsyncTransport>,
    conn: &mut Option<Box<dyn AsyncWaiter>>,
) -> Result<Value, redis::RedisError> {
    let deadline = Instant::now() + queue.io_timeout;
    let waiter = match conn {
        Some(waiter) => waiter,
        None => conn.insert(
            transport
                .waiter(queue.keys.slot, deadline)
                .await
                .map_err(|f| f.into_error())?,
        ),
    };
    waiter.ready(deadline).await.map_err(|f| f.into_error())?;
    let id = waiter.id();
    let request = requests::wait(&queue.keys, MAX_BLOCK);
    let waiting = waiter.wait(&request, Instant::now() + MAX_BLOCK + queue.io_timeout);
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            reply = &mut waiting => return reply.map_err(|f| f.into_error()),
            () = queue.emptied.notified() => {
                if let (true, Some(id)) = (queue.is_empty(), id) {
                    let _ = transport.unblock(id, Instant::now() + queue.io_timeout).await;
                }
            }
        }
    }
}
