//! Leader election on the queue engine: a campaign is a wait for the one unit of an election
//! (`Primitive::Election`), so candidates lead in the order they campaigned, and the term is
//! the grant's fencing token. What the engine does not know is the leader's record (its info
//! and since when it leads) and who watches: the new leader announces itself
//! (`election_announce.lua`), a resigning one leaves the election empty when nobody was
//! granted in its place (`election_vacate.lua`), and both push a "watch" to the inbox of every
//! process whose heartbeat is live there; a watching process reads the leader
//! (`election_read.lua`), which also keeps its heartbeat. No I/O here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;

use super::keys::QueueKeys;
use super::queue::{array, num, whole_ms, MAX_NUMBER};
use super::request::Request;
use super::scripts::{Script, ELECTION_ANNOUNCE, ELECTION_READ, ELECTION_VACATE};
use crate::Error;

/// The leader of an election, as [`Election::leader`](crate::Election::leader) reads it and
/// a watch reports it.
///
/// ```
/// # fn show(leader: &redis_blpop_lock::Leader) {
/// println!("{} leads (term {}): {}", leader.id, leader.term, leader.info);
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Leader {
    /// Its leadership's id (the campaigning handle's id, a count and its process).
    pub id: String,
    /// What it published when it took office (an address, a host name), maybe empty.
    pub info: String,
    /// Its term: the fencing token of its grant, larger for every new leader.
    pub term: u64,
    /// When it took office, by the server's clock.
    pub since: SystemTime,
}

/// What a watch knows of an election's leader, as it reports it at each change (see
/// [`Watch::changed`](crate::Watch::changed)): who leads, that nobody does, or that it cannot
/// tell, while the server does not answer.
///
/// ```
/// use redis_blpop_lock::Watched;
///
/// fn show(watched: &Watched) -> String {
///     match watched {
///         Watched::Leader(leader) => format!("{} leads (term {})", leader.info, leader.term),
///         Watched::Nobody => "nobody leads".to_owned(),
///         Watched::Unknown { reason } => format!("who leads is unknown: {reason}"),
///         other => format!("{other:?}"),
///     }
/// }
/// assert_eq!(show(&Watched::Nobody), "nobody leads");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Watched {
    /// This leader leads, from its announcement until it resigns or its lease ends.
    Leader(Leader),
    /// Nobody leads.
    Nobody,
    /// The watch cannot tell who leads: a read of the leader failed (the server is away, or
    /// did not answer within the I/O timeout), or nothing was heard from the server since the
    /// last read for longer than that read's lease allowed. It is reported once; the next
    /// change is the leader, or nobody, once a read gets through again. Whoever led may still
    /// lead meanwhile: the leader itself learns that it lost office by its own lease
    /// ([`Leadership::lost`](crate::Leadership::lost)).
    Unknown {
        /// Why, in a few words: the read's error, or how long the server has said nothing.
        reason: String,
    },
}

impl Watched {
    /// The leader, if one is known to lead.
    ///
    /// ```
    /// assert_eq!(redis_blpop_lock::Watched::Nobody.leader(), None);
    /// ```
    pub fn leader(&self) -> Option<&Leader> {
        match self {
            Watched::Leader(leader) => Some(leader),
            _ => None,
        }
    }

    /// The leader, if one is known to lead.
    ///
    /// ```
    /// assert_eq!(redis_blpop_lock::Watched::Nobody.into_leader(), None);
    /// ```
    pub fn into_leader(self) -> Option<Leader> {
        match self {
            Watched::Leader(leader) => Some(leader),
            _ => None,
        }
    }

    /// Whether the watch knows who leads (a leader, or nobody): false only for
    /// [`Unknown`](Self::Unknown).
    ///
    /// ```
    /// use redis_blpop_lock::Watched;
    /// assert!(Watched::Nobody.is_known());
    /// assert!(!Watched::Unknown { reason: "timed out".into() }.is_known());
    /// ```
    pub fn is_known(&self) -> bool {
        !matches!(self, Watched::Unknown { .. })
    }
}

impl From<Option<Leader>> for Watched {
    /// `Some` leader leads; `None`: nobody.
    fn from(leader: Option<Leader>) -> Watched {
        leader.map_or(Watched::Nobody, Watched::Leader)
    }
}

