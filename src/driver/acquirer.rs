//! One acquisition held, of any primitive ([`Acquisition`]), and what the handles of the queue
//! engine's primitives share ([`Acquirer`]): a semaphore or read-write lock hands out any
//! number of acquisitions at once (from many threads or tasks), each with an id of its own
//! (the handle's id and a count), on the lock's hold machinery (renewal, release, `lost()`,
//! fencing). Written once, for both runtimes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::hub::Hub;
use super::tokens::TokensSeen;
use super::{Inner, Place, Runtime, Taken};
use crate::config::settings::Settings;
use crate::protocol::keys::QueueKeys;
use crate::protocol::lease::Wait;
use crate::protocol::primitive::Primitive;
use crate::protocol::queue::{self, Ask};
use crate::protocol::request::Request;
use crate::transport::send::send_repeatable;
use crate::transport::Transport;
use crate::{CancelToken, Error};

/// A queue primitive's handle, as its acquisitions see it.
pub(crate) struct Acquirer<R: Runtime> {
    pub(crate) settings: Settings,
    pub(crate) transport: Arc<R::Transport>,
    pub(crate) keys: QueueKeys,
    pub(crate) capacity: u64,
    /// How many acquisitions this handle has made: a part of their ids.
    made: AtomicU64,
    /// The process's hub on the primitive's server, whose process id ends the ids.
    pub(crate) hub: Arc<Hub>,
    /// The fencing tokens its acquisitions were given.
    tokens: Arc<TokensSeen>,
}

/// One acquisition held, of any primitive: given back by [`Acquisition::release`] or when
/// dropped.
pub(crate) struct Acquisition<R: Runtime> {
    inner: Arc<Inner<R>>,
    epoch: u64,
    /// Cancelled when it is lost.
    notice: CancelToken,
    /// Whether dropping it gives it back: not once it has been released.
    armed: bool,
    /// What to send once it has been given back (an election's vacating).
    then: Option<Box<Request>>,
}

impl<R: Runtime> Acquirer<R> {
    pub(crate) fn new(
        kind: Primitive,
        settings: Settings,
        transport: Arc<dyn Transport>,
        capacity: u64,
    ) -> Self {
        let keys = QueueKeys::new(kind, &settings.name);
        Acquirer {
            hub: Hub::of(&transport, keys.slot, settings.io_timeout),
            keys,
            settings,
            transport: R::over(transport),
            capacity,
            made: AtomicU64::new(0),
            tokens: Arc::default(),
        }
    }

    /// Takes `units` as `wait` allows: `None` when the wait ended first. Stopped before its
    /// end (a dropped future), the wait leaves the line and gives back a grant that came
    /// meanwhile.
    pub(crate) async fn acquire(
        &self,
        units: u64,
        wait: Wait,
    ) -> Result<Option<Acquisition<R>>, Error> {
        let n = self.made.fetch_add(1, Ordering::Relaxed);
        let mut settings = self.settings.clone();
        settings.id = queue::waiter_id(&format!("{}:{n}", settings.id), self.hub.process());
        let ask = Ask::new(
            &settings.id,
            units,
            self.capacity,
            settings.expire(),
            settings.lapse(),
        )?;
        let place = Place {
            keys: self.keys.clone(),
            ask,
            hub: Arc::clone(&self.hub),
            tokens: Arc::clone(&self.tokens),
        };
        let inner = Arc::new(Inner::for_line(
            settings,
            Arc::clone(&self.transport),
            place,
        ));
        Acquisition::take_apart(inner, wait, &self.settings.cancel).await
    }

    /// How many units are free now, by this handle's capacity (a read; it may change at once).
    pub(crate) async fn available(&self) -> Result<u64, Error> {
        let deadline = Instant::now() + self.settings.io_timeout;
        let request = queue::peek(&self.keys, &self.settings.id);
        let mut answered = send_repeatable(&*self.transport, &request, deadline).await?;
        let used = queue::parse_state(&self.keys, &answered.replies.swap_remove(0))?.used;
        Ok(self.capacity.saturating_sub(used))
    }
}

impl<R: Runtime> Acquisition<R> {
    /// Takes what `inner` is a handle on as `wait` allows, apart from the caller (see
    /// [`Runtime::apart`]): `None` when the wait ended first.
    pub(crate) async fn take_apart(
        inner: Arc<Inner<R>>,
        wait: Wait,
        cancel: &CancelToken,
    ) -> Result<Option<Acquisition<R>>, Error> {
        let name = inner.name().to_string();
        let acquire = move |cancel| async move {
            let taken = inner.take(wait, &cancel).await?;
            Ok(taken.map(|Taken { epoch, notice }| Acquisition {
                inner,
                epoch,
                notice,
                armed: true,
                then: None,
            }))
        };
        R::apart(&name, cancel, acquire).await
    }

