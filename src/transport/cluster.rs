//! Redis Cluster: which primary serves which hash slot, learned with `CLUSTER SLOTS` and
//! corrected by `MOVED`, over the seed nodes of a `redis::cluster::ClusterClient`.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::cluster::ClusterClient;
use redis::{ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError, RedisResult, Value};

use super::nodes::{addr_of, split_addr, Nodes};
use super::routed::{Routed, Topology};
use super::{send_repeatable, Transport};
use crate::protocol::request::Request;
use crate::Error;

/// How many hash slots a cluster has.
const SLOTS: usize = 16384;
/// The longest a look at one node may take while learning the topology: a node that is
/// down should cost little before the next is asked.
const ASK_NODE_FOR: Duration = Duration::from_millis(500);

/// Kept for the process's life, unlike the quorums and Sentinel backends: what a cluster's
/// transport learned of its primaries is how a handle made later finds the cluster once the
/// seeds it was given are gone (killed, failed over).
static CLUSTERS: LazyLock<Mutex<HashMap<String, Arc<dyn Transport>>>> =
    LazyLock::new(Default::default);

/// The transport of the cluster `client` points at, shared by every handle in the process
/// built from the same seeds.
pub(crate) fn shared(client: &ClusterClient) -> Result<Arc<dyn Transport>, Error> {
    let seeds = seeds_of(client)?;
    let Some(template) = seeds.first().cloned() else {
        return Err(Error::invalid("a ClusterClient without seed nodes"));
    };
    let key = format!(
        "{:?}|{}",
        seeds.iter().map(addr_of).collect::<Vec<_>>(),
        super::server::login(template.redis_settings())
    );
    let mut clusters = CLUSTERS.lock();
    if let Some(found) = clusters.get(&key) {
        return Ok(Arc::clone(found));
    }
    let topology = Slots {
        seeds: seeds.iter().filter_map(addr_of).collect(),
        owners: RwLock::new(vec![None; SLOTS]),
        switched: RwLock::default(),
    };
    let transport: Arc<dyn Transport> = Arc::new(Routed::new(topology, template));
    clusters.insert(key, Arc::clone(&transport));
    Ok(transport)
}

/// The slot map: the primary (`host:port`) serving each slot.
struct Slots {
    seeds: Vec<String>,
    owners: RwLock<Vec<Option<Arc<str>>>>,
    /// When this process learned that each slot that failed over did.
    switched: RwLock<HashMap<u16, Instant>>,
}

/// The primaries that serve a slot in `owners`: a slot whose primary is another now, one
/// that was not among them, failed over to what was a replica then (a node that joined empty
/// and took slots in a rebalance looks the same, and costs its slots' acquisitions one
/// pause). A slot migrated to a primary moves its keys with it.
fn primaries_in(owners: &[Option<Arc<str>>]) -> HashSet<&str> {
    owners.iter().flatten().map(|owner| &**owner).collect()
}

impl Topology for Slots {
    fn primary_for(&self, slot: Option<u16>) -> Option<String> {
        let owners = self.owners.read();
        match slot {
            Some(slot) => owners.get(usize::from(slot))?.as_deref().map(str::to_owned),
            None => owners.iter().flatten().next().map(|a| a.to_string()),
        }
    }

    fn primaries(&self) -> Vec<String> {
        let mut primaries: Vec<String> = self
            .owners
            .read()
            .iter()
            .flatten()
            .map(|a| a.to_string())
            .collect();
        primaries.sort();
        primaries.dedup();
        primaries
    }

