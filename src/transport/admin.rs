//! The `CLIENT` commands about one connection (`ID`, `KILL`) and how they came out, for the
//! blocking and the async connections alike.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::{RedisError, ServerError, Value};

use super::send::Answered;
use super::{Admin, ConnId, Fault};
use crate::protocol::request::Request;

/// The connection id in a reply to `CLIENT ID`: none when the server will not tell it, for
/// want of the right (an ACL) or because it does not know the command (`rename-command`, a
/// proxy). The connection works, but cannot be killed by id: the documented
/// degraded mode, said once in the log.
pub(crate) fn client_id(reply: Value) -> Result<Option<u64>, RedisError> {
    match reply {
        Value::Int(id) => Ok(u64::try_from(id).ok()),
        Value::ServerError(e) if e.code() == "NOPERM" || unknown_command(&e) => {
            if !NO_ID.swap(true, Ordering::Relaxed) {
                log::warn!(
                    "the server will not tell a connection's id ({e}): lost replies are \
                     settled by reading state only; see the ACL rule in the crate docs"
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

/// `CLIENT KILL`: closes connection `conn`.
pub(crate) fn kill_cmd(conn: ConnId) -> redis::Cmd {
    let mut cmd = redis::cmd("CLIENT");
    cmd.arg("KILL").arg("ID").arg(conn.id);
    cmd
}

/// How an administrative `request` (`CLIENT KILL`) came out.
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
}
