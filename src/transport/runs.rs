//! Which run of a server this process talks to: its `run_id`, read on each new connection. A
//! run id that changed means the server restarted: empty without persistence, or reloaded
//! from a snapshot older than its last writes, so what it granted before may be gone, and a
//! holder of the old run may still believe it holds (see
//! [`Transport::switched_at`](super::Transport::switched_at)).

use std::time::Instant;

use parking_lot::Mutex;
use redis::Value;

/// One server's run, as last seen.
#[derive(Default)]
pub(crate) struct Runs {
    /// The run id last seen, and when one that replaced another was first seen.
    seen: Mutex<(Option<String>, Option<Instant>)>,
}

impl Runs {
    /// A new connection to server `addr` found it in run `run_id`.
    pub(crate) fn saw(&self, addr: &str, run_id: String) {
        let mut seen = self.seen.lock();
        match &seen.0 {
            Some(known) if *known == run_id => return,
            Some(known) => {
                log::warn!("the server at {addr} restarted (run id {known}, now {run_id})");
                seen.1 = Some(Instant::now());
                super::switch::switched();
            }
            None => {}
        }
        seen.0 = Some(run_id);
    }

    /// When this process first saw the server in a new run, if it ever did.
    pub(crate) fn restarted_at(&self) -> Option<Instant> {
        self.seen.lock().1
    }
}

/// The run id in a reply to `INFO server`; `None` when the server will not say (an ACL
/// without `INFO`, a proxy).
pub(crate) fn run_id(reply: &Value) -> Option<String> {
    let text = match reply {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::VerbatimString { text, .. } => text.clone(),
        _ => return None,
    };
    let id = text.lines().find_map(|line| line.strip_prefix("run_id:"))?;
    Some(id.trim().to_owned()).filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_run_id_is_a_restart_and_the_first_one_is_not() {
        let runs = Runs::default();
        runs.saw("h:1", "a".into());
        runs.saw("h:1", "a".into());
        assert_eq!(runs.restarted_at(), None);
        runs.saw("h:1", "b".into());
        let restarted = runs.restarted_at().expect("restarted");
        runs.saw("h:1", "b".into());
        assert_eq!(runs.restarted_at(), Some(restarted));
    }

    #[test]
    fn the_run_id_is_read_from_info_server_and_a_reply_without_one_is_none() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:0a1b2c\r\ntcp_port:6379\r\n";
        assert_eq!(
            run_id(&Value::BulkString(info.as_bytes().to_vec())),
            Some("0a1b2c".to_owned())
        );
        assert_eq!(run_id(&Value::Nil), None);
        assert_eq!(run_id(&Value::BulkString(b"# Server\r\n".to_vec())), None);
    }
}
