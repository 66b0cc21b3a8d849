//! The `CLIENT` commands about one connection (`ID`, `UNBLOCK`, `KILL`) and how they came
//! out, for the blocking and the async connections alike.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, ServerError, Value};

use super::send::Answered;
use super::{Admin, ConnId, Fault, Transport};
use crate::cancel::Interrupt;
use crate::protocol::request::Request;

/// The connection id in a reply to `CLIENT ID`: none when the server will not tell it, for
/// want of the right (an ACL) or because it does not know the command (`rename-command`, a
/// proxy). The connection works, but cannot be unblocked or killed by id: the documented
/// degraded mode, said once in the log.
pub(crate) fn client_id(reply: Value) -> Result<Option<u64>, RedisError> {
    match reply {
        Value::Int(id) => Ok(u64::try_from(id).ok()),
        Value::ServerError(e) if e.code() == "NOPERM" || unknown_command(&e) => {
            if !NO_ID.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "the server will not tell a connection's id ({e}): waits end at its own \
                     timer, up to 1/hz late, and lost replies are settled by reading state \
                     only; see the ACL rule in the crate docs"
                );
            }
            Ok(None)
        }
        // The server's first words on a connection it will not serve (`maxclients`).
        Value::ServerError(e) => Err(e.into()),
        _ => Ok(None),
    }
}

/// Logs a server's refusal to tell a connection's id once per process.
static NO_ID: AtomicBool = AtomicBool::new(false);

/// Whether `e` says the server does not know the command, rather than refusing to run it:
/// the server's own words, and those of proxies that pass on only some commands.
pub(crate) fn unknown_command(e: &ServerError) -> bool {
    let said = e.details().unwrap_or_default().to_ascii_lowercase();
    [
        "unknown command",
        "unknown subcommand",
        "unsupported command",
    ]
    .iter()
    .any(|words| said.starts_with(words))
}

/// The command that ends connection `conn`'s `BLPOP` now: `CLIENT UNBLOCK`, as if it had
/// timed out, where its server takes that safely ([`hello`](crate::protocol::hello));
/// elsewhere `CLIENT KILL`, and the wait ends with its connection, settling what the request
/// behind the `BLPOP` did by reading state.
pub(crate) fn end_wait_cmd(conn: ConnId) -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    if conn.unblockable {
        cmd.arg("UNBLOCK").arg(conn.id).arg("TIMEOUT");
        cmd
    } else {
        kill_cmd(conn)
    }
}

/// Whether a wait's `error` on connection `conn`, after the wait was ended, is that ending:
/// where `CLIENT UNBLOCK` is not safe the wait's connection is closed instead, and the wait
/// meets the server closing it. Nothing more runs on a connection the server closed, so the
/// wait settles what the request behind its `BLPOP` did by reading state alone.
pub(crate) fn closed_by_end(conn: Option<ConnId>, error: &RedisError) -> bool {
    conn.is_some_and(|conn| !conn.unblockable) && !error.is_timeout()
}

/// `CLIENT KILL`: closes connection `conn`.
pub(crate) fn kill_cmd(conn: ConnId) -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("KILL").arg("ID").arg(conn.id);
    cmd
}

/// How an administrative `request` (`CLIENT UNBLOCK` or `CLIENT KILL`) came out.
pub(crate) fn admin_outcome(
    request: &Request,
    answered: Result<Answered, RedisError>,
) -> Result<Admin, Fault> {
    let answered = match answered {
        Ok(answered) => answered,
        // A server that is not there has no connection left to act on.
        Err(e) if e.is_connection_refusal() => return Ok(Admin::Nothing),
        Err(e) => return Err(Fault::NotSent(e)),
    };
    Ok(match answered.replies.first() {
        Some(Value::Int(0)) => Admin::Nothing,
        Some(Value::Int(_) | Value::Okay) => Admin::Done,
        // `CLIENT KILL` of a connection that is gone.
        Some(Value::ServerError(e))
            if e.details().is_some_and(|d| d.contains("No such client")) =>
        {
            Admin::Nothing
        }
        // NOPERM from an ACL, or a server too old for the command.
        Some(Value::ServerError(_)) => Admin::Refused,
        other => {
            log::warn!(
                "unexpected reply to {:?}: {other:?}",
                request.cmds.first().and_then(|cmd| cmd.args_iter().next())
            );
            Admin::Nothing
        }
    })
}

/// How long a cancel's unblock or kill may take.
const INTERRUPT_DEADLINE: Duration = Duration::from_secs(2);

/// A wait blocked on connection `conn`, as a cancel ends it.
pub(crate) struct Blocked {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) conn: ConnId,
}

impl Interrupt for Blocked {
    /// Ends the `BLPOP`. When there is none to end, the `BLPOP` has either returned (and the
    /// try behind it run) or not reached the server yet: closing the connection covers both,
    /// since what it has not run never runs, and the wait settles what it did by reading the
    /// lock.
    fn interrupt(&self, still_waiting: &dyn Fn() -> bool) {
        let deadline = Instant::now() + INTERRUPT_DEADLINE;
        if !matches!(
            self.transport.unblock(self.conn, deadline),
            Ok(Admin::Nothing)
        ) {
            return;
        }
        // A wait already over may have handed its connection to another one.
        if still_waiting() {
            let _ = self.transport.kill(self.conn, deadline);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::testing::server_error;

    #[test]
    fn a_server_that_refuses_a_new_connection_for_maxclients_is_an_error() {
        let refused = server_error("ERR max number of clients reached");
        assert!(client_id(refused).is_err());
    }

    #[test]
    fn an_acl_that_refuses_client_id_leaves_a_working_connection_without_an_id() {
        let refused =
            server_error("NOPERM this user has no permissions to run the 'client|id' command");
        assert_eq!(client_id(refused).unwrap(), None);
    }

    #[test]
    fn a_server_that_does_not_know_client_leaves_a_working_connection_without_an_id() {
        let unknown = server_error("ERR unknown command 'CLIENT', with args beginning with: 'ID' ");
        assert_eq!(client_id(unknown).unwrap(), None);
    }

    #[test]
    fn a_wait_is_unblocked_only_where_the_server_takes_it_safely() {
        let conn = |unblockable| ConnId {
            node: 0,
            id: 9,
            unblockable,
        };
        let packed = |args: &[&str]| redis::cmd(args[0]).arg(&args[1..]).get_packed_command();
        assert_eq!(
            end_wait_cmd(conn(true)).get_packed_command(),
            packed(&["CLIENT", "UNBLOCK", "9", "TIMEOUT"])
        );
        assert_eq!(
            end_wait_cmd(conn(false)).get_packed_command(),
            packed(&["CLIENT", "KILL", "ID", "9"])
        );
    }
}
