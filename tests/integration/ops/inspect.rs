//! `inspect`: who holds which lock, with its TTL and fencing token, read from real servers;
//! blocking and async, on one server, a quorum and a cluster.

use std::time::Duration;

use redis::Commands;
use redis_blpop_lock::inspect::{self, Held};
use redis_blpop_lock::Lock;

use crate::support::{secs, RedisServer};

const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// (name, owner, token) of each of `held`.
fn owners_and_tokens(held: &[Held]) -> Vec<(&str, &str, Option<u64>)> {
    held.iter()
        .map(|h| (h.name.as_str(), h.id.as_str(), h.token))
        .collect()
}

#[test]
fn holders_show_the_fencing_token_of_each_fencing_lock_and_none_for_the_others() {
    let server = RedisServer::start();
    let client = server.client();
    let fenced = Lock::builder(&client, "fenced")
        .fencing(true)
        .build()
        .unwrap();
    // A second acquisition, so the token read is the holder's, not the first one handed out.
    fenced.acquire().unwrap();
    let first = fenced.fencing_token();
    fenced.release().unwrap();
    let guard = fenced.lock().unwrap();
    let plain = Lock::new(&client, "plain").unwrap();
    let _plain = plain.lock().unwrap();
    let held = inspect::holders(&client, IO_TIMEOUT).unwrap();
    assert_eq!(
        owners_and_tokens(&held),
        [
            ("fenced", fenced.id(), guard.fencing_token()),
            ("plain", plain.id(), None)
        ]
    );
    assert!(guard.fencing_token() > first && first.is_some());
}

#[test]
fn holder_reads_one_lock_with_its_ttl_and_token_and_none_when_it_is_free() {
    let server = RedisServer::start();
    let client = server.client();
    let lock = Lock::builder(&client, "one")
        .expire(secs(30))
        .fencing(true)
        .build()
        .unwrap();
    let guard = lock.lock().unwrap();
    let held = inspect::holder(&client, "one", IO_TIMEOUT)
        .unwrap()
        .expect("the lock is held");
    assert_eq!((held.name.as_str(), held.id.as_str()), ("one", lock.id()));
    assert_eq!(held.token, guard.fencing_token());
    assert!(held
        .ttl
        .is_some_and(|ttl| ttl > secs(20) && ttl <= secs(30)));
    // Its fencing counter stays after the release; the lock is free all the same.
    guard.unlock().unwrap();
    assert!(server.conn().exists::<_, bool>("lock-fence:one").unwrap());
    assert_eq!(inspect::holder(&client, "one", IO_TIMEOUT).unwrap(), None);
    assert_eq!(inspect::holder(&client, "never", IO_TIMEOUT).unwrap(), None);
}

/// A quorum of `servers` (three) where a majority hold `q` for "holder" and the third for
/// "other", and one server alone holds `minority`.
fn split_quorum(servers: &[RedisServer]) -> redis_blpop_lock::Quorum {
    for server in &servers[..2] {
        let _: () = server.conn().set("lock:q", "holder").unwrap();
    }
    let _: () = servers[2].conn().set("lock:q", "other").unwrap();
    let _: () = servers[0].conn().set("lock:minority", "stray").unwrap();
    crate::topology::quorum::quorum(servers)
}

#[test]
fn holder_on_a_quorum_reads_what_a_majority_holds() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = split_quorum(&servers);
    let held = inspect::holder(&quorum, "q", IO_TIMEOUT).unwrap().unwrap();
    assert_eq!(
        (held.id.as_str(), held.ttl, held.token),
        ("holder", None, None)
    );
    assert_eq!(
        inspect::holder(&quorum, "minority", IO_TIMEOUT).unwrap(),
        None
    );
}

/// The async views and `reset_all` visit each of a quorum's servers over its own async
/// connection: one runtime thread does it all.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "current_thread")]
async fn async_holders_holder_and_reset_all_on_a_quorum_reach_every_server() {
    use redis_blpop_lock::aio;

    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let quorum = split_quorum(&servers);
    let held = aio::inspect::holders(&quorum, IO_TIMEOUT).await.unwrap();
    let named: Vec<_> = held
        .iter()
        .map(|h| (h.name.as_str(), h.id.as_str()))
        .collect();
    assert_eq!(named, [("q", "holder")]);
    let one = aio::inspect::holder(&quorum, "q", IO_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(one.as_ref(), held.first());
    // A lock counts once for each server that held it.
    assert_eq!(aio::reset_all(&quorum).await.unwrap(), 4);
    assert_eq!(
        aio::inspect::holders(&quorum, IO_TIMEOUT).await.unwrap(),
        []
    );
    for server in &servers {
        assert!(!server.conn().exists::<_, bool>("lock:minority").unwrap());
    }
}

#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_holders_and_holder_on_one_server() {
    use redis_blpop_lock::aio;

    let server = RedisServer::start();
    let client = server.client();
    let lock = aio::Lock::builder(&client, "a")
        .fencing(true)
        .build()
        .unwrap();
    let guard = lock.lock().await.unwrap();
    let held = aio::inspect::holders(&client, IO_TIMEOUT).await.unwrap();
    assert_eq!(
        owners_and_tokens(&held),
        [("a", lock.id(), guard.fencing_token())]
    );
    let one = aio::inspect::holder(&client, "a", IO_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(one.as_ref(), held.first());
    assert_eq!(
        aio::inspect::holder(&client, "b", IO_TIMEOUT)
            .await
            .unwrap(),
        None
    );
}

#[cfg(all(feature = "tokio", feature = "cluster"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_holders_on_a_cluster_find_the_locks_of_every_primary_with_their_tokens() {
    use redis_blpop_lock::aio;

    let cluster = crate::support::RedisCluster::shared();
    let client = redis::cluster::ClusterClient::new(vec![cluster.seed_url()]).unwrap();
    // Enough names that they land on more than one primary; the shared cluster has other
    // tests' locks too, so only these are looked at.
    let names: Vec<String> = (0..12).map(|i| format!("inspect-aio-{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        let lock = aio::Lock::builder(&client, name)
            .fencing(true)
            .build()
            .unwrap();
        let guard = lock.lock().await.unwrap();
        guards.push((lock, guard));
    }
    let primaries: std::collections::BTreeSet<u16> = names
        .iter()
        .map(|n| cluster.primary_for(&format!("lock:{{{n}}}")).port)
        .collect();
    assert!(primaries.len() > 1, "every name on one primary");
    let held = aio::inspect::holders(&client, IO_TIMEOUT).await.unwrap();
    let mine: Vec<_> = owners_and_tokens(&held)
        .into_iter()
        .filter(|(name, _, _)| name.starts_with("inspect-aio-"))
        .collect();
    let mut expected: Vec<_> = guards
        .iter()
        .map(|(lock, guard)| (lock.name(), lock.id(), guard.fencing_token()))
        .collect();
    expected.sort_unstable();
    assert_eq!(mine, expected);
    assert!(mine.iter().all(|(_, _, token)| token.is_some()));
    let one = aio::inspect::holder(&client, &names[0], IO_TIMEOUT)
        .await
        .unwrap()
        .expect("held");
    assert_eq!(one.token, guards[0].1.fencing_token());
    for (_, guard) in guards {
        guard.unlock().await.unwrap();
    }
}
