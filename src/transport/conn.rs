//! One connection of the blocking transport: each read and write bounded by its call's
//! deadline down to the socket, and carried on when a signal cuts it short.
//!
//! Linux ends a blocking socket call that has a timeout with EINTR when the process is
//! stopped and continued (Ctrl-Z and `fg`, a debugger, a frozen container), even with no
//! signal handler (signal(7)). The redis crate's `Connection` then counts the reply being read
//! as one to skip, so the reply would be taken for lost, and reading on would skip it. So plain
//! TCP and Unix-socket connections are this crate's own: the redis crate's parser, which keeps
//! what it has read across calls, over a socket read again after EINTR with its timeout set
//! to the time left. TLS (`rediss://`) stays on the redis crate's connection.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use redis::io::tcp::socket2::Socket;
use redis::io::tcp::TcpSettings;
use redis::{ConnectionAddr, ConnectionLike, ErrorKind, Parser, RedisError, Value};

use super::admin::client_id;
use super::runs::run_id;
use super::ConnId;

/// A socket timeout this much longer than the time left is still close enough: setting it
/// again would cost a system call on every request.
const TIMEOUT_SLACK: Duration = Duration::from_millis(1);

/// A connection to a server, and its id there.
pub(crate) struct Conn {
    link: Link,
    /// Its id at the server (`CLIENT ID`), unless the server would not tell it.
    id: Option<u64>,
    /// The server's run id when it connected, unless the server would not tell it.
    run_id: Option<String>,
    /// The socket timeouts last set.
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

enum Link {
    /// A TCP or Unix socket of our own.
    Own { socket: Socket, parser: Parser },
    /// TLS, through the redis crate.
    Crate(redis::Connection),
}

impl Conn {
    /// A new connection to the server `client` points at, logged in and on its database, by
    /// `deadline`, that knows its id at the server and whether it may be unblocked by it.
    pub(crate) fn open(client: &redis::Client, deadline: Instant) -> Result<Conn, RedisError> {
        let info = client.get_connection_info();
        let socket = match info.addr() {
            ConnectionAddr::Tcp(host, port) => {
                Some(tcp(host, *port, info.tcp_settings(), deadline)?)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Some(Socket::from(UnixStream::connect(path)?)),
            _ => None,
        };
        let mut setup = redis::pipe();
        let link = match socket {
            Some(socket) => {
                // What the redis crate would send on connecting, less `CLIENT SETINFO`: our
                // `CLIENT ID` comes right after, so a server that turns us away
                // (`maxclients`) says so in its answer. Always RESP2, which the lock's
                // replies are read as.
                let settings = info.redis_settings();
                if let Some(password) = settings.password() {
                    let auth = setup.cmd("AUTH");
                    if let Some(username) = settings.username() {
                        auth.arg(username);
                    }
                    auth.arg(password);
                }
                if settings.db() != 0 {
                    setup.cmd("SELECT").arg(settings.db());
                }
                Link::Own {
                    socket,
                    parser: Parser::new(),
                }
            }
            None => Link::Crate(client.get_connection_with_timeout(time_left(deadline)?)?),
        };
        let mut conn = Conn {
            link,
            id: None,
            run_id: None,
            read_timeout: None,
            write_timeout: None,
        };
        setup.cmd("CLIENT").arg("ID");
        setup.cmd("INFO").arg("server");
        conn.send(&setup.get_packed_pipeline(), deadline)?;
        for _ in 2..setup.len() {
            match conn.recv(deadline)? {
                Value::Okay => {}
                Value::ServerError(e) => return Err(e.into()),
                other => {
                    return Err(RedisError::from((
                        ErrorKind::Client,
                        "unexpected reply to AUTH or SELECT",
                        format!("{other:?}"),
                    )))
                }
            }
        }
        conn.id = client_id(conn.recv(deadline)?)?;
        conn.run_id = run_id(&conn.recv(deadline)?);
        Ok(conn)
    }

    /// The server's run id when it connected (see [`runs`](super::runs)).
    pub(crate) fn run_id(&self) -> Option<&str> {
        self.run_id.as_deref()
    }

    /// Its id for the transport: a single server is node 0 (a transport over several servers
    /// numbers them).
    pub(crate) fn conn_id(&self) -> Option<ConnId> {
        self.id.map(|id| ConnId { node: 0, id })
    }

    /// Whether a request may go out on it after it sat idle: not if the server closed it or
    /// sent something unasked (a server closing it may say why first), since the request
    /// would then be taken for lost though it cannot have run.
    pub(crate) fn usable(&self) -> bool {
        match &self.link {
            Link::Own { socket, .. } => quiet(socket),
            Link::Crate(con) => con.is_open(),
        }
    }

    /// Writes all of `bytes` by `deadline`.
    pub(crate) fn send(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), RedisError> {
        match &mut self.link {
            Link::Own { socket, .. } => {
                let mut rest = bytes;
                while !rest.is_empty() {
                    bound(&mut self.write_timeout, deadline, |t| {
                        socket.set_write_timeout(Some(t))
                    })?;
                    match (&*socket).write(rest) {
                        Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero).into()),
                        Ok(n) => rest = &rest[n..],
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(())
            }
            Link::Crate(con) => {
                bound(&mut self.write_timeout, deadline, |t| {
                    con.set_write_timeout(Some(t))
                })?;
                con.send_packed_command(bytes)
            }
        }
    }

    /// One reply by `deadline`: the socket's timeout is the time left for the whole call,
    /// never a fixed amount per reply.
    pub(crate) fn recv(&mut self, deadline: Instant) -> Result<Value, RedisError> {
        match &mut self.link {
            Link::Own { socket, parser } => parser.parse_value(Timed {
                socket,
                timeout: &mut self.read_timeout,
                deadline,
            }),
            Link::Crate(con) => {
                bound(&mut self.read_timeout, deadline, |t| {
                    con.set_read_timeout(Some(t))
                })?;
                con.recv_response()
            }
        }
    }
}

/// The socket as the parser reads it: each read bounded by the time left, and made again
/// when a signal cut it short, the parser keeping what came before.
struct Timed<'a> {
    socket: &'a Socket,
    timeout: &'a mut Option<Duration>,
    deadline: Instant,
}

impl Read for Timed<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let socket = self.socket;
            bound(self.timeout, self.deadline, |t| {
                socket.set_read_timeout(Some(t))
            })?;
            match (&*socket).read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                read => return read,
            }
        }
    }
}

