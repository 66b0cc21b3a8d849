//! The servers of a transport over several (a cluster's nodes, the primaries a Sentinel has
//! named), numbered in the order they were met: a connection's [`ConnId`] names its server
//! by that number, since `CLIENT ID`s are only unique per server.
//!
//! [`ConnId`]: super::ConnId

use std::sync::Arc;

use parking_lot::RwLock;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError};

use super::server::Server;

pub(crate) struct Nodes {
    /// How to reach any of them: credentials, database, TLS; only the address differs.
    template: ConnectionInfo,
    known: RwLock<Vec<(String, &'static Arc<Server>)>>,
}

impl Nodes {
    pub(crate) fn new(template: ConnectionInfo) -> Nodes {
        Nodes {
            template,
            known: RwLock::new(Vec::new()),
        }
    }

    /// The number and server of `addr` (`host:port`), added the first time it is named.
    pub(crate) fn at(&self, addr: &str) -> Result<(usize, &'static Arc<Server>), RedisError> {
        if let Some(found) = self.find(addr) {
            return Ok(found);
        }
        let (host, port) = split_addr(addr)?;
        let client = redis::Client::open(with_addr(&self.template, host, port))?;
        let server: &'static Arc<Server> = Server::shared(&client).map_err(|e| match e {
            crate::Error::Redis(e) => e,
            other => RedisError::from((ErrorKind::Client, "bad node", other.to_string())),
        })?;
        let mut known = self.known.write();
        if let Some(at) = known.iter().position(|(a, _)| a == addr) {
            return Ok((at, known[at].1));
        }
        known.push((addr.to_owned(), server));
        Ok((known.len() - 1, server))
    }

    fn find(&self, addr: &str) -> Option<(usize, &'static Arc<Server>)> {
        let known = self.known.read();
        let at = known.iter().position(|(a, _)| a == addr)?;
        Some((at, known[at].1))
    }

    /// The address of server number `node`.
    pub(crate) fn addr(&self, node: usize) -> Option<String> {
        self.known.read().get(node).map(|(a, _)| a.clone())
    }

    /// Server number `node`.
    pub(crate) fn get(&self, node: usize) -> Option<&'static Arc<Server>> {
        self.known.read().get(node).map(|(_, s)| *s)
    }
}

/// `host:port` as its parts (the host may be an IPv6 address, with colons of its own).
pub(crate) fn split_addr(addr: &str) -> Result<(&str, u16), RedisError> {
    addr.rsplit_once(':')
        .and_then(|(host, port)| Some((host, port.parse().ok()?)))
        .ok_or_else(|| {
            RedisError::from((
                ErrorKind::Client,
                "a node address is not host:port",
                addr.to_owned(),
            ))
        })
}

/// `template` pointed at `host:port`, keeping its TLS settings.
pub(crate) fn with_addr(template: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    template.clone().set_addr(addr)
}

/// `host:port` of a TCP address; `None` for a Unix socket, which no cluster or Sentinel
/// names.
pub(crate) fn addr_of(info: &ConnectionInfo) -> Option<String> {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some(format!("{host}:{port}"))
        }
        _ => None,
    }
}
