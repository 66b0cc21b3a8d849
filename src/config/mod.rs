//! A handle's configuration: the public builder, the checked settings every layer reads, and
//! owner ids.

pub(crate) mod id;
pub(crate) mod settings;
