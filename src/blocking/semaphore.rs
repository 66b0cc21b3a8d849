//! The blocking [`Semaphore`]: the semaphore shell ([`crate::shell::semaphore`]) on the
//! blocking runtime.

crate::shell::for_api!(semaphore, blocking);
