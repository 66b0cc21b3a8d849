//! Redlock's arithmetic: what N independent servers' answers to one request add up to. No
//! I/O: each function gets what every server said (`None` for a server whose reply did not
//! come: down, frozen past its timeout, or lost) and returns the one answer the driver reads,
//! in the shape one server would have given.

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::keys::Keys;
use super::lock::{self, Attempt, Pttl};

/// What each server said to a request, by server.
pub(crate) type Said = [Option<Vec<Value>>];

/// How many servers make a majority of `n`.
pub(crate) fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// How much of an expiry the servers' clocks may have drifted apart by its end, which
/// Redlock takes off the validity: 1 % of the expiry, plus 2 ms for the clocks' resolution.
pub(crate) fn drift(expire: Duration) -> Duration {
    expire / 100 + Duration::from_millis(2)
}

/// How a try over all servers came out.
#[derive(Debug, PartialEq)]
pub(crate) enum TryVote {
    /// A majority took it in time: one of their replies.
    Won(Vec<Value>),
    /// No majority (or no time left): the driver reads this busy reply (the owner most
    /// servers named, the shortest TTL seen), and what the try took must be given back,
    /// unless a majority already held the lock under this id (a second handle with the same
    /// id): giving back would then release that holder's lock.
    Lost { reply: Vec<Value>, give_back: bool },
    /// Fewer than a majority answered at all: nothing can be told, and what may have been
    /// taken must be given back.
    Unreached { answered: usize },
}

/// An owner no handle has (ids are never empty), named in a busy reply that only asks the
/// driver to wait a while before the next try.
const NOBODY: &[u8] = b"";

/// The vote on a try (`said` holds each server's replies to the try's commands) that started
/// `elapsed` ago with expiry `expire`. A reply that is not a try's answer (an error, a
/// corrupt key) counts as no answer. A split vote, where no owner has a majority, and a
/// majority won too late to be valid, read as a lock held for `jitter`: the contenders wait a
/// random while, so their next tries do not meet in lock-step, and a try that cannot be
/// valid in time (an expiry too short for the round) does not spin.
pub(crate) fn try_vote(
    keys: &Keys,
    id: &[u8],
    said: &Said,
    elapsed: Duration,
    expire: Option<Duration>,
    jitter: Duration,
) -> TryVote {
    let mut taken = None;
    let mut yes = 0;
    let mut answered = 0;
    let mut owners: HashMap<Vec<u8>, (usize, Option<Duration>)> = HashMap::new();
    for replies in said.iter().flatten() {
        match lock::parse_try(keys, replies) {
            Ok(Attempt::Acquired { .. }) => {
                yes += 1;
                taken.get_or_insert_with(|| replies.clone());
            }
            Ok(Attempt::Busy {
                owner: Some(owner),
                pttl,
            }) => {
                let seen = owners.entry(owner).or_insert((0, None));
                seen.0 += 1;
                if let Pttl::Left(left) = pttl {
                    seen.1 = Some(seen.1.map_or(left, |s: Duration| s.min(left)));
                }
            }
            Ok(Attempt::Busy { owner: None, .. }) => {}
            Err(_) => continue,
        }
        answered += 1;
    }
    let needed = majority(said.len());
    let in_time = expire.is_none_or(|e| elapsed + drift(e) < e);
    if let (true, true, Some(taken)) = (yes >= needed, in_time, taken) {
        return TryVote::Won(taken);
    }
    if answered < needed {
        return TryVote::Unreached { answered };
    }
    // A majority under this id is a second handle with the same id. A minority under it is a
    // leftover of an earlier try of ours (its reply came late): given back with this one, it
    // must not read as the lock's holder.
    let held_by_us = owners.get(id).is_some_and(|(count, _)| *count >= needed);
    let holder = owners
        .into_iter()
        .filter(|(owner, _)| held_by_us || owner.as_slice() != id)
        .max_by_key(|(_, (count, _))| *count);
    let jittered = |owner: Vec<u8>| {
        let ms = i64::try_from(jitter.as_millis().max(1)).unwrap_or(1);
        vec![Value::Nil, Value::BulkString(owner), Value::Int(ms)]
    };
    let busy = match holder {
        Some((owner, (count, ttl))) if count >= needed => {
            let ms = ttl.map_or(-1, |t| i64::try_from(t.as_millis()).unwrap_or(i64::MAX));
            vec![Value::Nil, Value::BulkString(owner), Value::Int(ms)]
        }
        // Won, but too late to be valid.
        _ if yes >= needed => jittered(NOBODY.to_vec()),
        // A split: nobody holds a majority, and every contender gives its keys back.
        Some((owner, _)) if yes > 0 => jittered(owner),
        // Free where it was not taken: try again at once.
        _ => vec![Value::Nil, Value::Nil, Value::Int(-2)],
    };
    TryVote::Lost {
        reply: busy,
        give_back: !held_by_us,
    }
}

