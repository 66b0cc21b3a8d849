//! The outcome rules, pinned against a scripted transport: what is sent again, what is settled
//! by a read, what is reported `OutcomeUnknown`, and what counts as acquired. No server: each
//! test runs in milliseconds.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::protocol::testing::{bulk, server_error};
use crate::transport::scripted::{Answer, Scripted, CONN};
use crate::{Error, Lock, LockBuilder};

const ID: &str = "me";
const TRY: &str = "SET GET PTTL";
const READ: &str = "MULTI GET PTTL EXEC";

/// A lock `l` with owner id [`ID`] on `transport`: a short I/O timeout, so a settle that
/// cannot reach the server gives up quickly, and an expiry that ends the background settle.
fn lock_on(transport: &Arc<Scripted>) -> LockBuilder {
    LockBuilder::on(Arc::clone(transport) as _, "l".into())
        .id(ID)
        .expire(Duration::from_millis(300))
        .io_timeout(Duration::from_millis(100))
}

fn build(transport: &Arc<Scripted>) -> Lock {
    lock_on(transport).build().unwrap()
}

fn reply(values: impl Into<Vec<Value>>) -> Answer {
    Answer::Reply(values.into())
}

/// The replies of a try that took the lock.
fn taken() -> Answer {
    reply([Value::Okay, bulk(ID), Value::Int(300)])
}

/// The replies of a try that found `owner` holding the lock.
fn busy(owner: &str) -> Answer {
    reply([Value::Nil, bulk(owner), Value::Int(200)])
}

/// The replies of a read that found `owner` holding the lock.
fn read(owner: &str) -> Answer {
    let queued = || Value::SimpleString("QUEUED".into());
    reply([
        Value::Okay,
        queued(),
        queued(),
        Value::Array(vec![bulk(owner), Value::Int(250)]),
    ])
}

/// What a script call answers when the server does not have the script yet.
fn noscript() -> Answer {
    reply([server_error(
        "NOSCRIPT No matching script. Please use EVAL.",
    )])
}

#[test]
fn a_script_the_server_lacks_is_sent_again_as_its_text_and_counts_once() {
    let transport = Scripted::new([
        noscript(),
        reply([Value::Array(vec![Value::Int(1), Value::Int(5)])]),
    ]);
    let lock = lock_on(&transport).fencing(true).build().unwrap();
    assert!(lock.try_acquire().unwrap());
    assert_eq!(lock.fencing_token(), Some(5));
    assert_eq!(transport.sent(), ["EVALSHA", "EVAL"]);
}

#[test]
fn a_lost_try_is_not_sent_again_but_settled_by_closing_its_connection_and_reading() {
    let transport = Scripted::new([Answer::Lost, read(ID)]);
    let lock = build(&transport);
    assert!(
        lock.try_acquire().unwrap(),
        "the lost try took it: acquired"
    );
    let kill = format!("CLIENT KILL {}", CONN.id);
    assert_eq!(transport.sent(), [TRY, kill.as_str(), READ]);
}

#[test]
fn a_lost_try_whose_read_finds_another_owner_did_not_acquire() {
    let transport = Scripted::new([Answer::Lost, read("other")]);
    let lock = build(&transport);
    assert!(!lock.try_acquire().unwrap());
    assert!(!lock.lost());
}

#[test]
fn a_lost_try_that_cannot_be_settled_in_time_is_outcome_unknown() {
    let transport = Scripted::new([Answer::Lost]);
    let lock = build(&transport);
    match lock.try_acquire() {
        Err(Error::OutcomeUnknown { operation, .. }) => assert_eq!(operation, "acquire"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_busy_lock_is_not_acquired() {
    let transport = Scripted::new([busy("other")]);
    let lock = build(&transport);
    assert!(!lock.try_acquire().unwrap());
    assert_eq!(transport.sent(), [TRY]);
}

#[test]
fn a_lost_release_is_sent_again_and_a_lock_then_found_gone_counts_as_released() {
    let transport = Scripted::new([taken(), Answer::Lost, reply([Value::Int(1)])]);
    let lock = build(&transport);
    assert!(lock.try_acquire().unwrap());
    lock.release().unwrap();
    assert_eq!(transport.sent(), [TRY, "EVALSHA", "EVALSHA"]);
}

#[test]
fn a_release_that_finds_another_owner_without_a_lost_reply_is_not_acquired() {
    let transport = Scripted::new([taken(), reply([Value::Int(1)])]);
    let lock = build(&transport);
    assert!(lock.try_acquire().unwrap());
    assert!(matches!(lock.release(), Err(Error::NotAcquired { .. })));
}

#[test]
fn a_release_lost_twice_is_outcome_unknown() {
    let transport = Scripted::new([taken(), Answer::Lost, Answer::Lost]);
    let lock = build(&transport);
    assert!(lock.try_acquire().unwrap());
    match lock.release() {
        Err(Error::OutcomeUnknown { operation, .. }) => assert_eq!(operation, "release"),
        other => panic!("{other:?}"),
    }
    // The release sent its unlock twice; the background settle it started may have sent more
    // since.
    assert_eq!(transport.sent()[..3], [TRY, "EVALSHA", "EVALSHA"]);
}

#[test]
fn a_release_refused_before_it_was_sent_is_a_plain_error() {
    let transport = Scripted::new([taken(), Answer::Refused]);
    let lock = build(&transport);
    assert!(lock.try_acquire().unwrap());
    match lock.release() {
        Err(Error::Redis(e)) => assert!(e.is_connection_refusal(), "{e}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fewer_replicas_than_asked_for_is_not_replicated_and_the_lock_is_given_back() {
    let acked_by_one = reply([Value::Okay, bulk(ID), Value::Int(300), Value::Int(1)]);
    let transport = Scripted::new([acked_by_one, reply([Value::Int(0)])]);
    let lock = lock_on(&transport)
        .replicas(2, Duration::from_millis(50))
        .build()
        .unwrap();
    match lock.try_acquire() {
        Err(Error::NotReplicated { acked, wanted, .. }) => assert_eq!((acked, wanted), (1, 2)),
        other => panic!("{other:?}"),
    }
    assert_eq!(transport.sent(), ["SET GET PTTL WAIT", "EVALSHA"]);
    assert_eq!(transport.left(), 0);
}

#[test]
fn as_many_replicas_as_asked_for_is_acquired() {
    let acked_by_two = reply([Value::Okay, bulk(ID), Value::Int(300), Value::Int(2)]);
    let transport = Scripted::new([acked_by_two]);
    let lock = lock_on(&transport)
        .replicas(2, Duration::from_millis(50))
        .build()
        .unwrap();
    assert!(lock.try_acquire().unwrap());
}

#[test]
fn an_extend_that_finds_another_owner_makes_the_lock_lost() {
    let transport = Scripted::new([taken(), reply([Value::Int(1)])]);
    let lock = build(&transport);
    assert!(lock.try_acquire().unwrap());
    assert!(matches!(lock.extend(None), Err(Error::NotAcquired { .. })));
    assert!(lock.lost());
}

#[test]
fn a_lost_extend_is_sent_again() {
    let transport = Scripted::new([taken(), Answer::Lost, reply([Value::Int(0)])]);
    let lock = build(&transport);
    assert!(lock.try_acquire().unwrap());
    lock.extend(None).unwrap();
    assert_eq!(transport.sent(), [TRY, "EVALSHA", "EVALSHA"]);
    assert!(!lock.lost());
}