/// What a read of the election found: the leader, and when to look again by itself.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Seen {
    pub(crate) leader: Option<Leader>,
    /// When the lease of whoever holds ends, from the read (`None`: never, or nobody holds):
    /// a leader that crashed with no successor waiting is gone then, and nobody says so.
    pub(crate) look_again: Option<Duration>,
    /// Nobody leads, but someone is about to: a candidate was granted and has not announced
    /// itself yet, or candidates wait in line while a crashed leader's lease just ended.
    pub(crate) handing_over: bool,
    /// Where this stands among the election's states: a leader of term n is `(n, false)`,
    /// nobody leading once every term up to n is over `(n, true)`. A state seen after a later
    /// one (a word in the inbox popped after a read) is stale.
    pub(crate) order: (u64, bool),
}

/// The election's keys, as its scripts take them: the engine's, then the leader's record.
fn key_names(keys: &QueueKeys) -> Vec<Vec<u8>> {
    (keys.all().iter().map(|k| k.as_bytes().to_vec()))
        .chain(std::iter::once(keys.leader().into_bytes()))
        .collect()
}

fn script(keys: &QueueKeys, script: &'static Script, args: &[&[u8]]) -> Request {
    let names = key_names(keys);
    let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    Request::repeatable(Vec::new())
        .with_script(script, &names, args)
        .on_slot(keys.slot)
}

/// Leader `id`'s announcement of term `term`, with `info`:
/// [`parse_held`](super::queue::parse_held) says whether it still held that term.
pub(crate) fn announce(keys: &QueueKeys, id: &str, term: u64, info: &str) -> Request {
    script(
        keys,
        &ELECTION_ANNOUNCE,
        &[id.as_bytes(), &num(term), info.as_bytes()],
    )
}

/// Leaves the election without a leader if term `term` (`None`: whichever) ended with nobody
/// granted in its place: [`parse_held`](super::queue::parse_held) says whether it did.
pub(crate) fn vacate(keys: &QueueKeys, term: Option<u64>) -> Request {
    let term = term.map(num).unwrap_or_default();
    script(keys, &ELECTION_VACATE, &[&term])
}

/// A read of the leader.
pub(crate) fn read(keys: &QueueKeys) -> Request {
    script(keys, &ELECTION_READ, &[b"", b"0"])
}

/// A read of the leader by watching process `process`, with its heartbeat for `lapse` (sent
/// as text: its waiting connection sends it, which answers nothing else, as a heartbeat).
pub(crate) fn watcher_read(keys: &QueueKeys, process: &str, lapse: Duration) -> Request {
    let ms = whole_ms(lapse).unwrap_or(MAX_NUMBER).max(2);
    let names = key_names(keys);
    let names: Vec<&[u8]> = names.iter().map(Vec::as_slice).collect();
    let eval = ELECTION_READ.eval(&names, &[process.as_bytes(), &num(ms)]);
    Request::repeatable(vec![eval]).on_slot(keys.slot)
}

pub(crate) fn parse_read(keys: &QueueKeys, reply: &Value) -> Result<Seen, Error> {
    let unexpected = || Error::unexpected(reply);
    let left = |v: &Value| match v {
        Value::Int(ms) => Ok(u64::try_from(*ms).ok().map(Duration::from_millis)),
        _ => Err(unexpected()),
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        _ => Err(unexpected()),
    };
    let number = |v: &Value| text(v)?.parse::<u64>().map_err(|_| unexpected());
    match array(keys, reply)? {
        [Value::Int(0), ms, Value::Int(waiting), over] => Ok(Seen {
            leader: None,
            look_again: left(ms)?,
            handing_over: *waiting == 1,
            order: (number(over)?, true),
        }),
        [Value::Int(1), id, term, since, info, ms] => {
            let term = number(term)?;
            Ok(Seen {
                leader: Some(Leader {
                    id: text(id)?,
                    info: text(info)?,
                    term,
                    since: UNIX_EPOCH + Duration::from_millis(number(since)?),
                }),
                look_again: left(ms)?,
                handing_over: false,
                order: (term, false),
            })
        }
        _ => Err(unexpected()),
    }
}