/// Sets a socket timeout (`set` is the one last set) to the time left until `deadline`,
/// unless the one set ends no earlier and not much later.
fn bound<E: From<io::Error>>(
    set: &mut Option<Duration>,
    deadline: Instant,
    apply: impl FnOnce(Duration) -> Result<(), E>,
) -> Result<(), E> {
    let left = time_left(deadline)?;
    if !set.is_some_and(|set| set >= left && set <= left + TIMEOUT_SLACK) {
        apply(left)?;
        *set = Some(left);
    }
    Ok(())
}

/// The time left until `deadline`, or a timeout error when there is none: a zero socket
/// timeout would mean "wait forever".
pub(crate) fn time_left(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(passed());
    }
    Ok(left)
}

/// The error of a call whose deadline passed.
pub(crate) fn passed() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "the call's deadline passed")
}

/// A TCP connection to `host:port` by `deadline`, with the client's TCP settings and without
/// Nagle's algorithm: lock traffic is small request/reply pairs.
fn tcp(
    host: &str,
    port: u16,
    settings: &TcpSettings,
    deadline: Instant,
) -> Result<Socket, RedisError> {
    let mut last_error = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, time_left(deadline)?) {
            Ok(stream) => {
                let socket = Socket::from(stream);
                socket.set_tcp_nodelay(true)?;
                if let Some(keepalive) = settings.keepalive() {
                    socket.set_tcp_keepalive(keepalive)?;
                }
                #[cfg(target_os = "linux")]
                socket.set_tcp_user_timeout(settings.user_timeout())?;
                return Ok(socket);
            }
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.map_or_else(
        || {
            (
                ErrorKind::InvalidClientConfig,
                "the host resolved to no address",
            )
                .into()
        },
        RedisError::from,
    ))
}

/// Whether nothing came from the server, not even the end of the stream: a read that does not
/// wait finds nothing. (Whatever it reads would make the connection unusable anyway.)
fn quiet(socket: &Socket) -> bool {
    let read = socket
        .set_nonblocking(true)
        .and_then(|()| (&*socket).read(&mut [0; 1]));
    matches!(read, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
        && socket.set_nonblocking(false).is_ok()
}

/// The time left until `deadline`, or a timeout error when there is none: a zero socket
/// timeout would mean "wait forever".
#[cfg(feature = "tokio")]
pub(crate) fn remaining(deadline: Instant) -> Result<std::time::Duration, RedisError> {
    Ok(time_left(deadline)?)
}

/// The error of a call whose deadline passed.
#[cfg(feature = "tokio")]
pub(crate) fn timed_out() -> RedisError {
    passed().into()
}
