//! A Redis Cluster of 3 primaries with a replica each: private to a test, or one per test
//! binary for the tests that leave it as it is; with the moves tests make on purpose
//! (failovers, crashes, slot migrations), each waiting until every live node agrees.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use super::node::{until_all, Node};
use super::server::{cli_binary, free_port, Args, DISKLESS, INSTALL_HINT};
use super::RedisServer;

const NODES: usize = 6;

/// How long forming the cluster, a failover or a migration may take: a crashed primary is
/// noticed after the node timeout (1 s), and its replica waits up to another second to ask
/// for votes.
const LIMIT: Duration = Duration::from_secs(30);

/// A Redis Cluster on loopback ports, without persistence; killed on drop.
pub struct RedisCluster {
    nodes: Vec<Node>,
    // By index in `nodes`.
    ids: Vec<String>,
    config_files: Vec<PathBuf>,
}

impl RedisCluster {
    /// A private cluster, for a test that kills nodes, fails over or migrates slots.
    pub fn start() -> RedisCluster {
        let mut cluster = RedisCluster {
            nodes: Vec::new(),
            ids: Vec::new(),
            config_files: Vec::new(),
        };
        for _ in 0..NODES {
            let config_file = new_config_path();
            cluster.config_files.push(config_file.clone());
            cluster.nodes.push(Node::new(start_node(config_file)));
        }
        cluster.ids = (cluster.nodes.iter())
            .map(|node| node.must(redis::cmd("CLUSTER").arg("MYID"), "CLUSTER MYID"))
            .collect();
        cluster.create();
        cluster.until_formed();
        cluster
    }

