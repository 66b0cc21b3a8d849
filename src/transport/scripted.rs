//! A transport that replays a script of replies and faults, for unit tests of the outcome
//! rules without a server: each request takes the next step, and what was sent is recorded.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use redis::{RedisError, Value};

use super::{Admin, ConnId, Fault, Primaries, Primary, Transport, Waiter};
use crate::protocol::request::Request;

/// What the server does with one request.
pub(crate) enum Answer {
    /// It answers with these replies.
    Reply(Vec<Value>),
    /// It ran the request (perhaps), and the replies were lost on connection [`CONN`].
    Lost,
    /// Nothing reached it: the connection was refused.
    Refused,
}

/// The connection a [`Answer::Lost`] request went out on.
pub(crate) const CONN: ConnId = ConnId { node: 0, id: 7 };

#[derive(Default)]
pub(crate) struct Scripted {
    steps: Mutex<VecDeque<Answer>>,
    sent: Mutex<Vec<String>>,
}

impl Scripted {
    /// A transport that answers with `steps`, in order; past them, every request is refused.
    pub(crate) fn new(steps: impl IntoIterator<Item = Answer>) -> Arc<Scripted> {
        Arc::new(Scripted {
            steps: Mutex::new(steps.into_iter().collect()),
            sent: Mutex::default(),
        })
    }

    /// What was sent, one entry per request: its commands' names (`CLIENT` with its verb).
    pub(crate) fn sent(&self) -> Vec<String> {
        self.sent.lock().clone()
    }

    /// Answers not given yet.
    pub(crate) fn left(&self) -> usize {
        self.steps.lock().len()
    }

    fn record(&self, request: &Request) {
        let names: Vec<String> = request
            .cmds
            .iter()
            .map(|cmd| {
                let mut args = cmd.args_iter().filter_map(|arg| match arg {
                    redis::Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                    _ => None,
                });
                match args.next() {
                    Some(client) if client == "CLIENT" => {
                        format!("CLIENT {}", args.next().unwrap_or_default())
                    }
                    name => name.unwrap_or_default(),
                }
            })
            .collect();
        self.sent.lock().push(names.join(" "));
    }
}

/// A wait's connection: a request sent on it takes the next step, and its replies are read
/// one by one.
struct ScriptedWaiter<'a> {
    transport: &'a Scripted,
    replies: Result<VecDeque<Value>, ()>,
}

impl Waiter for ScriptedWaiter<'_> {
    fn id(&self) -> Option<ConnId> {
        None
    }

    fn send(&mut self, request: &Request, deadline: Instant) -> Result<(), Fault> {
        self.replies = match self.transport.call(request, deadline) {
            Ok(replies) => Ok(replies.into()),
            Err(Fault::Lost { .. }) => Err(()),
            Err(fault) => return Err(fault),
        };
        Ok(())
    }

    fn recv(&mut self, _deadline: Instant) -> Result<Value, Fault> {
        match self.replies.as_mut().map(VecDeque::pop_front) {
            Ok(Some(reply)) => Ok(reply),
            _ => Err(Fault::Lost {
                conn: None,
                error: io_error(std::io::ErrorKind::ConnectionReset, "reply lost"),
            }),
        }
    }
}

fn io_error(kind: std::io::ErrorKind, what: &'static str) -> RedisError {
    std::io::Error::new(kind, what).into()
}

impl Transport for Scripted {
    fn call(&self, request: &Request, _deadline: Instant) -> Result<Vec<Value>, Fault> {
        self.record(request);
        match self.steps.lock().pop_front() {
            Some(Answer::Reply(replies)) => Ok(replies),
            Some(Answer::Lost) => Err(Fault::Lost {
                conn: Some(CONN),
                error: io_error(std::io::ErrorKind::ConnectionReset, "reply lost"),
            }),
            Some(Answer::Refused) | None => Err(Fault::NotSent(io_error(
                std::io::ErrorKind::ConnectionRefused,
                "refused",
            ))),
        }
    }

    fn waiter(&self, _slot: u16, _deadline: Instant) -> Result<Box<dyn Waiter + '_>, Fault> {
        Ok(Box::new(ScriptedWaiter {
            transport: self,
            replies: Ok(VecDeque::new()),
        }))
    }

    fn kill(&self, conn: ConnId, _deadline: Instant) -> Result<Admin, Fault> {
        self.sent.lock().push(format!("CLIENT KILL {}", conn.id));
        Ok(Admin::Done)
    }

    fn primaries(&self, _deadline: Instant) -> Result<Primaries, crate::Error> {
        Ok(vec![Primary::Itself])
    }

    #[cfg(feature = "tokio")]
    fn to_async(self: Arc<Self>) -> Arc<dyn super::aio::AsyncTransport> {
        super::aio::pooled::Pooled::shared(self)
    }
}
