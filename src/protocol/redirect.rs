//! Replies that say a request went to the wrong node: a cluster's redirections, and the
//! refusals of a primary that is changing (a failover under way, a primary turned replica).
//! Each means the command did not run, so it may be sent again where the key lives now.

use redis::ServerError;

/// Where to send a refused request next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// `MOVED`: the slot lives on `addr` from now on.
    Moved { slot: u16, addr: String },
    /// `ASK`: this once, on `addr`, behind `ASKING` (the slot is being migrated there).
    Ask { addr: String },
    /// The node cannot serve it now (`TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, `MASTERDOWN`,
    /// `LOADING`, `UNBLOCKED`): learn the topology again and retry shortly.
    Again,
}

/// The redirection an error reply means, if it is one.
pub(crate) fn of(error: &ServerError) -> Option<Redirect> {
    let mut words = error.details().unwrap_or("").split_whitespace();
    match error.code() {
        "MOVED" => {
            let slot = words.next()?.parse().ok()?;
            let addr = words.next()?.to_owned();
            Some(Redirect::Moved { slot, addr })
        }
        "ASK" => {
            let addr = words.nth(1)?.to_owned();
            Some(Redirect::Ask { addr })
        }
        "TRYAGAIN" | "CLUSTERDOWN" | "READONLY" | "MASTERDOWN" | "LOADING" | "UNBLOCKED" => {
            Some(Redirect::Again)
        }
        _ => None,
    }
}

#[cfg(any(feature = "cluster", feature = "sentinel"))]
/// The redirection of a request none of whose commands ran: its first command was turned
/// away (requests write first, so what follows only read), or its transaction was aborted
/// over a redirected command.
pub(crate) fn ran_nothing(replies: &[redis::Value]) -> Option<Redirect> {
    use redis::Value;
    let redirect = |v: &Value| match v {
        Value::ServerError(e) => of(e),
        _ => None,
    };
    if let Some(first) = replies.first().and_then(redirect) {
        return Some(first);
    }
    let aborted = matches!(replies.last(), Some(Value::ServerError(e)) if e.code() == "EXECABORT");
    if aborted {
        return replies.iter().find_map(redirect);
    }
    None
}

#[cfg(all(test, any(feature = "cluster", feature = "sentinel")))]
mod tests {
    use super::*;
    use crate::protocol::testing::server_error;
    use redis::Value;

    #[test]
    fn moved_names_the_slot_and_its_new_node() {
        assert_eq!(
            ran_nothing(&[server_error("MOVED 3999 127.0.0.1:6381")]),
            Some(Redirect::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381".into()
            })
        );
    }

    #[test]
    fn ask_names_the_node_to_ask_once() {
        assert_eq!(
            ran_nothing(&[
                server_error("ASK 3999 127.0.0.1:6381"),
                server_error("ASK 3999 127.0.0.1:6381")
            ]),
            Some(Redirect::Ask {
                addr: "127.0.0.1:6381".into()
            })
        );
    }

    #[test]
    fn a_changing_primary_means_try_again() {
        for text in [
            "TRYAGAIN Multiple keys request during rehashing of slot",
            "CLUSTERDOWN The cluster is down",
            "READONLY You can't write against a read only replica.",
            "UNBLOCKED force unblock from blocking operation",
        ] {
            assert_eq!(
                ran_nothing(&[server_error(text)]),
                Some(Redirect::Again),
                "{text}"
            );
        }
    }

    #[test]
    fn an_aborted_transaction_ran_nothing() {
        let replies = [
            Value::Okay,
            server_error("MOVED 12 127.0.0.1:7000"),
            server_error("MOVED 12 127.0.0.1:7000"),
            server_error("EXECABORT Transaction discarded because of previous errors."),
        ];
        assert!(matches!(
            ran_nothing(&replies),
            Some(Redirect::Moved { slot: 12, .. })
        ));
    }

    #[test]
    fn a_request_whose_write_ran_is_not_redirected() {
        // The SET ran; only the reads after it met the migration.
        let replies = [
            Value::Okay,
            server_error("ASK 1 127.0.0.1:7000"),
            Value::Int(5),
        ];
        assert_eq!(ran_nothing(&replies), None);
        assert_eq!(ran_nothing(&[server_error("WRONGTYPE Operation")]), None);
        assert_eq!(ran_nothing(&[]), None);
    }
}
