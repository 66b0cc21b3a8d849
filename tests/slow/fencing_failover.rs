//! Fencing tokens across a failover (Sentinel's, and a Cluster's) to a replica that missed the
//! last grants, for real: the replica is stopped (SIGSTOP) and its link cut while they are
//! made, the primary is killed before it can catch up, and its replication offset shows what
//! it missed. A token is the server's clock or the counter + 1, so every primitive's next
//! token is still above every earlier one, and a holder whose grant the new primary never saw
//! never shares a token with the one who takes the lock there.

use redis::Commands;

#[cfg(feature = "sentinel")]
use crate::support::SentinelSet;
use crate::support::{eventually, every_primitive, secs, Fenced, RedisServer};

/// What `field` of `INFO replication` says, as a number.
fn replication(server: &RedisServer, field: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut server.conn())
        .unwrap();
    (info.lines())
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

/// Stops `replica` once it has caught up and cuts its link, so that what `grant` writes on
/// `primary` never reaches it (stopped alone, it would still find in its socket's buffer what
/// the primary sent before it died): the offset `primary` reached.
fn cut_off(primary: &RedisServer, replica: &RedisServer, grant: impl FnOnce()) -> u64 {
    // A test's own check, bounded: the replica has applied all the primary wrote so far.
    let seen = replication(primary, "master_repl_offset");
    eventually(secs(20), "the replica to catch up", || {
        replication(replica, "master_repl_offset") >= seen
    });
    replica.pause();
    let cut: u64 = (redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("replica"))
        .query(&mut primary.conn())
        .unwrap();
    assert_eq!(cut, 1, "the replica's link");
    grant();
    let reached = replication(primary, "master_repl_offset");
    assert!(reached > seen, "the grants wrote nothing to replicate");
    reached
}

/// Lets `replica` go on, its primary killed, and checks that it missed what the primary wrote
/// up to offset `reached`.
fn resumed_behind(replica: &RedisServer, reached: u64) {
    replica.resume();
    let kept = replication(replica, "master_repl_offset");
    assert!(
        kept < reached,
        "the replica has offset {kept}, the primary reached {reached}"
    );
}

/// Takes one token of each primitive.
fn take_each(primitives: &[Fenced]) -> Vec<u64> {
    primitives.iter().map(|p| (p.take)().unwrap()).collect()
}

/// Every primitive's counter on `new_primary` stopped before the tokens it `missed` (read
/// before any take: the read-write lock's guards share one); then each one's next token is
/// above the one `taken` before and the one missed.
fn assert_tokens_grew(
    primitives: &[Fenced],
    new_primary: &RedisServer,
    taken: Vec<u64>,
    missed: Vec<u64>,
) {
    let mut conn = new_primary.conn();
    for (p, second) in primitives.iter().zip(&missed) {
        let counter: u64 = conn.get(&p.counter).unwrap();
        assert!(
            counter < *second,
            "{}: the counter {counter} saw {second}",
            p.what
        );
    }
    for ((p, first), second) in primitives.iter().zip(taken).zip(missed) {
        let after = (p.take)().unwrap_or_else(|e| panic!("{}: {e}", p.what));
        assert!(
            first < second && second < after,
            "{}: {first}, {second} (missed), then {after}",
            p.what
        );
    }
}

/// Makes the replica miss what `grant` writes ([`cut_off`]), kills the primary, and waits
/// until the sentinels promote the replica.
#[cfg(feature = "sentinel")]
fn fail_over_to_a_replica_that_missed(set: &mut SentinelSet, grant: impl FnOnce()) {
    let reached = cut_off(set.primary(), set.replica(), grant);
    let replica = set.kill_primary();
    resumed_behind(set.server(replica), reached);
    set.until_promoted(replica);
}

#[cfg(feature = "sentinel")]
#[test]
fn every_primitives_tokens_grow_across_a_failover_to_a_replica_that_missed_the_last_grants() {
    let mut set = SentinelSet::start();
    let backend = set.backend();
    let primitives = every_primitive(&backend, "fencing-failover", "");
    let taken = take_each(&primitives);
    let mut missed = Vec::new();
    fail_over_to_a_replica_that_missed(&mut set, || missed = take_each(&primitives));
    assert_tokens_grew(&primitives, set.primary(), taken, missed);
}

