//! The operator's side: inspection, admin commands, metrics and tracing, least privilege.

pub(crate) mod admin_commands;
pub(crate) mod inspect;
#[cfg(all(feature = "metrics", feature = "tracing"))]
pub(crate) mod observe;
pub(crate) mod security;
