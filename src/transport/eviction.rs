//! A server's eviction policy, read once with the first request sent to it, and the one
//! warning when the server can evict a lock's keys.

use std::sync::OnceLock;
use std::time::Instant;

use redis::Value;

use super::send::AnyTransport;
use crate::observe;
use crate::protocol::eviction::{self, Evicts};

/// What a server's `INFO memory` said of its eviction policy, once it said it.
pub(crate) struct Eviction {
    /// The server's address, for the warning.
    server: String,
    /// `Some(None)`: a policy that never evicts, or a server that would not say.
    read: OnceLock<Option<Evicts>>,
}

impl Eviction {
    pub(crate) fn new(server: String) -> Eviction {
        Eviction {
            server,
            read: OnceLock::new(),
        }
    }

    /// Whether the policy is still to be read: the next request goes behind an `INFO memory`.
    pub(crate) fn unread(&self) -> bool {
        self.read.get().is_none()
    }

    /// The server and its policy, when it was read and can evict a lock's keys.
    pub(crate) fn evicting(&self) -> Option<(String, String)> {
        let evicts = self.read.get()?.as_ref()?;
        Some((self.server.clone(), evicts.policy.clone()))
    }

    /// Takes in the reply to `INFO memory`. One that does not say (refused by an ACL, an
    /// unknown command) is final, with no warning; a lost one is not recorded, so the policy
    /// is read with the next request. The first to record an evicting policy warns, once.
    pub(crate) fn record(&self, reply: &Value) {
        let policy = eviction::parse(reply).flatten();
        let warn = policy.as_ref().map(|evicts| evicts.policy.clone());
        if self.read.set(policy).is_ok()
            && let Some(policy) = warn
        {
            observe::evicting_server(&policy, &eviction::warning(&self.server, &policy));
        }
    }
}

/// The address and eviction policy of `server` (one server, through either transport) when it
/// can evict a lock's keys, read once per server (by `deadline`); `None` when it cannot, does
/// not say, or is not one server.
pub(crate) async fn evicting<T: AnyTransport + ?Sized>(
    server: &T,
    deadline: Instant,
) -> Option<(String, String)> {
    let eviction = server.blocking().eviction()?;
    if eviction.unread() {
        // Its probe reads the policy.
        let _ = server.exchange(&eviction::request(), deadline).await;
    }
    eviction.evicting()
}