    fn learn(&self, nodes: &Nodes, deadline: Instant) -> Result<(), RedisError> {
        // The primaries known now first: the seeds may be long gone.
        let mut candidates = self.primaries();
        candidates.extend(self.seeds.iter().cloned());
        let mut seen = std::collections::HashSet::new();
        candidates.retain(|addr| seen.insert(addr.clone()));
        let mut last = RedisError::from((ErrorKind::Io, "no node to ask"));
        for addr in candidates {
            if Instant::now() >= deadline {
                break;
            }
            match ask_slots(nodes, &addr, deadline.min(Instant::now() + ASK_NODE_FOR)) {
                Ok(map) => {
                    let now = Instant::now();
                    let mut owners = self.owners.write();
                    let mut switched = self.switched.write();
                    let mut any = false;
                    let primaries = primaries_in(&owners);
                    for (slot, (old, new)) in owners.iter().zip(&map).enumerate() {
                        if let (Some(old), Some(new), Ok(slot)) = (old, new, u16::try_from(slot))
                            && old != new
                            && !primaries.contains(&**new)
                        {
                            switched.insert(slot, now);
                            any = true;
                        }
                    }
                    drop(primaries);
                    *owners = map;
                    if any {
                        super::switch::switched();
                    }
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn moved(&self, slot: u16, addr: &str) {
        let mut owners = self.owners.write();
        let was = owners.get(usize::from(slot)).cloned().flatten();
        if was.is_some_and(|was| &*was != addr) && !primaries_in(&owners).contains(addr) {
            self.switched.write().insert(slot, Instant::now());
            super::switch::switched();
        }
        if let Some(owner) = owners.get_mut(usize::from(slot)) {
            *owner = Some(addr.into());
        }
    }

    fn switched_at(&self, slot: Option<u16>) -> Option<Instant> {
        self.switched.read().get(&slot?).copied()
    }

    fn hash_tags(&self) -> bool {
        true
    }
}

/// Node `addr`'s view of who serves each slot.
fn ask_slots(
    nodes: &Nodes,
    addr: &str,
    deadline: Instant,
) -> Result<Vec<Option<Arc<str>>>, RedisError> {
    let (_, server) = nodes.at(addr)?;
    let request = Request::single(redis::cmd("CLUSTER").arg("SLOTS").to_owned(), true);
    let answered = send_repeatable(&**server, &request, deadline)?;
    let (asked_host, _) = split_addr(addr)?;
    parse_slots(answered.first(), asked_host).map_err(|reason| {
        RedisError::from((
            ErrorKind::Parse,
            "unexpected CLUSTER SLOTS reply",
            format!("{reason}: {:?}", answered.first()),
        ))
    })
}

/// A `CLUSTER SLOTS` reply as the primary of each slot. A node named without a host is on
/// the host that was asked.
fn parse_slots(reply: &Value, asked_host: &str) -> Result<Vec<Option<Arc<str>>>, &'static str> {
    if let Value::ServerError(_) = reply {
        return Err("refused");
    }
    let Value::Array(ranges) = reply else {
        return Err("not an array");
    };
    let mut owners = vec![None; SLOTS];
    for range in ranges {
        let Value::Array(fields) = range else {
            return Err("a range is not an array");
        };
        let [Value::Int(first), Value::Int(last), Value::Array(primary), ..] = fields.as_slice()
        else {
            return Err("a range lacks its slots or primary");
        };
        let [host, Value::Int(port), ..] = primary.as_slice() else {
            return Err("a primary lacks its address");
        };
        let host = match host {
            Value::BulkString(h) if !h.is_empty() => String::from_utf8_lossy(h).into_owned(),
            Value::BulkString(_) | Value::Nil => asked_host.to_owned(),
            _ => return Err("a host is not a string"),
        };
        let addr: Arc<str> = format!("{host}:{port}").into();
        let first = usize::try_from(*first).map_err(|_| "a slot is negative")?;
        let last = usize::try_from(*last).map_err(|_| "a slot is negative")?;
        for owner in owners
            .get_mut(first..=last)
            .ok_or("a slot is out of range")?
        {
            *owner = Some(Arc::clone(&addr));
        }
    }
    Ok(owners)
}

thread_local! {
    /// What [`Probe::connect`] was given, on the thread asking [`seeds_of`].
    static PROBED: RefCell<Vec<ConnectionInfo>> = const { RefCell::new(Vec::new()) };
}

/// The seed nodes of `client` with its credentials and TLS settings. `ClusterClient` does
/// not show them; it hands them, one per seed, to the connection type it connects with, so
/// a type that only records them and declines to connect learns them without a round trip.
fn seeds_of(client: &ClusterClient) -> Result<Vec<ConnectionInfo>, Error> {
    PROBED.with(|p| p.borrow_mut().clear());
    // Declined by every seed, the connection fails; what matters is what the probe saw.
    let _ = client.get_generic_connection::<Probe>();
    let seeds = PROBED.with(|p| std::mem::take(&mut *p.borrow_mut()));
    if seeds.is_empty() {
        return Err(Error::invalid(
            "the ClusterClient named no seed node this crate can reach",
        ));
    }
    Ok(seeds)
}

/// A connection type that cannot exist: it records where it was asked to connect.
struct Probe(Infallible);

impl redis::cluster::Connect for Probe {
    fn connect<T: IntoConnectionInfo>(info: T, _timeout: Option<Duration>) -> RedisResult<Self> {
        let info = info.into_connection_info()?;
        PROBED.with(|p| p.borrow_mut().push(info));
        Err(RedisError::from((
            ErrorKind::Client,
            "only the seed addresses were wanted",
        )))
    }

    fn send_packed_command(&mut self, _cmd: &[u8]) -> RedisResult<()> {
        match self.0 {}
    }

    fn set_write_timeout(&self, _dur: Option<Duration>) -> RedisResult<()> {
        match self.0 {}
    }

    fn set_read_timeout(&self, _dur: Option<Duration>) -> RedisResult<()> {
        match self.0 {}
    }

    fn recv_response(&mut self) -> RedisResult<Value> {
        match self.0 {}
    }
}

impl redis::ConnectionLike for Probe {
    fn req_packed_command(&mut self, _cmd: &[u8]) -> RedisResult<Value> {
        match self.0 {}
    }

    fn req_packed_commands(
        &mut self,
        _cmd: &[u8],
        _offset: usize,
        _count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self.0 {}
    }

    fn get_db(&self) -> i64 {
        match self.0 {}
    }

    fn check_connection(&mut self) -> bool {
        match self.0 {}
    }

    fn is_open(&self) -> bool {
        match self.0 {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn slots() -> Slots {
        Slots {
            seeds: Vec::new(),
            owners: RwLock::new(vec![None; SLOTS]),
            switched: RwLock::default(),
        }
    }

    #[test]
    fn a_slot_moved_to_a_node_that_served_none_failed_over_and_one_moved_to_a_primary_migrated() {
        let slots = slots();
        slots.moved(7, "a:1");
        slots.moved(8, "c:3");
        assert_eq!(slots.switched_at(Some(7)), None, "first learned");
        slots.moved(7, "c:3");
        assert_eq!(
            slots.switched_at(Some(7)),
            None,
            "migrated to another primary"
        );
        slots.moved(8, "b:2");
        assert!(
            slots.switched_at(Some(8)).is_some(),
            "failed over to c:3's replica"
        );
        assert_eq!(slots.switched_at(Some(9)), None);
    }

    #[test]
    fn cluster_slots_become_a_primary_per_slot() {
        let reply = Value::Array(vec![
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                Value::Array(vec![bulk("10.0.0.1"), Value::Int(7000), bulk("id1")]),
                Value::Array(vec![bulk("10.0.0.4"), Value::Int(7003), bulk("id4")]),
            ]),
            Value::Array(vec![
                Value::Int(5461),
                Value::Int(16383),
                Value::Array(vec![bulk(""), Value::Int(7001), bulk("id2")]),
            ]),
        ]);
        let owners = parse_slots(&reply, "10.0.0.9").unwrap();
        assert_eq!(owners[0].as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(owners[5460].as_deref(), Some("10.0.0.1:7000"));
        assert_eq!(
            owners[5461].as_deref(),
            Some("10.0.0.9:7001"),
            "a node without a host is on the host asked"
        );
    }

    #[test]
    fn a_cluster_slots_reply_out_of_range_is_refused() {
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(20000),
            Value::Array(vec![bulk("h"), Value::Int(1)]),
        ])]);
        assert!(parse_slots(&reply, "h").is_err());
    }

    #[test]
    fn the_seeds_of_a_cluster_client_keep_their_credentials() {
        let client = ClusterClient::builder(["redis://127.0.0.1:1/", "redis://127.0.0.1:2/"])
            .password("secret")
            .build()
            .unwrap();
        let seeds = seeds_of(&client).unwrap();
        let addrs: Vec<_> = seeds.iter().filter_map(addr_of).collect();
        assert_eq!(addrs, ["127.0.0.1:1", "127.0.0.1:2"]);
        assert_eq!(seeds[0].redis_settings().password(), Some("secret"));
    }
}
