//! Where the locks live, from the command line: one server (`--url`), a cluster
//! (`--cluster`: the URL is a seed node), or the primary that sentinels name (`--sentinel`).

use redis::cluster::ClusterClient;
use redis::IntoConnectionInfo;
use redis_blpop_lock::{Backend, Sentinel};

use crate::{exit, Failure};

pub(crate) enum Place {
    Server(redis::Client),
    Cluster(ClusterClient),
    Sentinel(Sentinel),
}

impl Place {
    /// The place the options name. With `--sentinel`, `url` gives only the primary's
    /// credentials and database.
    pub(crate) fn from_options(
        url: &str,
        cluster: bool,
        sentinels: &[String],
        service: Option<&str>,
    ) -> Result<Place, Failure> {
        // The URL is not echoed in errors: it may hold a password.
        let invalid =
            |e: redis::RedisError| Failure::new(exit::USAGE, format!("invalid Redis URL: {e}"));
        if !sentinels.is_empty() {
            let Some(service) = service else {
                return Err(Failure::new(exit::USAGE, "--sentinel needs --service NAME"));
            };
            let primary = url.into_connection_info().map_err(invalid)?;
            let sentinel = Sentinel::new(sentinels.iter().map(String::as_str), service)
                .map_err(Failure::lock)?
                .primary_settings(primary.redis_settings().clone());
            return Ok(Place::Sentinel(sentinel));
        }
        if cluster {
            return ClusterClient::new(vec![url])
                .map(Place::Cluster)
                .map_err(invalid);
        }
        redis::Client::open(url).map(Place::Server).map_err(invalid)
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        match self {
            Place::Server(client) => client,
            Place::Cluster(client) => client,
            Place::Sentinel(sentinel) => sentinel,
        }
    }

    /// What `reset-all` would empty, for its prompt: addresses, never the URL (it may hold a
    /// password).
    pub(crate) fn describe(&self, url: &str) -> String {
        let addr = url
            .into_connection_info()
            .map(|info| format!("{} db {}", info.addr(), info.redis_settings().db()))
            .unwrap_or_default();
        match self {
            Place::Server(_) => addr,
            Place::Cluster(_) => format!("every primary of the cluster that {addr} is part of"),
            Place::Sentinel(_) => "the primary that the sentinels name".to_string(),
        }
    }
}
