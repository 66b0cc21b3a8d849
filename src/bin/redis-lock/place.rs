//! Where the locks live, from the command line: one server (`--url`), a quorum of
//! independent servers (`--url` three or more times), a cluster (`--cluster`: the URL is a
//! seed node), or the primary that sentinels name (`--sentinel`); and how long one round trip
//! there may take.

use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::{ConnectionInfo, IntoConnectionInfo, RedisError};
use redis_blpop_lock::{inspect, Backend, Error, Lock, LockBuilder, Quorum, Sentinel};

use crate::{exit, Failure};

pub(crate) struct Place {
    at: At,
    /// How long one round trip may take (`--io-timeout`).
    io_timeout: Duration,
}

enum At {
    Server(redis::Client),
    /// The cluster, and its seed node's address for `reset-all`'s prompt.
    Cluster(ClusterClient, String),
    /// The sentinels, and the service they name the primary of.
    Sentinel(Sentinel, String),
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
        io_timeout: Duration,
    ) -> Result<Place, Failure> {
        let at = At::from_options(urls, cluster, sentinels, service)?;
        Ok(Place { at, io_timeout })
    }

    /// A lock handle here, with the I/O timeout.
    pub(crate) fn lock(&self, name: &str) -> LockBuilder {
        Lock::builder(self.backend(), name).io_timeout(self.io_timeout)
    }

    pub(crate) fn backend(&self) -> &dyn Backend {
        match &self.at {
            At::Server(client) => client,
            At::Cluster(client, _) => client,
            At::Sentinel(sentinel, _) => sentinel,
            At::Quorum(quorum, _) => quorum,
        }
    }

    /// The quorum's servers, each on its own; none for any other place.
    pub(crate) fn quorum_servers(&self) -> &[redis::Client] {
        match &self.at {
            At::Quorum(_, clients) => clients,
            _ => &[],
        }
    }

    /// What `reset-all` would empty, for its prompt: addresses, never the URL (it may hold a
    /// password).
    pub(crate) fn describe(&self) -> String {
        match &self.at {
            At::Server(client) => server_name(client.get_connection_info()),
            At::Cluster(_, seed) => {
                format!("every primary of the cluster that {seed} is part of")
            }
            At::Sentinel(..) => "the primary that the sentinels name".to_string(),
            At::Quorum(_, clients) => {
                format!("each server of the quorum: {}", addresses(clients))
            }
        }
    }

    /// Who answers here, for an error: `host:port` (never the URL: it may hold a password).
    fn who(&self) -> String {
        match &self.at {
            At::Server(client) => client.get_connection_info().addr().to_string(),
            At::Cluster(_, seed) => format!("the cluster at {seed}"),
            At::Sentinel(_, service) => format!("the primary of {service:?} or its sentinels"),
            At::Quorum(_, clients) => format!("the quorum ({})", addresses(clients)),
        }
    }

    /// How long one round trip may take (`--io-timeout`).
    pub(crate) fn io_timeout(&self) -> Duration {
        self.io_timeout
    }

    /// The servers here that can evict the locks' keys. Only a warning: a server that cannot
    /// be asked (its ACL refuses `INFO`) is not one.
    pub(crate) fn evicting(&self) -> Vec<inspect::Evicting> {
        inspect::evicting(self.backend(), self.io_timeout).unwrap_or_default()
    }

    /// A line on stderr per server that can evict the locks' keys: stdout stays the locks'.
    pub(crate) fn warn_evicting(&self) {
        for server in self.evicting() {
            err!("warning: {server}");
        }
    }

    /// A failed lock operation as one line that says where and what happened, with the exit
    /// code it gets.
    pub(crate) fn failure(&self, e: Error) -> Failure {
        self.failure_within(e, self.io_timeout)
    }

    /// [`failure`](Self::failure) of an operation whose round trips had `io_timeout` each.
    pub(crate) fn failure_within(&self, e: Error, io_timeout: Duration) -> Failure {
        let (code, message) = match &e {
            Error::InvalidArgument(_) | Error::Unsupported(_) => (exit::USAGE, e.to_string()),
            Error::Corrupt { .. } => (
                exit::CORRUPT,
                format!("{e}; nothing was changed (`redis-lock reset --force NAME` deletes it)"),
            ),
            Error::Redis(source) => (exit::REDIS, self.in_words(source, io_timeout)),
            Error::OutcomeUnknown {
                name,
                operation,
                source,
            } => (
                exit::REDIS,
                format!(
                    "the outcome of {operation} on lock {name:?} is unknown: {}",
                    self.in_words(source, io_timeout)
                ),
            ),
            _ => (exit::REDIS, e.to_string()),
        };
        Failure::new(code, message)
    }

    /// What a Redis error means, in words, and where.
    fn in_words(&self, e: &RedisError, io_timeout: Duration) -> String {
        let who = self.who();
        if e.is_timeout() {
            // 5 s, 0.25 s.
            let secs = io_timeout.as_secs_f64();
            format!("no reply from {who} in {secs} s")
        } else if e.is_connection_refusal() {
            format!("{who} refused the connection (is a Redis server running there?)")
        } else if e.is_io_error() {
            format!("the connection to {who} failed: {e}")
        } else {
            format!("{who} answered with an error: {e}")
        }
    }
}

