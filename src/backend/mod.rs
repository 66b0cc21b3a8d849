//! Where locks live: one trait for a single server, a cluster and a Sentinel-managed primary.

pub(crate) mod quorum;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;

use std::sync::Arc;

use crate::transport::server::Server;
use crate::transport::Transport;
use crate::Error;

/// Where locks live: what [`Lock::new`](crate::Lock::new), [`Lock::builder`](crate::Lock::builder),
/// [`with_lock`](crate::with_lock), [`reset_all`](crate::reset_all) and
/// [`Cache::new`](crate::Cache::new) take.
///
/// - [`redis::Client`]: one server (or a proxy in front of one).
/// - [`redis::cluster::ClusterClient`] (feature `cluster`): a Redis Cluster; a lock's keys get
///   its name as their hash tag (`lock:{name}`), see the crate docs' Cluster section.
/// - [`Sentinel`](crate::Sentinel) (feature `sentinel`): the primary that Redis Sentinel
///   names, found again after a failover.
///
/// Handles built from equal backends share their connections. The trait is sealed: the
/// crate implements it for these types only.
///
/// ```no_run
/// # fn main() -> Result<(), redis_blpop_lock::Error> {
/// use redis_blpop_lock::{Backend, Lock};
///
/// fn nightly(backend: &impl Backend) -> Result<(), redis_blpop_lock::Error> {
///     let lock = Lock::new(backend, "nightly")?;
///     let _guard = lock.lock()?;
///     Ok(())
/// }
///
/// nightly(&redis::Client::open("redis://127.0.0.1/")?)?;
/// # Ok(())
/// # }
/// ```
pub trait Backend: sealed::Sealed {}

pub(crate) mod sealed {
    use super::*;

    pub trait Sealed {
        /// Where the requests of the locks built on it go.
        fn connect(&self) -> Result<OpaqueTransport, Error>;
    }

    /// A transport, opaque outside the crate.
    pub struct OpaqueTransport(pub(crate) Arc<dyn Transport>);
}

/// Where the requests of the locks built on `backend` go.
pub(crate) fn transport_of<B: Backend + ?Sized>(backend: &B) -> Result<Arc<dyn Transport>, Error> {
    Ok(backend.connect()?.0)
}

impl Backend for redis::Client {}

impl sealed::Sealed for redis::Client {
    fn connect(&self) -> Result<sealed::OpaqueTransport, Error> {
        let server: Arc<Server> = Arc::clone(Server::shared(self)?);
        Ok(sealed::OpaqueTransport(server))
    }
}

#[cfg(feature = "cluster")]
impl Backend for redis::cluster::ClusterClient {}

#[cfg(feature = "cluster")]
impl sealed::Sealed for redis::cluster::ClusterClient {
    fn connect(&self) -> Result<sealed::OpaqueTransport, Error> {
        crate::transport::cluster::shared(self).map(sealed::OpaqueTransport)
    }
}

impl<B: Backend + ?Sized> Backend for &B {}

impl<B: Backend + ?Sized> sealed::Sealed for &B {
    fn connect(&self) -> Result<sealed::OpaqueTransport, Error> {
        (**self).connect()
    }
}
