//! Work that must outlive its runtime: a release, a give-back. A runtime's end drops its tasks
//! without running them (those queued, those at an `.await`), and the process may exit right
//! after it, so such work is done on a task when it can be and otherwise on the thread that
//! drops it, over the blocking transport beneath, by its I/O deadline.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use parking_lot::Mutex;

use super::super::send::now;
use super::super::{Fault, Transport};

thread_local! {
    /// Whether this thread is finishing work its runtime dropped: its requests go over the
    /// blocking transport, since the async one's connections and timers end with the runtime.
    static BLOCKING: Cell<bool> = const { Cell::new(false) };
}

/// Whether requests made on this thread must block rather than use the async transport.
pub(crate) fn blocking_here() -> bool {
    BLOCKING.get()
}

/// A transport that let a request of finishing work time out, and until when it is taken to be
/// silent: a runtime's end drops its tasks one after another, and against a server that does
/// not answer each release would wait out its own I/O timeout; the ones after the first fail
/// at once instead, so the end takes about one I/O timeout per silent server.
static SILENT: Mutex<Option<(usize, Instant)>> = Mutex::new(None);

/// Runs `call`, which ends by `deadline`, on the blocking transport `blocking`: for finishing
/// work.
pub(crate) fn call_blocking<R>(
    blocking: &Arc<dyn Transport>,
    deadline: Instant,
    call: impl FnOnce(&dyn Transport) -> Result<R, Fault>,
) -> Result<R, Fault> {
    // The transport's address says which it is: transports live as long as the handles on
    // them.
    let which = Arc::as_ptr(blocking).cast::<()>() as usize;
    let started = Instant::now();
    if matches!(*SILENT.lock(), Some((silent, until)) if silent == which && started < until) {
        return Err(Fault::NotSent(super::super::conn::timed_out()));
    }
    let outcome = call(&**blocking);
    if let Err(Fault::NotSent(e) | Fault::Lost { error: e, .. }) = &outcome
        && e.is_timeout()
    {
        let silent_for = deadline.saturating_duration_since(started);
        *SILENT.lock() = Some((which, Instant::now() + silent_for));
    }
    outcome
}

/// Runs `work` on a task of the current runtime. If the task does not run it to its end (the
/// runtime ended first), or there is no runtime, `again` does it over on this thread, blocking
/// it: the work must be safe to do twice, as a release is.
pub(crate) fn spawn_or_block<A: Future<Output = ()>>(
    work: impl Future<Output = ()> + Send + 'static,
    again: impl FnOnce() -> A + Send + 'static,
) {
    let again = move || block(again);
    match tokio::runtime::Handle::try_current() {
        // A runtime shutting down drops the task at once, and with it `again` runs here.
        Ok(runtime) => drop(runtime.spawn(Finishing {
            work: Some(Box::pin(work)),
            again: Some(Box::new(again)),
        })),
        Err(_) => again(),
    }
}

/// Runs the future `again` makes to its end on this thread, its requests blocking.
fn block<A: Future<Output = ()>>(again: impl FnOnce() -> A) {
    let before = BLOCKING.replace(true);
    now(again());
    BLOCKING.set(before);
}

/// A task's work, and the way to do it over should the task be dropped before its end.
struct Finishing {
    work: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// `None` once `work` has ended.
    again: Option<Box<dyn FnOnce() + Send>>,
}

impl Future for Finishing {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(());
        };
        if work.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.work = None;
        self.again = None;
        Poll::Ready(())
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        // First what the unfinished work holds (the handle's turn), then the work again.
        self.work = None;
        if let Some(again) = self.again.take() {
            again();
        }
    }
}