/// A holder takes lock `name` on `backend` (in the grant that `fail_over` makes the replica
/// miss before it promotes it), and a waiter takes it after the promotion: they never share
/// a token, and the holder has lost it before the waiter holds.
fn a_holder_that_the_promoted_replica_never_saw<B: redis_blpop_lock::Backend + ?Sized>(
    backend: &B,
    name: &str,
    fail_over: impl FnOnce(&mut dyn FnMut()),
) {
    use redis_blpop_lock::Lock;
    let lock = |id: &str| {
        (Lock::builder(backend, name).fencing(true))
            .id(id)
            .expire(secs(6))
            .auto_renewal(true)
            .build()
            .unwrap()
    };
    let (holder, waiter) = (lock("holder"), lock("waiter"));
    // A token the replica sees, so that its counter is one grant behind, not empty.
    drop(waiter.lock().unwrap());
    let mut token = 0;
    fail_over(&mut || {
        holder.acquire().unwrap();
        token = holder.fencing_token().unwrap();
    });
    // The new primary never saw the holder's grant: the waiter takes the lock there at once,
    // and has it once the holder's lease, renewed nowhere, has ended.
    let guard = waiter.lock().unwrap();
    assert!(
        holder.lost(),
        "the waiter holds, and the holder believes it does"
    );
    let taken = guard.fencing_token().unwrap();
    assert!(taken > token, "the holder has {token}, the waiter {taken}");
}

#[cfg(feature = "sentinel")]
#[test]
fn a_holder_whose_grant_the_new_primary_never_saw_never_shares_its_token() {
    let mut set = SentinelSet::start();
    let backend = set.backend();
    a_holder_that_the_promoted_replica_never_saw(&backend, "ledger", |grant| {
        fail_over_to_a_replica_that_missed(&mut set, grant)
    });
}

/// Makes the replica of the primary of slot `f` miss what `grant` writes ([`cut_off`]), kills
/// the primary, and has the replica take over (`CLUSTER FAILOVER FORCE`): its port.
#[cfg(feature = "cluster")]
fn force_a_failover_to_a_replica_that_missed(
    cluster: &mut crate::support::RedisCluster,
    grant: impl FnOnce(),
) -> u16 {
    let primary = cluster.primary_for("f");
    let (port, replica_port) = (primary.port, cluster.replica_of(primary).port);
    let reached = cut_off(primary, cluster.node(replica_port), grant);
    cluster.kill(port);
    let replica = cluster.node(replica_port);
    resumed_behind(replica, reached);
    let forced: redis::RedisResult<()> = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .arg("FORCE")
        .query(&mut replica.conn());
    forced.unwrap();
    cluster.until_replaced(port, replica_port);
    replica_port
}

#[cfg(feature = "cluster")]
#[test]
fn on_a_cluster_every_primitives_tokens_grow_across_a_replica_promoted_after_missing_grants() {
    use crate::support::RedisCluster;
    let mut cluster = RedisCluster::start();
    let client = cluster.client();
    // Every primitive's keys in the slot of `f`, so that one failover moves them all.
    let primitives = every_primitive(&client, "fencing-cluster", "{f}");
    let taken = take_each(&primitives);
    let mut missed = Vec::new();
    let replica =
        force_a_failover_to_a_replica_that_missed(&mut cluster, || missed = take_each(&primitives));
    assert_tokens_grew(&primitives, cluster.node(replica), taken, missed);
}

#[cfg(feature = "cluster")]
#[test]
fn on_a_cluster_a_holder_whose_grant_the_promoted_replica_never_saw_lost_it_before_the_next_holds()
{
    let mut cluster = crate::support::RedisCluster::start();
    let client = cluster.client();
    a_holder_that_the_promoted_replica_never_saw(&client, "{f}ledger", |grant| {
        force_a_failover_to_a_replica_that_missed(&mut cluster, grant);
    });
}
