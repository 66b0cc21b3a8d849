//! `replicas(n, timeout)`: a change counts only once `n` replicas have it (`WAIT`), and an
//! acquisition that could not be confirmed leaves no lock behind.

use redis::Commands;
use redis_blpop_lock::{Error, Lock};

use crate::support::{eventually, ms, secs, strip_process, RedisServer};

/// A primary and a replica whose link is up.
fn primary_with_replica() -> (RedisServer, RedisServer) {
    // A full sync through a file: a diskless one would first wait 5 s for other replicas.
    let primary = RedisServer::start_with(&["--repl-diskless-sync", "no"]);
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &primary.port.to_string()]);
    eventually(secs(20), "the replica's link to come up", || {
        let info: redis::InfoDict = redis::cmd("INFO")
            .arg("replication")
            .query(&mut replica.conn())
            .unwrap();
        info.get::<String>("master_link_status").as_deref() == Some("up")
    });
    (primary, replica)
}

#[test]
fn an_acknowledged_lock_is_on_the_replica_when_acquire_returns() {
    let (primary, replica) = primary_with_replica();
    let lock = Lock::builder(&primary.client(), "acked")
        .expire(secs(30))
        .replicas(1, secs(2))
        .build()
        .unwrap();
    let guard = lock.lock().unwrap();
    let owner: Option<String> = replica.conn().get("lock:acked").unwrap();
    assert_eq!(owner.as_deref(), Some(lock.id()));
    guard.unlock().unwrap();
    let owner: Option<String> = replica.conn().get("lock:acked").unwrap();
    assert_eq!(owner, None, "the release is on the replica too");
}

#[test]
fn a_frozen_replica_fails_the_acquire_and_leaves_no_lock() {
    let (primary, replica) = primary_with_replica();
    replica.pause();
    let lock = Lock::builder(&primary.client(), "unacked")
        .expire(secs(30))
        .replicas(1, ms(100))
        .build()
        .unwrap();
    let result = lock.try_acquire();
    replica.resume();
    match result {
        Err(Error::NotReplicated {
            operation: "acquire",
            acked: 0,
            wanted: 1,
            ..
        }) => {}
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    let owner: Option<String> = primary.conn().get("lock:unacked").unwrap();
    assert_eq!(owner, None, "the unconfirmed lock was released");
    assert!(!lock.lost());
}

#[test]
fn a_frozen_replica_fails_an_extend_and_says_how_many_acknowledged() {
    let (primary, replica) = primary_with_replica();
    let lock = Lock::builder(&primary.client(), "extending")
        .expire(secs(30))
        .replicas(1, ms(100))
        .build()
        .unwrap();
    lock.acquire().unwrap();
    replica.pause();
    let result = lock.extend(None);
    replica.resume();
    assert!(
        matches!(
            result,
            Err(Error::NotReplicated {
                operation: "extend",
                acked: 0,
                ..
            })
        ),
        "{result:?}"
    );
    lock.release().unwrap();
}

#[test]
fn zero_replicas_is_an_invalid_argument() {
    let server = RedisServer::start();
    let built = Lock::builder(&server.client(), "l")
        .replicas(0, secs(1))
        .build();
    assert!(matches!(built, Err(Error::InvalidArgument(_))), "{built:?}");
}

#[test]
fn a_refused_wait_gives_the_lock_back_and_says_why() {
    let (primary, _replica) = primary_with_replica();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "nowait", "on", ">pw", "~*", "+@all", "-wait"])
        .query(&mut primary.conn())
        .unwrap();
    let url = format!("redis://nowait:pw@127.0.0.1:{}/", primary.port);
    let lock = Lock::builder(&redis::Client::open(url).unwrap(), "no-wait")
        .replicas(1, ms(100))
        .build()
        .unwrap();
    match lock.try_acquire() {
        Err(Error::Redis(e)) => assert_eq!(e.code(), Some("NOPERM"), "{e}"),
        other => panic!("expected NOPERM, got {other:?}"),
    }
    let owner: Option<String> = primary.conn().get("lock:no-wait").unwrap();
    assert_eq!(
        owner, None,
        "the lock taken before the refused WAIT was given back"
    );
}

#[test]
fn an_acknowledged_permit_is_on_the_replica_when_acquire_returns() {
    let (primary, replica) = primary_with_replica();
    let semaphore = redis_blpop_lock::Semaphore::builder(&primary.client(), "acked", 2)
        .id("me")
        .replicas(1, secs(2))
        .build()
        .unwrap();
    let permit = semaphore.try_acquire().unwrap().expect("a free permit");
    let holders: Vec<String> = replica
        .conn()
        .zrange("semaphore:{acked}:holders", 0, -1)
        .unwrap();
    let holders: Vec<&str> = holders.iter().map(|id| strip_process(id)).collect();
    assert_eq!(holders, ["me:0"]);
    permit.release().unwrap();
}

#[test]
fn a_frozen_replica_fails_a_permits_acquire_and_leaves_no_permit() {
    let (primary, replica) = primary_with_replica();
    replica.pause();
    let semaphore = redis_blpop_lock::Semaphore::builder(&primary.client(), "unacked", 2)
        .replicas(1, ms(100))
        .build()
        .unwrap();
    let result = semaphore.try_acquire().map(|permit| permit.is_some());
    replica.resume();
    assert!(
        matches!(
            result,
            Err(Error::NotReplicated {
                operation: "acquire",
                wanted: 1,
                ..
            })
        ),
        "{result:?}"
    );
    let holders: Vec<String> = primary
        .conn()
        .zrange("semaphore:{unacked}:holders", 0, -1)
        .unwrap();
    assert!(
        holders.is_empty(),
        "the unconfirmed permit was given back: {holders:?}"
    );
}