/// The news an announcement or a vacating pushed to a watching process's inbox (see
/// `election_watchers.lua`), or `None` when it is not well formed (then the process reads).
pub fn parse_news(element: &[u8]) -> Option<Seen> {
    let rest = element.strip_prefix(b"watch:")?;
    let mut fields = rest.splitn(5, |&b| b == b':');
    let number = |field: Option<&[u8]>| std::str::from_utf8(field?).ok()?.parse::<u64>().ok();
    let first = number(fields.next());
    let Some(since) = fields.next() else {
        return Some(Seen {
            leader: None,
            look_again: None,
            handing_over: false,
            order: (first?, true),
        });
    };
    let term = first?;
    let since = number(Some(since))?;
    let left = std::str::from_utf8(fields.next()?)
        .ok()?
        .parse::<i64>()
        .ok()?;
    let id_len = usize::try_from(number(fields.next())?).ok()?;
    let tail = fields.next()?;
    let (id, info) = (tail.get(..id_len)?, tail.get(id_len..)?);
    Some(Seen {
        leader: Some(Leader {
            id: String::from_utf8_lossy(id).into_owned(),
            info: String::from_utf8_lossy(info).into_owned(),
            term,
            since: UNIX_EPOCH + Duration::from_millis(since),
        }),
        look_again: u64::try_from(left).ok().map(Duration::from_millis),
        handing_over: false,
        order: (term, false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::primitive::Primitive;
    use crate::protocol::testing::bulk;

    fn keys() -> QueueKeys {
        QueueKeys::new(Primitive::Election, "jobs")
    }

    #[test]
    fn a_read_of_an_announced_leader_gives_its_record_and_its_lease() {
        let reply = Value::Array(vec![
            Value::Int(1),
            bulk("w:0@0123456789abcdef"),
            bulk("7"),
            bulk("1700000000123"),
            bulk("10.0.0.5:8080"),
            Value::Int(2500),
        ]);
        let seen = parse_read(&keys(), &reply).unwrap();
        let leader = seen.leader.unwrap();
        assert_eq!(leader.id, "w:0@0123456789abcdef");
        assert_eq!(leader.term, 7);
        assert_eq!(leader.info, "10.0.0.5:8080");
        assert_eq!(
            leader.since,
            UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
        );
        assert_eq!(seen.look_again, Some(Duration::from_millis(2500)));
    }

    #[test]
    fn a_read_without_a_leader_says_when_an_unannounced_holders_lease_ends() {
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(40),
            Value::Int(1),
            bulk("6"),
        ]);
        assert_eq!(
            parse_read(&keys(), &reply).unwrap(),
            Seen {
                leader: None,
                look_again: Some(Duration::from_millis(40)),
                handing_over: true,
                order: (6, true),
            }
        );
        let reply = Value::Array(vec![
            Value::Int(0),
            Value::Int(-1),
            Value::Int(0),
            bulk("0"),
        ]);
        let none = parse_read(&keys(), &reply).unwrap();
        assert_eq!((none.look_again, none.handing_over), (None, false));
    }

    #[test]
    fn a_leader_without_expiry_is_looked_at_again_only_when_told() {
        let reply = Value::Array(vec![
            Value::Int(1),
            bulk("w"),
            bulk("1"),
            bulk("0"),
            bulk(""),
            Value::Int(-1),
        ]);
        assert_eq!(parse_read(&keys(), &reply).unwrap().look_again, None);
    }

    #[test]
    fn news_of_a_leader_carries_its_record_with_an_id_that_holds_colons() {
        let seen =
            parse_news(b"watch:7:1700000000123:2500:20:w:0@0123456789abcdefhost:80").unwrap();
        let leader = seen.leader.unwrap();
        assert_eq!(leader.id, "w:0@0123456789abcdef");
        assert_eq!(leader.info, "host:80");
        assert_eq!(leader.term, 7);
        assert_eq!(seen.look_again, Some(Duration::from_millis(2500)));
        assert_eq!(seen.order, (7, false));
    }

    #[test]
    fn news_that_nobody_leads_ranks_after_the_last_term_and_before_the_next() {
        let seen = parse_news(b"watch:7").unwrap();
        assert_eq!((seen.leader, seen.order), (None, (7, true)));
        assert!((7, false) < seen.order && seen.order < (8, false));
    }

    #[test]
    fn malformed_news_is_none() {
        for element in [&b"watch"[..], b"watch:x", b"watch:1:2:3:99:short", b"hub"] {
            assert_eq!(parse_news(element), None, "{element:?}");
        }
    }

    #[test]
    fn a_malformed_read_is_an_unexpected_reply() {
        let reply = Value::Array(vec![Value::Int(1), bulk("w"), bulk("x")]);
        assert!(matches!(
            parse_read(&keys(), &reply),
            Err(Error::UnexpectedReply(_))
        ));
        let term = Value::Array(vec![
            Value::Int(1),
            bulk("w"),
            bulk("-3"),
            bulk("0"),
            bulk(""),
            Value::Int(1),
        ]);
        assert!(parse_read(&keys(), &term).is_err());
    }

    #[test]
    fn the_scripts_get_the_engines_keys_and_the_leader_record_last() {
        let request = announce(&keys(), "w", 3, "info");
        let packed = String::from_utf8_lossy(&request.packed()).into_owned();
        assert!(packed.contains("election:{jobs}:holders"));
        assert!(packed.contains("election:{jobs}:leader"));
        assert!(request.repeatable);
    }
}
