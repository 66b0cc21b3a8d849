//! Where the locks live: a cluster, behind Sentinel, a quorum, replicas; and the cluster support itself.

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod quorum;
pub(crate) mod quorum_faults;
pub(crate) mod replicas;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
#[cfg(feature = "cluster")]
pub(crate) mod support;