    /// The cluster of this test binary, started on first use, for tests that leave it as it
    /// is; its processes end with the binary (see `RedisServer`), its files are removed at exit.
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        extern "C" fn shut_down_shared() {
            if let Some(cluster) = SHARED.get() {
                cluster.shut_down();
            }
        }
        SHARED.get_or_init(|| {
            let cluster = RedisCluster::start();
            // SAFETY: registers a function that neither unwinds nor calls `exit`.
            let registered = unsafe { libc::atexit(shut_down_shared) };
            assert_eq!(registered, 0, "atexit failed");
            cluster
        })
    }

    /// The URL of a live primary, to start a cluster client from.
    pub fn seed_url(&self) -> String {
        self.primaries()[0].url()
    }

    /// A cluster client that starts from a live primary.
    pub fn client(&self) -> redis::cluster::ClusterClient {
        redis::cluster::ClusterClient::new(vec![self.seed_url()]).unwrap()
    }

    /// The URLs of every live node.
    pub fn urls(&self) -> Vec<String> {
        self.live().iter().map(|node| node.server.url()).collect()
    }

    /// The live primaries that serve slots.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        (self.view().iter())
            .filter(|seen| seen.is_primary() && !seen.slots.is_empty())
            .map(|seen| self.by_id(&seen.id))
            .filter(|&i| self.nodes[i].running())
            .map(|i| &self.nodes[i].server)
            .collect()
    }

    /// The node currently serving `key`'s slot.
    pub fn primary_for(&self, key: &str) -> &RedisServer {
        &self.nodes[self.owner(self.slot_of(key))].server
    }

    /// A live replica of `primary`.
    pub fn replica_of(&self, primary: &RedisServer) -> &RedisServer {
        &self.nodes[self.replica_index(self.by_port(primary.port))].server
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        self.live()[0].must(
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
            "CLUSTER KEYSLOT",
        )
    }

    /// A manual failover: the replica of the primary on `primary_port` takes over its slots,
    /// and the old primary becomes its replica.
    pub fn failover(&self, primary_port: u16) {
        let old = self.by_port(primary_port);
        let new = self.replica_index(old);
        self.nodes[new].must::<()>(redis::cmd("CLUSTER").arg("FAILOVER"), "CLUSTER FAILOVER");
        let (old_id, new_id) = (&self.ids[old], &self.ids[new]);
        until_all(
            LIMIT,
            &format!("port {} to take over from {primary_port}", self.port(new)),
            &self.live(),
            |node| {
                state_ok(node)
                    && view_of(node).is_ok_and(|view| {
                        let promoted = view.iter().any(|s| &s.id == new_id && s.is_primary());
                        let demoted = (view.iter())
                            .any(|s| &s.id == old_id && s.master.as_ref() == Some(new_id));
                        promoted && demoted
                    })
            },
        );
        until_all(
            LIMIT,
            "the old primary's link to the new one",
            &[&self.nodes[old]],
            |node| node.replication("master_link_status").as_deref() == Some("up"),
        );
    }

    /// Kills the node on `port` like a crash (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        let i = self.by_port(port);
        self.nodes[i].kill();
    }

    /// Kills the primary on `port` and waits until the cluster promoted its replica and is
    /// whole again.
    pub fn kill_primary_and_wait_failover(&mut self, port: u16) {
        let replica = self.port(self.replica_index(self.by_port(port)));
        self.kill(port);
        self.until_replaced(port, replica);
    }

    /// Waits until the replica on `replica_port` has replaced the killed primary on `port`
    /// and the cluster is whole again.
    pub fn until_replaced(&self, port: u16, replica_port: u16) {
        let new_id = &self.ids[self.by_port(replica_port)];
        until_all(
            LIMIT,
            &format!("port {replica_port} to replace the killed {port}"),
            &self.live(),
            |node| {
                state_ok(node)
                    && view_of(node)
                        .is_ok_and(|view| view.iter().any(|s| &s.id == new_id && s.is_primary()))
            },
        );
    }

    /// The node on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        &self.nodes[self.by_port(port)].server
    }

    /// Moves `slot`, with its keys, to the primary on `to_port`.
    pub fn migrate_slot(&self, slot: u16, to_port: u16) {
        self.begin_migration(slot, to_port);
        self.finish_migration(slot, to_port);
    }

    /// The first half of `migrate_slot`: the target imports `slot` and its owner migrates it,
    /// so the owner answers ASK for keys it does not have; no key moves yet.
    pub fn begin_migration(&self, slot: u16, to_port: u16) {
        let (from, to) = (self.owner(slot), self.by_port(to_port));
        assert_ne!(from, to, "slot {slot} is already on port {to_port}");
        self.nodes[to].must::<()>(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&self.ids[from]),
            "CLUSTER SETSLOT IMPORTING",
        );
        self.nodes[from].must::<()>(
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&self.ids[to]),
            "CLUSTER SETSLOT MIGRATING",
        );
    }

    /// The second half of `migrate_slot`, after `begin_migration`: moves the keys, then
    /// gives the slot to the target on every primary, and waits until every live node agrees.
    pub fn finish_migration(&self, slot: u16, to_port: u16) {
        let (from, to) = (self.owner(slot), self.by_port(to_port));
        loop {
            let keys: Vec<String> = self.nodes[from].must(
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
                "CLUSTER GETKEYSINSLOT",
            );
            if keys.is_empty() {
                break;
            }
            self.nodes[from].must::<()>(
                redis::cmd("MIGRATE")
                    .arg("127.0.0.1")
                    .arg(to_port)
                    .arg("")
                    .arg(0)
                    .arg(5000)
                    .arg("KEYS")
                    .arg(&keys),
                "MIGRATE",
            );
        }
        // The target first, so that the slot is never left without an owner that accepts it.
        let others = (self.view().iter())
            .filter(|seen| seen.is_primary())
            .map(|seen| self.by_id(&seen.id))
            .filter(|&i| i != to && i != from && self.nodes[i].running())
            .collect::<Vec<_>>();
        for i in [to, from].into_iter().chain(others) {
            self.nodes[i].must::<()>(
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&self.ids[to]),
                "CLUSTER SETSLOT NODE",
            );
        }
        let to_id = &self.ids[to];
        until_all(
            LIMIT,
            &format!("every node to see slot {slot} on port {to_port}"),
            &self.live(),
            |node| {
                view_of(node).is_ok_and(|view| {
                    view.iter()
                        .any(|s| &s.id == to_id && s.is_primary() && s.serves(slot))
                })
            },
        );
    }

    /// Runs `redis-cli --cluster create`, which assigns the slots and pairs the replicas.
    fn create(&self) {
        let addresses = (self.nodes.iter()).map(|node| format!("127.0.0.1:{}", node.server.port));
        let output = Command::new(cli_binary())
            .args(["--cluster", "create"])
            .args(addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output();
        let output = match output {
            Ok(output) => output,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                panic!("redis-cli is not on PATH (it comes with redis-server). {INSTALL_HINT}")
            }
            Err(e) => panic!("could not run redis-cli: {e}"),
        };
        assert!(
            output.status.success(),
            "{}",
            self.nodes[0].server.failure(format!(
                "redis-cli --cluster create failed: {}\n{}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ))
        );
    }

    /// Waits until every node has every slot served, knows every node in its role, and, if a
    /// replica, has its link to its primary up.
    fn until_formed(&self) {
        until_all(
            LIMIT,
            "the cluster to form: cluster_state:ok, all nodes known with their roles, \
             replicas' links up",
            &self.live(),
            |node| {
                let view = view_of(node).unwrap_or_default();
                let count = |flag| view.iter().filter(|s| s.has_flag(flag)).count();
                let settled = !view
                    .iter()
                    .any(|s| s.has_flag("handshake") || s.has_flag("noaddr"));
                let linked = !view
                    .iter()
                    .any(|s| s.has_flag("myself") && s.has_flag("slave"))
                    || node.replication("master_link_status").as_deref() == Some("up");
                state_ok(node)
                    && view.len() == NODES
                    && count("master") == NODES / 2
                    && count("slave") == NODES / 2
                    && settled
                    && linked
            },
        );
    }

    fn live(&self) -> Vec<&Node> {
        self.nodes.iter().filter(|node| node.running()).collect()
    }

    /// The cluster as a live node sees it.
    fn view(&self) -> Vec<Seen> {
        let node = self.live()[0];
        view_of(node)
            .unwrap_or_else(|e| panic!("{}", node.server.failure(format!("CLUSTER NODES: {e}"))))
    }

    fn owner(&self, slot: u16) -> usize {
        let view = self.view();
        let seen = (view.iter())
            .find(|seen| seen.is_primary() && seen.serves(slot))
            .unwrap_or_else(|| panic!("no node serves slot {slot}"));
        self.by_id(&seen.id)
    }

    fn replica_index(&self, primary: usize) -> usize {
        let id = &self.ids[primary];
        (self.view().iter())
            .filter(|seen| seen.master.as_ref() == Some(id) && !seen.has_flag("fail"))
            .map(|seen| self.by_id(&seen.id))
            .find(|&i| self.nodes[i].running())
            .unwrap_or_else(|| panic!("port {} has no live replica", self.port(primary)))
    }

    fn by_port(&self, port: u16) -> usize {
        (self.nodes.iter())
            .position(|node| node.server.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn by_id(&self, id: &str) -> usize {
        (self.ids.iter())
            .position(|known| known == id)
            .unwrap_or_else(|| panic!("no cluster node has the id {id}"))
    }

    fn port(&self, i: usize) -> u16 {
        self.nodes[i].server.port
    }

    /// What dropping does, for the shared cluster, which is never dropped.
    fn shut_down(&self) {
        for node in &self.nodes {
            node.server.shut_down();
        }
        for file in &self.config_files {
            let _ = std::fs::remove_file(file);
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // Killed first, so that no node writes its config file again after it is removed.
        for node in &mut self.nodes {
            node.kill();
        }
        for file in &self.config_files {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// Starts a cluster node; its config file (`nodes.conf`) is the cluster's to remove.
fn start_node(config_file: PathBuf) -> RedisServer {
    RedisServer::start_with_args(|_| Args {
        config_file: None,
        extra: [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &config_file.to_string_lossy(),
            "--cluster-node-timeout",
            "1000",
            // The default, the port + 10000, may be taken or beyond 65535.
            "--cluster-port",
            &free_port().to_string(),
        ]
        .into_iter()
        .chain(DISKLESS)
        .map(String::from)
        .collect(),
    })
}

/// A `nodes.conf` path no other node of this run uses.
fn new_config_path() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "redis-lock-test-{}-nodes-{n}.conf",
        std::process::id()
    ))
}

fn state_ok(node: &Node) -> bool {
    node.field(redis::cmd("CLUSTER").arg("INFO"), "cluster_state")
        .as_deref()
        == Some("ok")
}

/// One node as another sees it: a line of `CLUSTER NODES`.
struct Seen {
    id: String,
    flags: Vec<String>,
    master: Option<String>,
    slots: Vec<(u16, u16)>,
}

impl Seen {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    fn is_primary(&self) -> bool {
        self.has_flag("master") && !self.has_flag("fail")
    }

    fn serves(&self, slot: u16) -> bool {
        (self.slots.iter()).any(|&(first, last)| (first..=last).contains(&slot))
    }
}

fn view_of(node: &Node) -> redis::RedisResult<Vec<Seen>> {
    let text: String = node.query(redis::cmd("CLUSTER").arg("NODES"))?;
    Ok(text.lines().filter_map(parse_seen).collect())
}

/// `<id> <ip:port@bus> <flags> <master id or -> <ping> <pong> <epoch> <link> <slots>...`,
/// where a slot being moved shows as `[slot->-id]` or `[slot-<-id]` (skipped: the slot's
/// owner is still listed with it).
fn parse_seen(line: &str) -> Option<Seen> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let slots = (fields.get(8..)?.iter())
        .filter(|range| !range.starts_with('['))
        .filter_map(|range| match range.split_once('-') {
            Some((first, last)) => Some((first.parse().ok()?, last.parse().ok()?)),
            None => range.parse().ok().map(|slot| (slot, slot)),
        })
        .collect();
    Some(Seen {
        id: fields[0].to_string(),
        flags: fields[2].split(',').map(String::from).collect(),
        master: Some(fields[3].to_string()).filter(|m| m != "-"),
        slots,
    })
}
