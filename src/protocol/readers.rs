//! Who holds a read lock through one [`RwLock`](crate::RwLock) handle, per thread or task: a
//! write lock one of them waited for would wait for itself, so the handle refuses it
//! ([`Error::WouldDeadlock`](crate::Error::WouldDeadlock)).

use std::collections::HashMap;
use std::thread::{self, ThreadId};

use parking_lot::Mutex;

/// Who holds a read lock: a task, or, outside any task, a thread.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Reader {
    #[cfg(feature = "tokio")]
    Task(tokio::task::Id),
    Thread(ThreadId),
}

impl Reader {
    pub(crate) fn current() -> Reader {
        #[cfg(feature = "tokio")]
        if let Some(task) = tokio::task::try_id() {
            return Reader::Task(task);
        }
        Reader::Thread(thread::current().id())
    }
}

/// How many read locks each reader holds through one handle: a write lock one of them waited
/// for would wait for itself. (A read guard sent elsewhere still counts for the one that took
/// it.)
#[derive(Default)]
pub(crate) struct Readers(Mutex<HashMap<Reader, usize>>);

impl Readers {
    /// Whether the current reader holds a read lock of the handle.
    pub(crate) fn reading_here(&self) -> bool {
        self.0.lock().contains_key(&Reader::current())
    }

    /// A read lock of `reader`, counted while the result lives.
    pub(crate) fn enter(&self, reader: Reader) -> Reading<'_> {
        *self.0.lock().entry(reader).or_default() += 1;
        Reading {
            readers: self,
            reader,
        }
    }
}

/// A read lock counted as its reader's while it lives.
pub(crate) struct Reading<'a> {
    readers: &'a Readers,
    reader: Reader,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let mut readers = self.readers.0.lock();
        if let Some(count) = readers.get_mut(&self.reader) {
            *count -= 1;
            if *count == 0 {
                readers.remove(&self.reader);
            }
        }
    }
}
