//! Metrics and tracing: every metric and span of the library is made here, and the driver
//! calls the small functions below. With the `metrics` and `tracing` features off, their
//! bodies are compiled out, so the acquire path does no new work.
//!
//! A lock's name never becomes a label by itself: names can be unbounded (one per job, per
//! user), and an unbounded label set is what takes a metrics backend down. The `lock` label is
//! the handle's [`metrics_label`](crate::LockBuilder::metrics_label), or what the function
//! given to [`label_lock_names`] maps the name to, or `"other"`.

use std::borrow::Cow;
use std::future::Future;
#[cfg(feature = "metrics")]
use std::time::Instant;

use parking_lot::RwLock;

use crate::Error;

/// The `lock` label of a handle that has none of its own.
const OTHER: &str = "other";

/// Maps a lock name to its `lock` label, or `None` for `"other"`.
type Namer = fn(&str) -> Option<String>;

/// What [`label_lock_names`] set: called once per handle, at build.
static NAMER: RwLock<Option<Namer>> = RwLock::new(None);

/// Lets lock names become the `lock` label of the metrics, through `f`, for every handle built
/// from now on in this process: `f` maps a name to a label from a bounded set, or to `None`
/// for `"other"`. A handle's own [`metrics_label`](crate::LockBuilder::metrics_label) wins.
/// Without this, no name is ever a label. Takes effect with the `metrics` feature.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// # let client = redis::Client::open("redis://127.0.0.1/")?;
/// // Per-tenant locks "invoice:<tenant>" are counted together as `lock="invoice"`.
/// redis_blpop_lock::observe::label_lock_names(|name| {
///     name.split_once(':').map(|(kind, _)| kind.to_owned())
/// });
/// let lock = redis_blpop_lock::Lock::new(&client, "invoice:4711")?;
/// # Ok(())
/// # }
/// ```
pub fn label_lock_names(f: fn(&str) -> Option<String>) {
    *NAMER.write() = Some(f);
}

/// A handle's `lock` label, fixed at build.
#[derive(Clone)]
pub(crate) struct Label {
    #[cfg(feature = "metrics")]
    value: metrics::SharedString,
}

impl Label {
    /// The label of a handle on lock `name`, whose builder was given `explicit`.
    pub(crate) fn new(name: &str, explicit: Option<Cow<'static, str>>) -> Label {
        #[cfg(feature = "metrics")]
        {
            let value = explicit
                .or_else(|| NAMER.read().and_then(|f| f(name)).map(Cow::Owned))
                .unwrap_or(Cow::Borrowed(OTHER));
            Label {
                value: value.into(),
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = (name, explicit, OTHER);
            Label {}
        }
    }
}

/// Runs `acquire`, one acquire-style call, in a `redis_lock.acquire` span, and counts its
/// outcome and how long it took.
pub(crate) async fn acquiring<F, T>(label: &Label, name: &str, owner: &str, acquire: F) -> F::Output
where
    F: Future<Output = Result<Option<T>, Error>>,
{
    #[cfg(feature = "tracing")]
    let acquire = tracing::Instrument::instrument(
        acquire,
        tracing::info_span!("redis_lock.acquire", name, owner),
    );
    #[cfg(feature = "metrics")]
    let start = Instant::now();
    let outcome = acquire.await;
    #[cfg(feature = "metrics")]
    {
        let kind = match &outcome {
            Ok(Some(_)) => "acquired",
            Ok(None) => "timed_out",
            Err(Error::Cancelled { .. }) => "cancelled",
            Err(_) => "error",
        };
        let labels = [("lock", label.value.clone()), ("outcome", kind.into())];
        metrics::histogram!("redis_lock_wait_seconds", &labels).record(start.elapsed());
        metrics::counter!("redis_lock_acquisitions_total", &labels).increment(1);
    }
    let _ = (label, name, owner);
    outcome
}

/// A grant that followed a wait: a waiter woken by a release.
pub(crate) fn handoff(label: &Label) {
    #[cfg(feature = "metrics")]
    metrics::counter!("redis_lock_handoffs_total", "lock" => label.value.clone()).increment(1);
    let _ = label;
}

/// A step of a plain lock's hand-off, as a `trace` event of target `redis_lock::handoff`
/// (`step`: `popped`, the hub's `BLPOP` brought a release's signal, with the try it carried
/// if any; `woken`, the waiting thread or task runs again with that news), on the thread that
/// takes it: a subscriber that timestamps them sees where a hand-off's time goes (the bench's
/// `handoff-path` cell). `key` is the lock's signal list.
pub(crate) fn handoff_step(step: &'static str, key: &str) {
    #[cfg(feature = "tracing")]
    tracing::trace!(target: "redis_lock::handoff", step, key);
    let _ = (step, key);
}

/// A lock held, from its grant: its hold time, and its `redis_lock.hold` span, which closes
/// when this is dropped.
pub(crate) struct Hold {
    #[cfg(feature = "metrics")]
    since: Instant,
    #[cfg(feature = "tracing")]
    _span: tracing::Span,
}

impl Hold {
    /// The lock `name` granted to `owner` now.
    pub(crate) fn start(name: &str, owner: &str) -> Hold {
        let _ = (name, owner);
        Hold {
            #[cfg(feature = "metrics")]
            since: Instant::now(),
            #[cfg(feature = "tracing")]
            _span: tracing::info_span!("redis_lock.hold", name, owner),
        }
    }

