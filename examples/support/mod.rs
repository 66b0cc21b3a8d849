//! Finding a Redis server for an example: `REDIS_URL`, else the default local port, else a
//! private `redis-server` started for this run when one is on PATH.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";

/// A server this example started; killed when dropped.
pub struct PrivateServer(Child);

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The URL to use, and the private server behind it if one had to be started. `explicit` (a
/// `--url` flag) wins over `REDIS_URL`, which wins over the default.
pub fn redis_url(explicit: Option<String>) -> Result<(String, Option<PrivateServer>), String> {
    if let Some(url) = explicit.or_else(|| std::env::var("REDIS_URL").ok()) {
        return Ok((url, None));
    }
    if answers(DEFAULT_URL) {
        return Ok((DEFAULT_URL.to_string(), None));
    }
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "nothing answers at {DEFAULT_URL} and redis-server could not be started ({e}); \
                 install it (apt-get install -y redis-server) or set REDIS_URL"
            )
        })?;
    let server = PrivateServer(child);
    let url = format!("redis://127.0.0.1:{port}/");
    let started = Instant::now();
    while !answers(&url) {
        if started.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "the private redis-server on port {port} did not start"
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("(nothing at {DEFAULT_URL}: started a private redis-server at {url} for this run)");
    Ok((url, Some(server)))
}

fn answers(url: &str) -> bool {
    redis::Client::open(url)
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(300)))
        .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
        .is_ok()
}