impl At {
    fn from_options(
        urls: &[String],
        cluster: bool,
        sentinels: &[String],
        service: Option<&str>,
    ) -> Result<At, Failure> {
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
                    .map(|url| redis::Client::open(url.as_str()).map_err(|e| invalid(url, &e)))
                    .collect::<Result<Vec<_>, _>>()?;
                let quorum = Quorum::new(clients.clone()).map_err(|e| plain(&e))?;
                return Ok(At::Quorum(quorum, clients));
            }
        };
        if !sentinels.is_empty() {
            let Some(service) = service else {
                return Err(Failure::new(exit::USAGE, "--sentinel needs --service NAME"));
            };
            let primary = url.into_connection_info().map_err(|e| invalid(url, &e))?;
            for sentinel in sentinels {
                sentinel
                    .as_str()
                    .into_connection_info()
                    .map_err(|e| invalid(sentinel, &e))?;
            }
            let sentinel = Sentinel::new(sentinels.iter().map(String::as_str), service)
                .map_err(|e| plain(&e))?
                .primary_settings(primary.redis_settings().clone());
            return Ok(At::Sentinel(sentinel, service.to_string()));
        }
        if cluster {
            let seed = url.into_connection_info().map_err(|e| invalid(url, &e))?;
            let name = server_name(&seed);
            return ClusterClient::new(vec![seed])
                .map(|client| At::Cluster(client, name))
                .map_err(|e| invalid(url, &e));
        }
        redis::Client::open(url)
            .map(At::Server)
            .map_err(|e| invalid(url, &e))
    }
}

/// A URL that does not parse, echoed with any password masked.
fn invalid(url: &str, e: &RedisError) -> Failure {
    Failure::new(
        exit::USAGE,
        format!("invalid Redis URL {:?}: {e}", masked(url)),
    )
}

/// An error before any server was asked: bad arguments.
fn plain(e: &Error) -> Failure {
    Failure::new(exit::USAGE, e.to_string())
}

/// `url` with the password in it (`scheme://user:PASSWORD@host`) replaced by `***`.
pub(crate) fn masked(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL at all: whatever comes before an `@` may be a password.
        return match url.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => url.to_string(),
        };
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
        None => url.to_string(),
    }
}

/// The servers of a quorum, as `host:port/db, ...`.
fn addresses(clients: &[redis::Client]) -> String {
    let names: Vec<String> = clients
        .iter()
        .map(|client| server_name(client.get_connection_info()))
        .collect();
    names.join(", ")
}

/// A server as `host:port/db`: its address and database, never its URL (it may hold a
/// password).
pub(crate) fn server_name(info: &ConnectionInfo) -> String {
    format!("{}/{}", info.addr(), info.redis_settings().db())
}