    /// Released, or its loss noticed: the hold is over.
    pub(crate) fn end(self, label: &Label) {
        #[cfg(feature = "metrics")]
        metrics::histogram!("redis_lock_hold_seconds", "lock" => label.value.clone())
            .record(self.since.elapsed());
        let _ = label;
    }

    /// `lost()` turned true, for `why`: the hold is over.
    pub(crate) fn lost(self, label: &Label, name: &str, owner: &str, why: &str) {
        #[cfg(feature = "metrics")]
        metrics::counter!("redis_lock_lost_total", "lock" => label.value.clone()).increment(1);
        #[cfg(feature = "tracing")]
        tracing::warn!(name, owner, why, "redis_lock: lost");
        let _ = (name, owner, why);
        self.end(label);
    }
}

/// A renewal attempt failed with `error`; it is tried again until the expiry.
pub(crate) fn renewal_failed(label: &Label, name: &str, error: &Error) {
    #[cfg(feature = "metrics")]
    metrics::counter!("redis_lock_renewal_failures_total", "lock" => label.value.clone())
        .increment(1);
    #[cfg(feature = "tracing")]
    tracing::warn!(name, %error, "redis_lock: renewal failed");
    let _ = (label, name, error);
}

/// A lost reply was settled (`settled`: by the call that lost it, reading the lock, or by the
/// background settle, giving back), or could not be (`unknown`: a call's settle out of time,
/// or the background settle at the expiry).
pub(crate) fn settle(label: &Label, name: &str, settled: bool) {
    let outcome = if settled { "settled" } else { "unknown" };
    #[cfg(feature = "metrics")]
    metrics::counter!("redis_lock_settlements_total",
        "lock" => label.value.clone(), "outcome" => outcome)
    .increment(1);
    #[cfg(feature = "tracing")]
    tracing::warn!(name, outcome, "redis_lock: lost reply settled");
    let _ = (label, name, outcome);
}

/// A server was found to evict keys under `policy` (`warning` says which, and the fix):
/// warned once per server, and counted in the `redis_lock_evicting_servers` gauge.
pub(crate) fn evicting_server(policy: &str, warning: &str) {
    log::warn!("{warning}");
    #[cfg(feature = "metrics")]
    metrics::gauge!("redis_lock_evicting_servers", "policy" => policy.to_owned()).increment(1.0);
    let _ = policy;
}

/// Lock `name` (or a queue primitive's acquisition of it) handed out `token`, not above
/// `last`, which the handle had been given before: its fencing counter was lost (evicted, a
/// restart without persistence, a failover to a replica that missed the last grants) and the
/// server's clock is behind the last grant's (see the crate docs on fencing).
pub(crate) fn fence_went_back(label: &Label, name: &str, last: u64, token: u64) {
    log::warn!(
        "lock {name:?}: fencing token {token} is not above {last}, one taken before: its counter \
         was lost and the server's clock is behind the one that granted {last}, so stores that \
         check tokens will refuse this holder's writes; see the crate docs on fencing"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!("redis_lock_fence_regressions_total", "lock" => label.value.clone())
        .increment(1);
    let _ = label;
}

/// The operator's read of queue primitive `name` found its kept count of units in use at
/// `counted` where a recount found `used` (a hand's edit of its keys, or a bug): the script
/// dropped the count, so the next one counts again.
pub(crate) fn count_repaired(kind: &str, name: &str, counted: u64, used: u64) {
    log::warn!(
        "{kind} {name:?}: the kept count of units in use said {counted}, a recount found {used}; \
         repaired"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!("redis_lock_count_repairs_total", "kind" => kind.to_owned()).increment(1);
}
