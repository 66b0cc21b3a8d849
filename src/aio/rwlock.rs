//! The async [`RwLock`]: the read-write lock shell ([`crate::shell::rwlock`]) on tokio.

crate::shell::for_api!(rwlock, aio);
