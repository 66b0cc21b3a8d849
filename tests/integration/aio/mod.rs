//! The async API's suites.

pub(crate) mod backends;
pub(crate) mod cancel;
pub(crate) mod faults;
pub(crate) mod lock;
pub(crate) mod queue;
pub(crate) mod seams;
pub(crate) mod shared;
pub(crate) mod waiting;
