//! A cache stampede, without and with `Cache::get_or_set`.
//!
//! `cargo run --example dogpile` (uses `REDIS_URL`, or starts a private redis-server).
//!
//! 32 threads ask for the same missing cache entry at the same moment. Behind the cache is a
//! slow "database" (100 ms a query) that counts its calls. The naive read-compute-write lets
//! every thread through to the database; `get_or_set` lets one through and hands its value to
//! the rest.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use redis_blpop_lock::Cache;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const THREADS: usize = 32;
const QUERY_TIME: Duration = Duration::from_millis(100);
const TTL: Duration = Duration::from_secs(60);
const NAIVE_KEY: &str = "dogpile-example:naive";
const HELPER_KEY: &str = "dogpile-example:get_or_set";

#[derive(Default)]
struct Database {
    calls: AtomicUsize,
}

impl Database {
    fn query(&self) -> String {
        self.calls.fetch_add(1, Ordering::SeqCst);
        thread::sleep(QUERY_TIME);
        "monthly report".to_string()
    }

    fn report(&self, how: &str, values: &[String]) {
        let calls = self.calls.load(Ordering::SeqCst);
        let agreeing = values.iter().filter(|v| *v == "monthly report").count();
        let times = if calls == 1 { "time " } else { "times" };
        println!(
            "{how:<20} database called {calls:>2} {times} ({:>3.1} s of queries); \
             {agreeing}/{THREADS} callers got the value",
            QUERY_TIME.as_secs_f64() * calls as f64,
        );
    }
}

fn main() -> Result<(), BoxError> {
    let (url, _server) = support::redis_url(None)?;
    let client = redis::Client::open(url)?;
    // A cold cache for both runs, even on a server that ran this example before.
    let mut conn = client.get_connection()?;
    redis::cmd("DEL")
        .arg(NAIVE_KEY)
        .arg(HELPER_KEY)
        .query::<()>(&mut conn)?;
    println!(
        "{THREADS} threads ask for one missing entry at once; a database query takes {} ms.",
        QUERY_TIME.as_millis()
    );

    let naive_db = Database::default();
    let values = stampede(|| naive_get(&client, &naive_db))?;
    naive_db.report("naive get-then-set:", &values);

    let cache = Cache::new(&client)?;
    let helper_db = Database::default();
    let values =
        stampede(|| cache.get_or_set(HELPER_KEY, TTL, || Ok::<_, BoxError>(helper_db.query())))?;
    helper_db.report("Cache::get_or_set:", &values);

    redis::cmd("DEL")
        .arg(NAIVE_KEY)
        .arg(HELPER_KEY)
        .query::<()>(&mut conn)?;
    Ok(())
}

/// The usual cache-aside code: look, and on a miss compute and store. Between the miss and
/// the store, every other caller misses too.
fn naive_get(client: &redis::Client, db: &Database) -> Result<String, BoxError> {
    let mut conn = client.get_connection()?;
    let cached: Option<String> = redis::cmd("GET").arg(NAIVE_KEY).query(&mut conn)?;
    if let Some(value) = cached {
        return Ok(value);
    }
    let value = db.query();
    redis::cmd("SET")
        .arg(NAIVE_KEY)
        .arg(&value)
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query::<()>(&mut conn)?;
    Ok(value)
}

/// Runs `get` on every thread at the same moment and collects what they got.
fn stampede(get: impl Fn() -> Result<String, BoxError> + Sync) -> Result<Vec<String>, BoxError> {
    let barrier = Barrier::new(THREADS);
    thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    get()
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a caller panicked"))
            .collect()
    })
}
