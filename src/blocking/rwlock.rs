//! The blocking [`RwLock`]: the read-write lock shell ([`crate::shell::rwlock`]) on the
//! blocking runtime.

crate::shell::for_api!(rwlock, blocking);
