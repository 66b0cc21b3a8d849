//! A Sentinel-managed primary, private to a test: one primary, one replica, and three
//! sentinels (quorum 2) that fail over on cue or after a crash.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::node::{until_all, Node};
use super::server::{Args, DISKLESS};
use super::RedisServer;

const SERVICE: &str = "redis-lock-test";

const SENTINELS: usize = 3;

/// How long the sentinels may take: they find each other through hello messages every 2 s,
/// and demote an old primary that is still up only after it reported its role for 8 s.
const LIMIT: Duration = Duration::from_secs(40);

/// A primary, its replica and three sentinels on loopback ports, without persistence; killed
/// on drop, with their config files.
pub struct SentinelSet {
    // The primary and the replica at start; the sentinels say which is which now.
    data: Vec<Node>,
    sentinels: Vec<Node>,
    config_files: Vec<PathBuf>,
}

impl SentinelSet {
    pub fn start() -> SentinelSet {
        let mut set = SentinelSet {
            data: Vec::new(),
            sentinels: Vec::new(),
            config_files: Vec::new(),
        };
        let primary = RedisServer::start_with(&DISKLESS);
        let primary_port = primary.port.to_string();
        set.data.push(Node::new(primary));
        let replica = RedisServer::start_with(
            &[&DISKLESS[..], &["--replicaof", "127.0.0.1", &primary_port]].concat(),
        );
        set.data.push(Node::new(replica));
        // Before the sentinels start: they learn of replicas from the primary's INFO, asked
        // every 10 s after the first time.
        until_all(LIMIT, "the replica's link", &[&set.data[1]], |node| {
            node.replication("master_link_status").as_deref() == Some("up")
        });
        for _ in 0..SENTINELS {
            let config_file = new_config_path();
            set.config_files.push(config_file.clone());
            let sentinel = RedisServer::start_with_args(|port| {
                write_config(&config_file, port, &primary_port);
                Args {
                    config_file: Some(config_file.clone()),
                    extra: vec!["--sentinel".to_string()],
                }
            });
            set.sentinels.push(Node::new(sentinel));
        }
        set.until_sentinels_know(set.replica().port);
        set
    }

    /// The sentinels' URLs, to find the primary through.
    pub fn sentinel_urls(&self) -> Vec<String> {
        (self.sentinels.iter())
            .map(|node| node.server.url())
            .collect()
    }

    /// Freezes every sentinel (SIGSTOP): up, but silent.
    pub fn freeze_sentinels(&self) {
        for node in &self.sentinels {
            node.server.pause();
        }
    }

    pub fn thaw_sentinels(&self) {
        for node in &self.sentinels {
            node.server.resume();
        }
    }

    /// The name the sentinels monitor the primary under.
    pub fn service(&self) -> &str {
        SERVICE
    }

    /// The library's backend for the primary the sentinels name.
    pub fn backend(&self) -> redis_blpop_lock::Sentinel {
        redis_blpop_lock::Sentinel::new(self.sentinel_urls(), self.service()).unwrap()
    }

    /// Whether the server on `port` says it is a primary.
    pub fn is_primary(&self, port: u16) -> bool {
        let role: redis::Value = redis::cmd("ROLE")
            .query(&mut self.server(port).conn())
            .unwrap();
        format!("{role:?}").contains("master")
    }

    /// The server the sentinels name as the primary now.
    pub fn primary(&self) -> &RedisServer {
        let sentinel = &self.sentinels[0];
        let (_, port): (String, u16) = sentinel.must(
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(SERVICE),
            "SENTINEL GET-MASTER-ADDR-BY-NAME",
        );
        &self.data[self.by_port(port)].server
    }

    /// The other one, if it is still up.
    pub fn replica(&self) -> &RedisServer {
        let primary = self.by_port(self.primary().port);
        let replica = &self.data[1 - primary];
        assert!(replica.running(), "the replica was killed");
        &replica.server
    }

    /// The server on `port`, the primary or the replica.
    pub fn server(&self, port: u16) -> &RedisServer {
        &self.data[self.by_port(port)].server
    }

    /// A failover on cue: the replica becomes the primary, and the old primary its replica.
    pub fn failover(&self) {
        let old = self.failover_named();
        let new = self.primary().port;
        until_all(
            LIMIT,
            &format!("port {old} to become a replica of {new} with its link up"),
            &[&self.data[self.by_port(old)]],
            |node| {
                node.replication("master_port") == Some(new.to_string())
                    && node.replication("master_link_status").as_deref() == Some("up")
            },
        );
        // So that another failover has a replica to promote.
        self.until_sentinels_know(old);
    }

