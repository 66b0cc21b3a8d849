//! Private servers for a Redlock `Quorum`, and the quorum a child process builds from their URLs.

use redis_blpop_lock::Quorum;

use super::RedisServer;

/// `n` private servers.
pub fn servers(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// The quorum of the servers at `urls`, as a child process builds it.
pub fn quorum_of(urls: &[String]) -> Quorum {
    Quorum::new(
        urls.iter()
            .map(|u| redis::Client::open(u.as_str()).unwrap()),
    )
    .unwrap()
}

/// The servers' URLs.
pub fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(RedisServer::url).collect()
}