/// The vote on a read of owner and TTL: the owner a majority of servers hold, with the
/// shortest TTL among them, in the shape of the `MULTI`/`EXEC` replies; `None` when fewer
/// than a majority answered (a reply that is not a read's answer counts as none), or when an
/// owner without a majority could still have one on the servers that did not answer: a try
/// queued at a frozen server runs when it resumes, and "free" would then be wrong.
pub(crate) fn read_vote(keys: &Keys, said: &Said) -> Option<Vec<Value>> {
    let mut answered = 0;
    let mut owners: HashMap<Vec<u8>, (usize, i64)> = HashMap::new();
    for replies in said.iter().flatten() {
        let Ok(observed) = lock::parse_observe(keys, replies) else {
            continue;
        };
        answered += 1;
        if let Some(owner) = observed.owner {
            let ms = match observed.pttl {
                Pttl::Left(left) => i64::try_from(left.as_millis()).unwrap_or(i64::MAX),
                Pttl::Forever => -1,
                Pttl::Gone => continue,
            };
            let seen = owners.entry(owner).or_insert((0, ms));
            seen.0 += 1;
            if ms >= 0 && (seen.1 < 0 || ms < seen.1) {
                seen.1 = ms;
            }
        }
    }
    let needed = majority(said.len());
    let unanswered = said.len() - answered;
    if answered < needed
        || (owners.values()).any(|(count, _)| *count < needed && count + unanswered >= needed)
    {
        return None;
    }
    let exec = match owners.into_iter().find(|(_, (count, _))| *count >= needed) {
        Some((owner, (_, ms))) => vec![Value::BulkString(owner), Value::Int(ms)],
        None => vec![Value::Nil, Value::Int(-2)],
    };
    Some(vec![
        Value::Okay,
        Value::Okay,
        Value::Okay,
        Value::Array(exec),
    ])
}

/// The vote on an unlock: not ours when a majority said so (the lock was lost; a key it still
/// had on a minority is deleted all the same), else released when any server released it and
/// a majority answered; `None` when that cannot be told. With fewer answers, the servers that
/// did not answer could be a majority still holding the key (or about to: a try of this id
/// queued at a frozen server), so the release is not done.
pub(crate) fn unlock_vote(keys: &Keys, said: &Said) -> Option<Value> {
    let (mut released, mut not_ours) = (0, 0);
    for replies in said.iter().flatten() {
        match lock::parse_unlock(keys, replies.first().unwrap_or(&Value::Nil)) {
            Ok(true) => released += 1,
            Ok(false) => not_ours += 1,
            Err(_) => {}
        }
    }
    let needed = majority(said.len());
    if not_ours >= needed {
        Some(Value::Int(1))
    } else if released > 0 && released + not_ours >= needed {
        Some(Value::Int(0))
    } else {
        None
    }
}

/// How an extend over all servers came out.
#[derive(Debug, PartialEq)]
pub(crate) enum ExtendVote {
    /// Extended on a majority, in time: take the key again where it is missing.
    Yes,
    /// Not ours on a majority (or not in time): the lock is lost; give back the rest.
    NotOurs,
    /// The key has no expiry on a majority.
    NoExpiry,
    /// Fewer than a majority answered: nothing is known, try again.
    Unreached,
}

/// The vote on an extend to `ms` that started `elapsed` ago. Only keys that are still ours
/// count: a key taken again where it went missing does not, or a holder whose lock was
/// reset, or forgotten by a majority of restarted servers, and used by someone else in
/// between, would go on as if it had held it all along.
pub(crate) fn extend_vote(keys: &Keys, said: &Said, elapsed: Duration, ms: u64) -> ExtendVote {
    let (mut yes, mut no_expiry, mut answered) = (0, 0, 0);
    for replies in said.iter().flatten() {
        match lock::parse_extend(keys, replies.first().unwrap_or(&Value::Nil)) {
            Ok(lock::Extended::Yes) => yes += 1,
            Ok(lock::Extended::NoExpiry) => no_expiry += 1,
            Ok(lock::Extended::NotOurs) => {}
            Err(_) => continue,
        }
        answered += 1;
    }
    let needed = majority(said.len());
    let expire = Duration::from_millis(ms);
    if no_expiry >= needed {
        ExtendVote::NoExpiry
    } else if yes >= needed && elapsed + drift(expire) < expire {
        ExtendVote::Yes
    } else if answered < needed {
        ExtendVote::Unreached
    } else {
        ExtendVote::NotOurs
    }
}

