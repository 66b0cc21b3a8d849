//! Where the locks live, from the command line: one server (`--url`), a quorum of
//! independent servers (`--url` three or more times), a cluster (`--cluster`: the URL is a
//! seed node), or the primary that sentinels name (`--sentinel`).

use redis::cluster::ClusterClient;
use redis::{ConnectionInfo, IntoConnectionInfo};
use redis_blpop_lock::{Backend, Quorum, Sentinel};

use crate::{exit, Failure};

pub(crate) enum Place {
    Server(redis::Client),
    /// The cluster, and its seed node's address for `reset-all`'s prompt.
    Cluster(ClusterClient, String),
    Sentinel(Sentinel),
    /// The quorum, and a client for each of its servers: `Quorum` does not hand them back,
    /// and `status` reads each server directly for its per-server view.
    Quorum(Quorum, Vec<redis::Client>),
}

impl Place {
    /// The place the options name: `urls` holds each `--url` (or the one from `$REDIS_URL`
    /// or the default). With `--sentinel`, the URL gives only the primary's credentials and
    /// database.
    pub(crate) fn from_options(
        urls: &[String],
        cluster: bool,
        sentinels: &[String],
        service: Option<&str>,
    ) -> Result<Place, Failure> {
        // The URL is not echoed in errors: it may hold a password.
        let invalid =
            |e: redis::RedisError| Failure::new(exit::USAGE, format!("invalid Redis URL: {e}"));
        let url = match urls {
            [url] => url.as_str(),
            _ if cluster || !sentinels.is_empty() => {
                return Err(Failure::new(
                    exit::USAGE,
                    "--cluster and --sentinel take one --url; several --url make a quorum of \
                     independent servers",
                ))
            }
            [_, _] => {
                return Err(Failure::new(
                    exit::USAGE,
                    "--url given twice: a quorum needs at least 3 independent servers (give \
                     --url once per server), or give --url once for one server",
                ))
            }
            _ => {
                let clients = urls
                    .iter()
                    .map(|url| redis::Client::open(url.as_str()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(invalid)?;
                let quorum = Quorum::new(clients.clone()).map_err(Failure::lock)?;
                return Ok(Place::Quorum(quorum, clients));
            }
        };
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
            let seed = url.into_connection_info().map_err(invalid)?;
            let name = server_name(&seed);
            return ClusterClient::new(vec![seed])
                .map(|client| Place::Cluster(client, name))
                .map_err(invalid);
        }
        redis::Client::open(url).map(Place::Server).map_err(invalid)
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        match self {
            Place::Server(client) => client,
            Place::Cluster(client, _) => client,
            Place::Sentinel(sentinel) => sentinel,
            Place::Quorum(quorum, _) => quorum,
        }
    }

    /// The quorum's servers, each on its own; none for any other place.
    pub(crate) fn quorum_servers(&self) -> &[redis::Client] {
        match self {
            Place::Quorum(_, clients) => clients,
            _ => &[],
        }
    }

    /// What `reset-all` would empty, for its prompt: addresses, never the URL (it may hold a
    /// password).
    pub(crate) fn describe(&self) -> String {
        match self {
            Place::Server(client) => server_name(client.get_connection_info()),
            Place::Cluster(_, seed) => {
                format!("every primary of the cluster that {seed} is part of")
            }
            Place::Sentinel(_) => "the primary that the sentinels name".to_string(),
            Place::Quorum(_, clients) => {
                let names: Vec<String> = clients
                    .iter()
                    .map(|client| server_name(client.get_connection_info()))
                    .collect();
                format!("each server of the quorum: {}", names.join(", "))
            }
        }
    }
}

/// A server as `host:port/db`: its address and database, never its URL (it may hold a
/// password).
pub(crate) fn server_name(info: &ConnectionInfo) -> String {
    format!("{}/{}", info.addr(), info.redis_settings().db())
}
