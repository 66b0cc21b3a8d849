//! A TCP proxy in front of a server that holds back or drops the server's replies and cuts
//! connections: a network that delays or fails, under the test's control.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::ms;

pub struct Proxy {
    pub port: u16,
    state: Arc<ProxyState>,
}

#[derive(Default)]
struct ProxyState {
    stopped: AtomicBool,
    /// Set by `drop_next_reply`; the first connection to get a reply from the server clears it.
    drop_next: AtomicBool,
    /// Set by `drop_reply_to`: the first request containing these bytes dooms its connection.
    drop_after: Mutex<Option<Vec<u8>>>,
    links: Mutex<Vec<Link>>,
}

/// One proxied connection: both sockets (to cut it) and whether its replies are held back.
struct Link {
    client: TcpStream,
    server: TcpStream,
    hold: Arc<AtomicBool>,
}

impl Proxy {
    /// Starts forwarding a free loopback port to the server on `target_port`.
    pub fn start(target_port: u16) -> Proxy {
        let listener = super::server::fresh_listener();
        let port = listener.local_addr().expect("proxy address").port();
        let state = Arc::new(ProxyState::default());
        let accepting = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", target_port)) else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let hold = Arc::new(AtomicBool::new(false));
                let (Ok(c1), Ok(c2), Ok(s1), Ok(s2)) = (
                    client.try_clone(),
                    client.try_clone(),
                    server.try_clone(),
                    server.try_clone(),
                ) else {
                    continue;
                };
                accepting.links.lock().unwrap().push(Link {
                    client: c1,
                    server: s1,
                    hold: Arc::clone(&hold),
                });
                let replies = Arc::clone(&accepting);
                let requests = Arc::clone(&accepting);
                let doomed = Arc::new(AtomicBool::new(false));
                let doom = Arc::clone(&doomed);
                std::thread::spawn(move || {
                    pump_requests(client, server, &requests.drop_after, &doom)
                });
                std::thread::spawn(move || {
                    pump(s2, c2, Some((&hold, &replies.drop_next, &doomed)))
                });
            }
        });
        Proxy { port, state }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid URL")
    }

    /// Holds back (or lets through again) the replies on every connection open now; the
    /// server still runs the commands it receives. New connections are not held.
    pub fn hold_replies(&self, hold: bool) {
        for link in self.state.links.lock().unwrap().iter() {
            link.hold.store(hold, Ordering::SeqCst);
        }
    }

    /// The next reply the server sends, on any connection through the proxy (open now or
    /// later), is swallowed and its connection closed: the server ran the command, and the
    /// client sees its connection die without an answer.
    pub fn drop_next_reply(&self) {
        self.state.drop_next.store(true, Ordering::SeqCst);
    }

    /// The reply to the next request that contains `pattern` (on any connection) is
    /// swallowed and its connection closed: the server ran the command, the client never
    /// hears back.
    pub fn drop_reply_to(&self, pattern: &str) {
        *self.state.drop_after.lock().unwrap() = Some(pattern.as_bytes().to_vec());
    }

    /// Closes every connection open now, dropping any replies held back.
    pub fn cut_all(&self) {
        for link in self.state.links.lock().unwrap().drain(..) {
            let _ = link.client.shutdown(Shutdown::Both);
            let _ = link.server.shutdown(Shutdown::Both);
            // A pump holding a reply now finds its socket closed and ends.
            link.hold.store(false, Ordering::SeqCst);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut_all();
        // Wakes the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` until either side closes. For replies (`Some((hold, drop_next))`),
/// it waits while `hold` is set before passing on what it read, and when it is the one to
/// clear `drop_next`, it passes nothing on and closes the connection instead.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    replies: Option<(&AtomicBool, &AtomicBool, &AtomicBool)>,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((hold, drop_next, doomed)) = replies {
            if drop_next.swap(false, Ordering::SeqCst) || doomed.load(Ordering::SeqCst) {
                break;
            }
            while hold.load(Ordering::SeqCst) {
                std::thread::sleep(ms(1));
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Copies requests from the client to the server; the first one that contains the armed
/// pattern dooms the connection, so that its reply is dropped.
fn pump_requests(
    mut from: TcpStream,
    mut to: TcpStream,
    armed: &Mutex<Option<Vec<u8>>>,
    doomed: &AtomicBool,
) {
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        {
            let mut armed = armed.lock().unwrap();
            let hit = armed
                .as_ref()
                .is_some_and(|p| buf[..n].windows(p.len()).any(|w| w == p.as_slice()));
            if hit {
                *armed = None;
                doomed.store(true, Ordering::SeqCst);
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
