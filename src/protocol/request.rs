//! Requests as commands to send in one round trip, as every primitive's protocol builds them
//! and the transports send, retry and route them: no I/O here.
//!
//! Each builder says whether its request is safe to send twice ([`Request::repeatable`]); the
//! drivers never re-send one that is not, but settle its outcome by reading state.

use redis::{Cmd, Value};

use super::keys::Keys;
use super::scripts::Script;
use crate::Error;

/// What a request does to the lock, which a backend over independent servers (a quorum)
/// needs to tell how to combine their answers.
#[derive(Clone)]
pub(crate) enum Kind {
    /// A try at the lock (after any `BLPOP`) by `id`, taken for `expire_ms`.
    Try {
        keys: Keys,
        id: Vec<u8>,
        expire_ms: Option<u64>,
    },
    /// A read of the owner and its TTL.
    Read { keys: Keys },
    /// An owner-checked unlock.
    Unlock { keys: Keys },
    /// An owner-checked extend by `id` to `ms`.
    Extend { keys: Keys, id: Vec<u8>, ms: u64 },
    /// Anything else: reads and writes of other keys, scans, resets.
    Other,
}

/// Commands sent together in one round trip.
///
/// A request writes with its first command, or runs as one `MULTI` transaction: so when a
/// cluster redirects its first command (or aborts its transaction), nothing in it ran, and
/// it can go to the right node whatever it is
/// ([`redirect::ran_nothing`](super::redirect::ran_nothing)).
#[derive(Clone)]
pub(crate) struct Request {
    pub(crate) cmds: Vec<Cmd>,
    /// The script call among `cmds`, if any, and its script.
    eval: Option<(usize, &'static Script)>,
    /// Whether running it twice does no more than running it once.
    pub(crate) repeatable: bool,
    /// The hash slot of its keys, which a cluster routes by; `None` for any node.
    pub(crate) slot: Option<u16>,
    /// Whether its last command is a `WAIT` for replicas.
    waits: bool,
    pub(crate) kind: Kind,
}

impl Request {
    pub(super) fn new(cmds: Vec<Cmd>, repeatable: bool) -> Self {
        Request {
            cmds,
            eval: None,
            repeatable,
            slot: None,
            waits: false,
            kind: Kind::Other,
        }
    }

    pub(super) fn of_kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    /// The request for the keys of hash slot `slot`.
    pub(crate) fn on_slot(mut self, slot: u16) -> Self {
        self.slot = Some(slot);
        self
    }

    /// The request followed, on the same connection, by `WAIT replicas timeout`: the reply
    /// says how many replicas have what this connection wrote.
    pub(crate) fn replicated(mut self, replicas: Option<(u32, u64)>) -> Self {
        if let Some((replicas, timeout_ms)) = replicas {
            let mut wait = redis::cmd("WAIT");
            wait.arg(replicas).arg(timeout_ms);
            self.cmds.push(wait);
            self.waits = true;
        }
        self
    }

    /// Takes the `WAIT`'s reply off `replies`: how many replicas acknowledged, or `None`
    /// when the request did not wait.
    pub(crate) fn acks(&self, replies: &mut Vec<Value>) -> Result<Option<u64>, Error> {
        if !self.waits {
            return Ok(None);
        }
        match replies.pop() {
            Some(Value::Int(n)) => Ok(Some(u64::try_from(n).unwrap_or(0))),
            Some(other) => Err(reply_error(&other)),
            None => Err(Error::unexpected(&replies)),
        }
    }

    /// `first` (a `BLPOP`), then `behind` in the same pipeline, so that the server runs
    /// `behind` the moment `first` returns. Its replies are `first`'s, then `behind`'s.
    pub(crate) fn behind(first: Cmd, behind: &Request) -> Self {
        let mut cmds = Vec::with_capacity(1 + behind.cmds.len());
        cmds.push(first);
        cmds.extend(behind.cmds.iter().cloned());
        Request {
            cmds,
            eval: behind.eval.map(|(at, script)| (at + 1, script)),
            repeatable: false,
            kind: behind.kind.clone(),
            ..*behind
        }
    }

