//! The async `with_lock` free function, which keeps its lock with the defaults: a 30 s expiry
//! renewed every 20 s, so a theft is noticed only 20 s in.

use redis_blpop_lock::aio;

use crate::support::{assert_lost_and_dropped, RedisServer};

/// The free function keeps a 30 s expiry alive with a renewal every 20 s: the renewal that
/// finds the thief's id comes 20 s in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_drops_the_work_and_is_lost_when_the_key_is_stolen() {
    let server = RedisServer::start();
    let client = server.client();
    assert_lost_and_dropped(&server, |work| aio::with_lock(&client, "l", work)).await;
}
