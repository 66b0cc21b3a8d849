//! The `CLIENT` commands about one connection (`ID`, `UNBLOCK`, `KILL`) and how they came
//! out, for the blocking and the async connections alike.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};

use super::send::Answered;
use super::{Admin, ConnId, Fault, Transport};
use crate::cancel::Interrupt;
use crate::protocol::requests::Request;

/// The connection id in a reply to `CLIENT ID`: none when an ACL refuses the command (the
/// connection works, but cannot be unblocked or killed by id).
pub(crate) fn client_id(reply: Value) -> Result<Option<ConnId>, RedisError> {
    match reply {
        Value::Int(id) => Ok(u64::try_from(id).ok().map(|id| ConnId { node: 0, id })),
        Value::ServerError(e) if e.code() == "NOPERM" => Ok(None),
        // The server's first words on a connection it will not serve (`maxclients`).
        Value::ServerError(e) => Err(e.into()),
        _ => Ok(None),
    }
}

/// `CLIENT UNBLOCK`: ends connection `conn`'s `BLPOP` as if it had timed out.
pub(crate) fn unblock_cmd(conn: ConnId) -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("UNBLOCK").arg(conn.id).arg("TIMEOUT");
    cmd
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
}