    /// The request followed, in the same pipeline, by `cmds`, whose replies come last.
    pub(crate) fn then(mut self, cmds: impl IntoIterator<Item = Cmd>) -> Self {
        self.cmds.extend(cmds);
        self
    }

    /// Commands that do no more when run twice (reads, plain overwrites).
    pub(crate) fn repeatable(cmds: Vec<Cmd>) -> Self {
        Request::new(cmds, true)
    }

    /// One command on its own.
    pub(crate) fn single(cmd: Cmd, repeatable: bool) -> Self {
        Request::new(vec![cmd], repeatable)
    }

    pub(crate) fn with_script(
        mut self,
        script: &'static Script,
        keys: &[&[u8]],
        args: &[&[u8]],
    ) -> Self {
        self.eval = Some((self.cmds.len(), script));
        self.cmds.push(script.evalsha(keys, args));
        self
    }

    /// The request's bytes on the wire.
    pub(crate) fn packed(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for cmd in &self.cmds {
            cmd.write_packed_command(&mut out);
        }
        out
    }

    /// When the server answered `NOSCRIPT` to the script call, the request that sends its
    /// text, and where in `replies` its reply goes. The refused call ran nothing, so this is safe whatever the request
    /// is; the other commands ran and are not sent again, except a `WAIT`, which must follow
    /// the script's write to count it. [`patch`](Self::patch) puts the replies in place.
    pub(crate) fn noscript_retry(&self, replies: &[Value]) -> Option<(usize, Request)> {
        let (at, script) = self.eval?;
        let index = at;
        match (replies.get(at), self.cmds.get(index)) {
            (Some(Value::ServerError(e)), Some(evalsha)) if e.code() == "NOSCRIPT" => {
                let mut cmds = vec![script.eval_of(evalsha)];
                if self.waits {
                    cmds.extend(self.cmds.last().cloned());
                }
                let retry = Request {
                    cmds,
                    eval: None,
                    waits: self.waits,
                    kind: self.kind.clone(),
                    ..*self
                };
                Some((at, retry))
            }
            _ => None,
        }
    }

    /// Puts the replies of a [`noscript_retry`](Self::noscript_retry) into `replies`.
    pub(crate) fn patch(&self, replies: &mut [Value], at: usize, mut retried: Vec<Value>) {
        if self.waits
            && let (Some(wait), Some(last)) = (retried.pop(), replies.last_mut())
        {
            *last = wait;
        }
        if let (Some(reply), Some(slot)) = (retried.pop(), replies.get_mut(at)) {
            *slot = reply;
        }
    }
}

/// Sending a request where a cluster's `ASK` says.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
impl Request {
    /// The request for a node that answered `ASK`: each command preceded by `ASKING`, or the
    /// whole transaction by one (the flag lasts through `MULTI`).
    pub(crate) fn asking(&self) -> Request {
        let asking = || redis::cmd("ASKING");
        let cmds = if self.is_transaction() {
            std::iter::once(asking())
                .chain(self.cmds.iter().cloned())
                .collect()
        } else {
            self.cmds
                .iter()
                .flat_map(|c| [asking(), c.clone()])
                .collect()
        };
        Request {
            cmds,
            eval: None,
            kind: self.kind.clone(),
            ..*self
        }
    }

    /// The request with one `ASKING` in front: for a wait's `BLPOP`, whose key alone the
    /// `ASK` was about.
    pub(crate) fn asking_first(&self) -> Request {
        let cmds = std::iter::once(redis::cmd("ASKING"))
            .chain(self.cmds.iter().cloned())
            .collect();
        Request {
            cmds,
            eval: self.eval.map(|(at, script)| (at + 1, script)),
            kind: self.kind.clone(),
            ..*self
        }
    }

    /// The replies of [`asking`](Self::asking)'s request without those of the `ASKING`s.
    pub(crate) fn without_asking(&self, replies: Vec<Value>) -> Vec<Value> {
        if self.is_transaction() {
            replies.into_iter().skip(1).collect()
        } else {
            replies.into_iter().skip(1).step_by(2).collect()
        }
    }

