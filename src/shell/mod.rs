//! The public handles' shells, written once for both APIs: each primitive's shell is a macro
//! that the blocking API ([`crate::blocking`], re-exported at the root) and the async API
//! ([`crate::aio`]) each expand, one line apiece. A shell only turns its methods into calls of
//! the driver's generic core (`driver::acquirer`), so the two APIs cannot drift: the same
//! methods, in the same order, with the same docs.
//!
//! What differs between the APIs is passed in ([`for_api`]): the runtime, whether a call is
//! `async`, how a call is run (`now(..)` or `.await`), and how its doc examples start and
//! wait. A shell's items expand in a module of their own (`semaphore_api`, ...) with their
//! imports, re-exported by the API's file; what only one API has stays in that file.

pub(crate) mod lock;

/// Runs a driver future on the blocking API: the caller's thread blocks in each round trip.
macro_rules! run_blocking {
    ($e:expr) => {
        $crate::transport::send::now($e)
    };
}

/// Runs a driver future on the async API.
#[cfg(feature = "tokio")]
macro_rules! run_aio {
    ($e:expr) => {
        $e.await
    };
}

/// Expands the shell `$shell` for one API, with what tells that API apart.
macro_rules! for_api {
    ($shell:ident, $api:ident $(; $($extra:tt)*)?) => {
        $crate::shell::for_api!($shell::$shell, $api $(; $($extra)*)?);
    };
    ($module:ident::$shell:ident, blocking $(; $($extra:tt)*)?) => {
        $crate::shell::$module::$shell! {
            rt = $crate::driver::blocking::Blocking,
            asyncness = [],
            run = run_blocking,
            head = "# fn main() -> Result<(), redis_blpop_lock::Error> {",
            path = "redis_blpop_lock::",
            aw = "",
            prefix = "",
            $($($extra)*)?
        }
    };
    ($module:ident::$shell:ident, aio $(; $($extra:tt)*)?) => {
        $crate::shell::$module::$shell! {
            rt = $crate::driver::tokio::Tokio,
            asyncness = [async],
            run = run_aio,
            head = "# async fn run() -> Result<(), redis_blpop_lock::Error> {",
            path = "redis_blpop_lock::aio::",
            aw = ".await",
            prefix = "aio::",
            $($($extra)*)?
        }
    };
}

#[cfg(feature = "tokio")]
pub(crate) use run_aio;
pub(crate) use {for_api, run_blocking};