    #[cfg(feature = "tokio")]
    /// What `inner` took (`taken`), given back by its guard rather than by this (an async
    /// plain lock's, which releases in its handle's turn).
    pub(crate) fn released_by_guard(inner: Arc<Inner<R>>, taken: Taken) -> Self {
        Acquisition {
            inner,
            epoch: taken.epoch,
            notice: taken.notice,
            armed: false,
            then: None,
        }
    }

    #[cfg(feature = "tokio")]
    /// The handle's engine it is of.
    pub(crate) fn inner(&self) -> &Arc<Inner<R>> {
        &self.inner
    }

    #[cfg(feature = "tokio")]
    /// Which acquisition of its handle it is.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Leaves what it holds to its handle (a plain lock's `acquire`), with nothing to give it
    /// back on drop.
    pub(crate) fn keep(mut self) {
        self.armed = false;
    }

    /// Gives the lock it holds a new expiry: `expire`, or the handle's.
    pub(crate) async fn extend(&self, expire: Option<Duration>) -> Result<(), Error> {
        self.inner.extend(expire).await
    }

    pub(crate) fn lost(&self) -> bool {
        self.inner.known.lost_since(self.epoch)
    }

    /// Its id in the primitive's keys.
    pub(crate) fn id(&self) -> &str {
        &self.inner.settings.id
    }

    /// Sends `request` (safe to send again) once it has been given back, by either way.
    pub(crate) fn then_send(&mut self, request: Request) {
        self.then = Some(Box::new(request));
    }

    pub(crate) fn fencing_token(&self) -> Option<u64> {
        self.inner.known.fencing_token()
    }

    /// The token cancelled when it is lost (never by a release); at once if it is already.
    pub(crate) fn lost_token(&self) -> CancelToken {
        self.inner.known.watched(self.epoch);
        self.notice.clone()
    }

    /// Resolves once it is lost, as its [`lost_token`](Self::lost_token) is cancelled.
    #[cfg(feature = "tokio")]
    pub(crate) async fn when_lost(&self) {
        self.lost_token().cancelled().await;
    }

    /// Gives it back, waking the waiters that can now proceed. Stopped before its end, the
    /// release is done again unattended.
    pub(crate) async fn release(mut self) -> Result<(), Error> {
        let released = self.inner.release(Some(self.epoch)).await;
        self.armed = false;
        match (released, self.then.take()) {
            (Ok(()), Some(then)) => send_after(&self.inner, &then).await,
            (released, _) => released,
        }
    }

    /// Keeps `units` of what it holds and gives back the rest (a write lock downgraded to a
    /// read lock). False if it no longer held anything.
    pub(crate) async fn shrink(&self, units: u64) -> Result<bool, Error> {
        let Some(Place { keys, ask, .. }) = self.inner.place() else {
            return Err(Error::unexpected(
                &"a shrink of a lock off the queue engine",
            ));
        };
        let deadline = Instant::now() + self.inner.settings.io_timeout;
        let request = queue::shrink(keys, ask, units);
        let mut answered = send_repeatable(&*self.inner.transport, &request, deadline).await?;
        queue::parse_held(keys, &answered.replies.swap_remove(0))
    }
}

/// A lease dropped unreleased is given back (see [`Runtime::on_drop`]): a failure is logged,
/// and the lease frees itself at its expiry.
impl<R: Runtime> Drop for Acquisition<R> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (inner, epoch, then) = (Arc::clone(&self.inner), self.epoch, self.then.take());
        let (again, then_again) = (Arc::clone(&inner), then.clone());
        R::on_drop(released(inner, epoch, then, false), move || {
            released(again, epoch, then_again, true)
        });
    }
}

/// Releases acquisition `epoch` of `inner` for a lease dropped unreleased, then sends `then`,
/// logging a failure; `again` after an attempt its runtime dropped, which may have released
/// it already.
async fn released<R: Runtime>(
    inner: Arc<Inner<R>>,
    epoch: u64,
    then: Option<Box<Request>>,
    again: bool,
) {
    let released = match inner.release(Some(epoch)).await {
        Ok(()) => true,
        Err(Error::NotAcquired { .. }) if again => true,
        Err(e @ Error::NotAcquired { .. }) => {
            log::warn!("{:?}: on drop: {e}", inner.name());
            false
        }
        Err(e) => {
            log::error!("{:?}: release on drop failed: {e}", inner.name());
            false
        }
    };
    if let (true, Some(then)) = (released, then)
        && let Err(e) = send_after(&inner, &then).await
    {
        log::error!("{:?}: after the release on drop: {e}", inner.name());
    }
}

/// Sends `then` after a release of `inner`, by the I/O timeout.
async fn send_after<R: Runtime>(inner: &Inner<R>, then: &Request) -> Result<(), Error> {
    let deadline = Instant::now() + inner.settings.io_timeout;
    send_repeatable(&*inner.transport, then, deadline).await?;
    Ok(())
}