/// The vote on anything else: the reply most servers gave, once a majority answered.
pub(crate) fn other_vote(said: &Said) -> Option<Vec<Value>> {
    let answered: Vec<&Vec<Value>> = said.iter().flatten().collect();
    if answered.len() < majority(said.len()) {
        return None;
    }
    answered
        .iter()
        .max_by_key(|r| answered.iter().filter(|o| o == r).count())
        .map(|r| (*r).clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::testing::*;

    fn taken() -> Option<Vec<Value>> {
        Some(vec![Value::Okay, bulk("me"), Value::Int(1000)])
    }

    fn busy(owner: &str, ms: i64) -> Option<Vec<Value>> {
        Some(vec![Value::Nil, bulk(owner), Value::Int(ms)])
    }

    const EXPIRE: Option<Duration> = Some(Duration::from_secs(1));
    const JITTER: Duration = Duration::from_millis(7);

    #[test]
    fn a_majority_is_more_than_half() {
        assert_eq!(majority(3), 2);
        assert_eq!(majority(4), 3);
        assert_eq!(majority(5), 3);
    }

    #[test]
    fn the_drift_is_a_hundredth_of_the_expiry_plus_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
    }

    #[test]
    fn three_of_five_win() {
        let said = [taken(), taken(), None, taken(), busy("other", 500)];
        let vote = try_vote(&keys(), b"me", &said, Duration::ZERO, EXPIRE, JITTER);
        assert_eq!(vote, TryVote::Won(taken().unwrap()));
    }

    #[test]
    fn a_majority_won_too_late_is_lost() {
        let said = [taken(), taken(), taken(), None, None];
        // 1 s expiry, 12 ms drift: 990 ms in, no validity is left.
        let late = Duration::from_millis(990);
        let vote = try_vote(&keys(), b"me", &said, late, EXPIRE, JITTER);
        assert_eq!(
            vote,
            TryVote::Lost {
                reply: vec![Value::Nil, Value::BulkString(Vec::new()), Value::Int(7)],
                give_back: true
            },
            "a wait of a random while, not a spin"
        );
    }

    #[test]
    fn a_holder_with_a_majority_is_named_with_its_shortest_ttl() {
        let said = [
            busy("other", 500),
            busy("other", 300),
            taken(),
            busy("other", 400),
            None,
        ];
        let vote = try_vote(&keys(), b"me", &said, Duration::ZERO, EXPIRE, JITTER);
        assert_eq!(
            vote,
            TryVote::Lost {
                reply: vec![Value::Nil, bulk("other"), Value::Int(300)],
                give_back: true
            }
        );
    }

    #[test]
    fn a_split_vote_waits_a_random_while() {
        let said = [taken(), taken(), busy("b", 900), busy("b", 900), None];
        let vote = try_vote(&keys(), b"me", &said, Duration::ZERO, EXPIRE, JITTER);
        assert_eq!(
            vote,
            TryVote::Lost {
                reply: vec![Value::Nil, bulk("b"), Value::Int(7)],
                give_back: true
            }
        );
    }

    #[test]
    fn a_leftover_of_this_ids_on_a_minority_is_not_the_holder() {
        let said = [
            busy("me", 900),
            None,
            None,
            Some(vec![Value::Nil, Value::Nil, Value::Int(-2)]),
            taken(),
        ];
        let vote = try_vote(&keys(), b"me", &said, Duration::ZERO, EXPIRE, JITTER);
        assert_eq!(
            vote,
            TryVote::Lost {
                reply: vec![Value::Nil, Value::Nil, Value::Int(-2)],
                give_back: true
            }
        );
    }

    #[test]
    fn a_lock_this_id_holds_already_is_not_given_back() {
        let said = [
            busy("me", 900),
            busy("me", 900),
            busy("me", 800),
            None,
            None,
        ];
        let vote = try_vote(&keys(), b"me", &said, Duration::ZERO, EXPIRE, JITTER);
        assert_eq!(
            vote,
            TryVote::Lost {
                reply: vec![Value::Nil, bulk("me"), Value::Int(800)],
                give_back: false
            }
        );
    }

    #[test]
    fn too_few_answers_cannot_be_told() {
        let said = [taken(), taken(), None, None, None];
        let vote = try_vote(&keys(), b"me", &said, Duration::ZERO, EXPIRE, JITTER);
        assert_eq!(vote, TryVote::Unreached { answered: 2 });
    }

    #[test]
    fn a_read_names_the_majoritys_owner() {
        let exec = |owner: &str, ms| {
            Some(vec![
                Value::Okay,
                Value::Okay,
                Value::Okay,
                Value::Array(vec![bulk(owner), Value::Int(ms)]),
            ])
        };
        let said = [exec("a", 900), exec("a", 800), exec("b", 100)];
        let replies = read_vote(&keys(), &said).unwrap();
        let observed = lock::parse_observe(&keys(), &replies).unwrap();
        assert_eq!(observed.owner.as_deref(), Some(&b"a"[..]));
        assert_eq!(observed.pttl, Pttl::Left(Duration::from_millis(800)));
        let minority = [exec("a", 900), None, None];
        assert_eq!(read_vote(&keys(), &minority), None);
    }

    #[test]
    fn a_read_does_not_say_free_while_the_silent_servers_could_make_a_majority() {
        let exec = |owner: Option<&str>| {
            let get = owner.map_or(Value::Nil, bulk);
            let pttl = Value::Int(if owner.is_some() { 900 } else { -2 });
            Some(vec![
                Value::Okay,
                Value::Okay,
                Value::Okay,
                Value::Array(vec![get, pttl]),
            ])
        };
        let said = [exec(Some("a")), exec(None), exec(None), None, None];
        assert_eq!(
            read_vote(&keys(), &said),
            None,
            "1 + 2 silent could be 3 of 5"
        );
        let said = [exec(Some("a")), exec(None), exec(None), exec(None), None];
        let replies = read_vote(&keys(), &said).unwrap();
        let observed = lock::parse_observe(&keys(), &replies).unwrap();
        assert_eq!(observed.owner, None, "1 + 1 silent cannot");
    }

    #[test]
    fn an_unlock_is_not_ours_only_when_a_majority_says_so() {
        let released = Some(vec![Value::Int(0)]);
        let not_ours = Some(vec![Value::Int(1)]);
        let said = [not_ours.clone(), released.clone(), None];
        assert_eq!(unlock_vote(&keys(), &said), Some(Value::Int(0)));
        let said = [not_ours.clone(), not_ours.clone(), released];
        assert_eq!(
            unlock_vote(&keys(), &said),
            Some(Value::Int(1)),
            "lost to a majority: not ours, though a minority key went"
        );
        assert_eq!(unlock_vote(&keys(), &[not_ours, None, None]), None);
    }

    #[test]
    fn an_unlock_answered_by_a_minority_is_not_done() {
        let released = Some(vec![Value::Int(0)]);
        let said = [released, None, None, None, Some(vec![Value::Int(1)])];
        assert_eq!(unlock_vote(&keys(), &said), None);
    }

    #[test]
    fn an_extend_holds_only_where_its_keys_are_still_its_own() {
        let yes = Some(vec![Value::Int(0)]);
        let not_ours = Some(vec![Value::Int(1)]);
        let said = [
            yes.clone(),
            yes.clone(),
            yes.clone(),
            not_ours.clone(),
            None,
        ];
        assert_eq!(
            extend_vote(&keys(), &said, Duration::ZERO, 1000),
            ExtendVote::Yes
        );
        let too_late = Duration::from_millis(995);
        assert_eq!(
            extend_vote(&keys(), &said, too_late, 1000),
            ExtendVote::NotOurs
        );
        // Keys missing on a majority (reset, or forgotten in restarts): lost, not retaken.
        let said = [
            yes.clone(),
            yes,
            not_ours.clone(),
            not_ours.clone(),
            not_ours,
        ];
        assert_eq!(
            extend_vote(&keys(), &said, Duration::ZERO, 1000),
            ExtendVote::NotOurs
        );
    }

    #[test]
    fn an_extend_heard_by_a_minority_is_unknown_not_lost() {
        let yes = Some(vec![Value::Int(0)]);
        let said = [yes, None, None];
        assert_eq!(
            extend_vote(&keys(), &said, Duration::ZERO, 1000),
            ExtendVote::Unreached
        );
    }

    #[test]
    fn a_reply_that_is_no_answer_counts_as_none() {
        let oom = Some(vec![Value::ServerError(
            match redis::parse_redis_value(b"-OOM full\r\n") {
                Ok(Value::ServerError(e)) => e,
                other => panic!("{other:?}"),
            },
        )]);
        let said = [taken(), oom, None];
        assert_eq!(
            try_vote(&keys(), b"me", &said, Duration::ZERO, EXPIRE, JITTER),
            TryVote::Unreached { answered: 1 }
        );
    }

    #[test]
    fn other_requests_take_the_most_common_answer_of_a_majority() {
        let a = Some(vec![bulk("a")]);
        let said = [a.clone(), Some(vec![bulk("b")]), a.clone()];
        assert_eq!(other_vote(&said), a);
        assert_eq!(other_vote(&[a, None, None]), None);
    }
}
