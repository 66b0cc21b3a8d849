//! Private Redis deployments the bench starts for one run: a primary with one replica (the
//! `wait1` cell on one server), N independent servers (`--quorum N`) and, with the `cluster`
//! feature, a Redis Cluster of three primaries with one replica each. Dropping a [`Deployment`] kills its servers and removes
//! their files, so they go away when the bench ends, also on an error.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a deployment may take to come up (a cluster needs a few gossip rounds).
const START_LIMIT: Duration = Duration::from_secs(30);
/// A cluster node talks to the others on its port + this (Redis's default bus port offset).
const BUS_OFFSET: u16 = 10_000;

/// `redis-server` processes started for this run, and the folder that holds their files.
pub struct Deployment {
    children: Vec<Child>,
    dir: PathBuf,
    /// The servers' ports, in the order they were started.
    pub ports: Vec<u16>,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Deployment {
    /// An empty deployment with a fresh folder of its own: the cluster config files and any
    /// RDB a full sync writes go there, never into the working directory.
    fn new(kind: &str) -> Result<Deployment, String> {
        let dir = std::env::temp_dir().join(format!(
            "redis-blpop-lock-bench-{kind}-{}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(Deployment {
            children: Vec::new(),
            dir,
            ports: Vec::new(),
        })
    }

    /// Starts one `redis-server` on `port`, without persistence, with `extra` arguments.
    fn spawn(&mut self, port: u16, extra: &[&str]) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| format!("could not start redis-server ({e}); is it on PATH?"))?;
        self.children.push(child);
        self.ports.push(port);
        Ok(())
    }

    pub fn url(&self, index: usize) -> String {
        format!("redis://127.0.0.1:{}/", self.ports[index])
    }
}

/// A primary (`url(0)`) and one replica of it (`url(1)`), returned once the replica is in
/// sync and the primary counts it, so that `WAIT 1` can be answered.
pub fn start_pair() -> Result<Deployment, String> {
    let ports = free_ports(2, false)?;
    let mut pair = Deployment::new("pair")?;
    pair.spawn(ports[0], &[])?;
    pair.spawn(
        ports[1],
        &["--replicaof", "127.0.0.1", &ports[0].to_string()],
    )?;
    wait_for("the replica to sync with its primary", || {
        replication_ok(ports[0]) && replication_ok(ports[1])
    })?;
    Ok(pair)
}

/// `n` independent servers (`url(0)` .. `url(n - 1)`), none a replica of another, as a
/// Redlock quorum needs them; returned once every one answers.
pub fn start_servers(n: usize) -> Result<Deployment, String> {
    let ports = free_ports(n, false)?;
    let mut servers = Deployment::new("servers")?;
    for &port in &ports {
        servers.spawn(port, &[])?;
    }
    for &port in &ports {
        wait_for(format!("the server on port {port} to start"), || {
            info(port, "server").is_some()
        })?;
    }
    Ok(servers)
}

/// A Redis Cluster of three primaries with `replicas` replicas each, formed by
/// `redis-cli --cluster create` and returned once every node says `cluster_state:ok` and every
/// replica's link to its primary is up.
#[cfg(feature = "cluster")]
pub fn start_cluster(replicas: usize) -> Result<Deployment, String> {
    let ports = free_ports(3 * (1 + replicas), true)?;
    let mut cluster = Deployment::new("cluster")?;
    for &port in &ports {
        let config = format!("nodes-{port}.conf");
        let settings = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            &config,
            "--cluster-node-timeout",
            "2000",
        ];
        cluster.spawn(port, &settings)?;
    }
    for &port in &ports {
        wait_for(format!("the node on port {port} to start"), || {
            info(port, "server").is_some()
        })?;
    }
    let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addresses)
        .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("could not run redis-cli ({e}); is it on PATH?"))?;
    if !created.status.success() {
        return Err(format!(
            "redis-cli --cluster create failed ({}): {}{}",
            created.status,
            String::from_utf8_lossy(&created.stdout),
            String::from_utf8_lossy(&created.stderr)
        ));
    }
    wait_for("cluster_state:ok and every replica in sync", || {
        ports.iter().all(|&port| {
            (replicas == 0 || replication_ok(port))
                && redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(300)))
                    .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
                    .is_ok_and(|text| text.contains("cluster_state:ok"))
        })
    })?;
    Ok(cluster)
}

/// The address (`host:port`) of the primary that serves `key`'s hash slot, from
/// `CLUSTER KEYSLOT` and `CLUSTER SLOTS` asked on `conn` (any node of the cluster).
#[cfg(feature = "cluster")]
pub fn primary_for(conn: &mut redis::Connection, key: &str) -> Result<String, String> {
    use redis::{from_redis_value_ref as parse, Value};
    let error = |e: redis::RedisError| e.to_string();
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(conn)
        .map_err(error)?;
    let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query(conn)
        .map_err(error)?;
    // Each range: [first slot, last slot, [primary ip, port, id, ...], replicas...].
    for range in &ranges {
        let [first, last, primary, ..] = range.as_slice() else {
            continue;
        };
        let (first, last): (i64, i64) = (
            parse(first).map_err(|e| e.to_string())?,
            parse(last).map_err(|e| e.to_string())?,
        );
        if (first..=last).contains(&slot) {
            let primary: Vec<Value> = parse(primary).map_err(|e| e.to_string())?;
            let [ip, port, ..] = primary.as_slice() else {
                return Err(format!(
                    "CLUSTER SLOTS: a primary without an address: {primary:?}"
                ));
            };
            let ip: String = parse(ip).map_err(|e| e.to_string())?;
            let port: u16 = parse(port).map_err(|e| e.to_string())?;
            return Ok(format!("{ip}:{port}"));
        }
    }
    Err(format!("no primary serves slot {slot} of {key}"))
}

/// `n` distinct free loopback ports; with `bus`, each one's bus port (port + 10000) is free
/// too, as a cluster node needs both. The listeners are held until all are found, so no port
/// is picked twice.
fn free_ports(n: usize, bus: bool) -> Result<Vec<u16>, String> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..1000 {
        if ports.len() == n {
            return Ok(ports);
        }
        let listener =
            TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        if bus {
            let Some(bus_port) = port.checked_add(BUS_OFFSET) else {
                continue;
            };
            match TcpListener::bind(("127.0.0.1", bus_port)) {
                Ok(bus_listener) => held.push(bus_listener),
                Err(_) => continue,
            }
        }
        held.push(listener);
        ports.push(port);
    }
    Err(format!("could not find {n} free ports"))
}

/// True once the server on `port` is a primary that counts a replica, or a replica whose
/// link to its primary is up.
fn replication_ok(port: u16) -> bool {
    info(port, "replication").is_some_and(|text| {
        text.contains("master_link_status:up")
            || (text.contains("role:master") && !text.contains("connected_slaves:0"))
    })
}

/// `INFO section` of the server on `port`, or `None` while it does not answer.
fn info(port: u16, section: &str) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    redis::cmd("INFO").arg(section).query(&mut conn).ok()
}

/// Polls `done` until it is true, or gives up after [`START_LIMIT`] saying what it waited for.
fn wait_for(what: impl std::fmt::Display, mut done: impl FnMut() -> bool) -> Result<(), String> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > START_LIMIT {
            return Err(format!("gave up after {START_LIMIT:?} waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
