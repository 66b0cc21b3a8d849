//! The cluster support itself, checked with plain `redis` connections: the topology forms as
//! described, and each move a test makes on purpose leaves it as it says. Killed nodes and the
//! sentinel topology's failovers are in the slow group (`tests/slow/failover_topology.rs`).

#[cfg(feature = "cluster")]
mod cluster {
    use redis::Commands;

    use crate::support::{RedisCluster, RedisServer};

    fn get(server: &RedisServer, key: &str) -> redis::RedisResult<Option<String>> {
        server.conn().get(key)
    }

    #[test]
    fn a_cluster_forms_with_three_primaries_and_their_replicas() {
        let cluster = RedisCluster::shared();
        let primaries = cluster.primaries();
        assert_eq!(primaries.len(), 3);
        for primary in primaries {
            let replica = cluster.replica_of(primary);
            let info: redis::InfoDict = redis::cmd("INFO")
                .arg("replication")
                .query(&mut replica.conn())
                .unwrap();
            assert_eq!(info.get("master_port"), Some(primary.port));
        }
        assert_eq!(cluster.urls().len(), 6);
    }

    #[test]
    fn a_key_written_through_a_cluster_client_is_on_its_primary() {
        let cluster = RedisCluster::shared();
        let client = redis::cluster::ClusterClient::new(vec![cluster.seed_url()]).unwrap();
        let key = "topology:written-through-the-client";
        let _: () = client.get_connection().unwrap().set(key, "v").unwrap();
        assert_eq!(
            get(cluster.primary_for(key), key).unwrap().as_deref(),
            Some("v")
        );
    }

    #[test]
    fn a_cluster_failover_moves_a_keys_slot_to_the_replica() {
        let cluster = RedisCluster::start();
        let key = "topology:failover";
        let old = cluster.primary_for(key);
        let _: () = old.conn().set(key, "v").unwrap();
        let replica_port = cluster.replica_of(old).port;
        cluster.failover(old.port);
        let new = cluster.primary_for(key);
        assert_eq!(new.port, replica_port);
        assert_eq!(get(new, key).unwrap().as_deref(), Some("v"));
        let moved = get(cluster.replica_of(new), key).unwrap_err();
        assert_eq!(moved.code(), Some("MOVED"), "{moved}");
    }

    #[test]
    fn a_migrated_slot_takes_its_keys_along() {
        let cluster = RedisCluster::start();
        let keys = ["{topology:migrate}1", "{topology:migrate}2"];
        let from = cluster.primary_for(keys[0]);
        for key in keys {
            let _: () = from.conn().set(key, key).unwrap();
        }
        let to = (cluster.primaries().into_iter())
            .find(|primary| primary.port != from.port)
            .unwrap();
        cluster.migrate_slot(cluster.slot_of(keys[0]), to.port);
        assert_eq!(cluster.primary_for(keys[0]).port, to.port);
        for key in keys {
            assert_eq!(get(to, key).unwrap().as_deref(), Some(key));
            let moved = get(from, key).unwrap_err();
            assert_eq!(moved.code(), Some("MOVED"), "{moved}");
        }
    }

    #[test]
    fn mid_migration_the_source_sends_keys_it_lacks_to_the_target() {
        let cluster = RedisCluster::start();
        let (kept, absent) = ("{topology:mid}kept", "{topology:mid}absent");
        let from = cluster.primary_for(kept);
        let _: () = from.conn().set(kept, "v").unwrap();
        let to = (cluster.primaries().into_iter())
            .find(|primary| primary.port != from.port)
            .unwrap();
        let slot = cluster.slot_of(kept);
        cluster.begin_migration(slot, to.port);
        assert_eq!(get(from, kept).unwrap().as_deref(), Some("v"));
        let ask = get(from, absent).unwrap_err();
        assert_eq!(ask.code(), Some("ASK"), "{ask}");
        cluster.finish_migration(slot, to.port);
        assert_eq!(cluster.primary_for(kept).port, to.port);
    }
}
