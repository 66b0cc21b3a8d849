//! The cluster and sentinel support's failovers, checked with plain `redis` connections: each
//! leaves the topology as it says.

#[cfg(feature = "cluster")]
mod cluster {
    use crate::support::RedisCluster;

    #[test]
    fn a_crashed_primary_is_replaced_by_its_replica() {
        let mut cluster = RedisCluster::start();
        let key = "topology:crash";
        let old = cluster.primary_for(key).port;
        let replica = cluster.replica_of(cluster.primary_for(key)).port;
        cluster.kill_primary_and_wait_failover(old);
        assert_eq!(cluster.primary_for(key).port, replica);
        assert_eq!(cluster.primaries().len(), 3);
        assert_eq!(cluster.urls().len(), 5);
    }
}

#[cfg(feature = "sentinel")]
mod sentinel {
    use redis::Commands;

    use crate::support::SentinelSet;

    /// The primary's port according to the sentinel at `url`.
    fn named_primary(url: &str, service: &str) -> u16 {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        let (_, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(service)
            .query(&mut conn)
            .unwrap();
        port
    }

    #[test]
    fn a_sentinel_failover_promotes_the_replica() {
        let set = SentinelSet::start();
        let old = set.primary().port;
        let _: () = set.primary().conn().set("topology:sentinel", "v").unwrap();
        let replica = set.replica().port;
        set.failover();
        for url in set.sentinel_urls() {
            assert_eq!(named_primary(&url, set.service()), replica);
        }
        assert_eq!(set.primary().port, replica);
        assert_eq!(set.replica().port, old);
        let value: Option<String> = set.primary().conn().get("topology:sentinel").unwrap();
        assert_eq!(value.as_deref(), Some("v"));
    }

    #[test]
    fn sentinels_promote_the_replica_of_a_crashed_primary() {
        let mut set = SentinelSet::start();
        let replica = set.replica().port;
        set.kill_primary_and_wait_failover();
        for url in set.sentinel_urls() {
            assert_eq!(named_primary(&url, set.service()), replica);
        }
        let role: redis::Value = redis::cmd("ROLE").query(&mut set.primary().conn()).unwrap();
        assert!(format!("{role:?}").contains("master"), "{role:?}");
    }
}