    fn is_transaction(&self) -> bool {
        self.cmds
            .first()
            .and_then(|c| c.args_iter().next())
            .is_some_and(|verb| matches!(verb, redis::Arg::Simple(b"MULTI")))
    }
}

/// `ms` as the decimal text Redis takes.
pub(super) fn num(n: u64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// `verb key`.
pub(super) fn on_key(verb: &str, key: &str) -> Cmd {
    let mut cmd = redis::cmd(verb);
    cmd.arg(key);
    cmd
}

/// An error reply as the server's error; anything else as a reply the lock never expects.
pub(super) fn reply_error(reply: &Value) -> Error {
    match reply {
        Value::ServerError(e) => Error::Redis(e.clone().into()),
        other => Error::unexpected(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::lock::{extend, observe, try_lock, unlock};
    use crate::protocol::testing::*;

    #[test]
    fn noscript_resends_only_the_script_with_its_text() {
        let req = try_lock(&keys(), "me", Some(100), true);
        let replies = [server_error("NOSCRIPT No matching script")];
        let (at, retry) = req.noscript_retry(&replies).unwrap();
        assert_eq!(at, 0);
        assert_eq!(retry.cmds.len(), 1);
        let wire = String::from_utf8(retry.packed()).unwrap();
        assert!(wire.starts_with("*7\r\n$4\r\nEVAL\r\n"), "{wire}");
        let args = "$1\r\n2\r\n$6\r\nlock:l\r\n$12\r\nlock-fence:l\r\n$2\r\nme\r\n$3\r\n100\r\n";
        assert!(
            wire.ends_with(args),
            "the retry keeps the call's keys and arguments: {wire}"
        );
        assert!(req.noscript_retry(&[Value::Int(0)]).is_none());
    }

    #[test]
    fn a_request_for_replicas_ends_in_wait_and_hands_its_reply_back() {
        let req = unlock(&keys(), b"me", 1000).replicated(Some((1, 50)));
        let wire = String::from_utf8(req.packed()).unwrap();
        assert!(
            wire.ends_with("*3\r\n$4\r\nWAIT\r\n$1\r\n1\r\n$2\r\n50\r\n"),
            "{wire}"
        );
        let mut replies = vec![Value::Int(0), Value::Int(1)];
        assert_eq!(req.acks(&mut replies).unwrap(), Some(1));
        assert_eq!(replies, [Value::Int(0)]);
        let plain = unlock(&keys(), b"me", 1000);
        assert_eq!(plain.acks(&mut vec![Value::Int(0)]).unwrap(), None);
    }

    #[test]
    fn a_noscript_retry_waits_for_replicas_after_the_script() {
        let req = extend(&keys(), "me", 100).replicated(Some((1, 50)));
        let mut replies = vec![server_error("NOSCRIPT No matching script"), Value::Int(1)];
        let (at, retry) = req.noscript_retry(&replies).unwrap();
        assert_eq!(
            retry.cmds.len(),
            2,
            "the script's text, then the WAIT again"
        );
        req.patch(&mut replies, at, vec![Value::Int(0), Value::Int(2)]);
        assert_eq!(replies, [Value::Int(0), Value::Int(2)]);
    }

    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    #[test]
    fn asking_goes_before_each_command_or_once_before_a_transaction() {
        let try_req = try_lock(&keys(), "me", None, false);
        let asked = try_req.asking();
        assert_eq!(asked.cmds.len(), 6);
        let replies = (0..6).map(Value::Int).collect();
        assert_eq!(
            try_req.without_asking(replies),
            [Value::Int(1), Value::Int(3), Value::Int(5)]
        );
        let read = observe(&keys(), false);
        assert_eq!(read.asking().cmds.len(), read.cmds.len() + 1);
        let replies = (0..5).map(Value::Int).collect::<Vec<_>>();
        assert_eq!(read.without_asking(replies).len(), 4);
    }
}