    /// A failover on cue, until every sentinel names the replica as the primary: the old
    /// primary, still up, is still a primary then (Sentinel demotes it seconds later). Returns
    /// the old primary's port.
    pub fn failover_named(&self) -> u16 {
        let (old, new) = (self.primary().port, self.replica().port);
        self.sentinels[0].must::<()>(
            redis::cmd("SENTINEL").arg("FAILOVER").arg(SERVICE),
            "SENTINEL FAILOVER",
        );
        self.until_promoted(new);
        old
    }

    /// Kills the primary like a crash (SIGKILL), waits until the sentinels promoted the
    /// replica, and starts the old primary again on its port, empty: a primary again until
    /// Sentinel demotes it. Returns the old primary's port.
    pub fn crash_and_restart_primary(&mut self) -> u16 {
        let old = self.primary().port;
        self.kill_primary_and_wait_failover();
        let at = self.by_port(old);
        self.data[at].server.restart_after(Duration::ZERO);
        old
    }

    /// Kills the primary like a crash (SIGKILL) and waits until the sentinels promoted the
    /// replica.
    pub fn kill_primary_and_wait_failover(&mut self) {
        let new = self.kill_primary();
        self.until_promoted(new);
    }

    /// Kills the primary like a crash (SIGKILL), without waiting for the failover (a test may
    /// do something to the replica first): the replica's port.
    pub fn kill_primary(&mut self) -> u16 {
        let (old, new) = (self.primary().port, self.replica().port);
        let old = self.by_port(old);
        self.data[old].kill();
        new
    }

    /// Waits until every sentinel names `port` as the primary, and it says so itself.
    pub fn until_promoted(&self, port: u16) {
        let sentinels: Vec<&Node> = self.sentinels.iter().collect();
        until_all(
            LIMIT,
            &format!("the sentinels to name port {port} as the primary"),
            &sentinels,
            |node| {
                node.query::<(String, u16)>(
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(SERVICE),
                )
                .is_ok_and(|(_, named)| named == port)
            },
        );
        until_all(
            LIMIT,
            &format!("port {port} to be a primary"),
            &[&self.data[self.by_port(port)]],
            |node| node.replication("role").as_deref() == Some("master"),
        );
    }

    /// Waits until every sentinel knows the replica on `replica_port` as one it could promote,
    /// and the other sentinels.
    fn until_sentinels_know(&self, replica_port: u16) {
        let sentinels: Vec<&Node> = self.sentinels.iter().collect();
        until_all(
            LIMIT,
            &format!("the sentinels to know each other and the replica on port {replica_port}"),
            &sentinels,
            |node| {
                let replicas = instances(node, "REPLICAS");
                let others = instances(node, "SENTINELS");
                let replica_ok = replicas.iter().any(|replica| {
                    replica.get("port") == Some(&replica_port.to_string())
                        && replica.get("flags").map(String::as_str) == Some("slave")
                });
                replica_ok && others.len() == SENTINELS - 1
            },
        );
    }

    fn by_port(&self, port: u16) -> usize {
        (self.data.iter())
            .position(|node| node.server.port == port)
            .unwrap_or_else(|| panic!("the sentinels name port {port}, not one of this set"))
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        // Killed first, so that no sentinel rewrites its config file after it is removed.
        for node in &mut self.sentinels {
            node.kill();
        }
        for file in &self.config_files {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// What `SENTINEL REPLICAS|SENTINELS <service>` lists, each as its fields; none if the
/// sentinel does not answer.
fn instances(sentinel: &Node, which: &str) -> Vec<HashMap<String, String>> {
    (sentinel.query(redis::cmd("SENTINEL").arg(which).arg(SERVICE))).unwrap_or_default()
}

/// Written anew on each try (the port changes), and left writable: a sentinel rewrites its
/// config file with what it learns.
fn write_config(path: &PathBuf, port: u16, primary_port: &str) {
    let dir = std::env::temp_dir();
    let config = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         dir {}\n\
         sentinel monitor {SERVICE} 127.0.0.1 {primary_port} 2\n\
         sentinel down-after-milliseconds {SERVICE} 1000\n\
         sentinel failover-timeout {SERVICE} 5000\n",
        dir.display()
    );
    std::fs::write(path, config).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A sentinel config path no other sentinel of this run uses.
fn new_config_path() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!(
        "redis-lock-test-{}-sentinel-{n}.conf",
        std::process::id()
    ))
}

/// A handle whose calls ride out a failover (a second to notice, a second or two to elect).
pub fn patient(backend: &redis_blpop_lock::Sentinel, name: &str) -> redis_blpop_lock::LockBuilder {
    redis_blpop_lock::Lock::builder(backend, name).io_timeout(Duration::from_secs(20))
}
