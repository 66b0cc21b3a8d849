//! Running with least privilege and over protected connections: an ACL user limited to exactly
//! what the lock needs, password authentication in the URL, and TLS (`rediss://`, feature
//! `tls`).

use std::thread;
use std::time::Duration;

use redis_blpop_lock::inspect::{self, Primitive};
use redis_blpop_lock::{reset_all, Election, Error, Lock, RwLock, Semaphore, Watched};

use crate::support::{secs, RedisServer};

/// Everything the lock needs, and nothing else: the commands it sends and the commands its
/// scripts call, on its three key patterns. (`ACL SETUSER locker` followed by this.)
pub(crate) const LOCKER_ACL: &str = "on >locker-pw resetkeys ~lock:* ~lock-signal:* ~lock-fence:* \
     ~lock-hub:* ~semaphore:* ~fair-lock:* ~rwlock:* ~election:* resetchannels -@all +set +get +pttl +blpop \
     +evalsha +eval +multi +exec +scan +mget +incr +pexpire +del +lpush +lpop +type +time +zadd +zrem \
     +zrange +zrangebyscore +zscore +zrank +zcard +hset +hget +hmget +hdel +client|id \
     +client|kill +info";

fn admin(server: &RedisServer, args: &[&str]) {
    let _: redis::Value = redis::cmd(args[0])
        .arg(&args[1..])
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
}

/// Makes the user `locker` with `rule` and returns a client logged in as that user.
pub(crate) fn locker(server: &RedisServer, rule: &str) -> redis::Client {
    admin(server, &["ACL", "DELUSER", "locker"]);
    let mut setuser = vec!["ACL", "SETUSER", "locker"];
    setuser.extend(rule.split_whitespace());
    admin(server, &setuser);
    let url = format!("redis://locker:locker-pw@127.0.0.1:{}/", server.port);
    redis::Client::open(url).unwrap()
}

/// Every operation of the lock, as `client`; the first error stops it.
pub(crate) fn everything(server: &RedisServer, client: &redis::Client) -> Result<(), Error> {
    let flush = || admin(server, &["SCRIPT", "FLUSH"]);

    // Plain lock: try, inspect, extend, release.
    let plain = Lock::builder(client, "plain").expire(secs(30)).build()?;
    assert!(plain.try_acquire()?);
    assert_eq!(plain.owner_id()?.as_deref(), Some(plain.id()));
    assert!(plain.locked()?);
    plain.extend(None)?;
    plain.release()?;

    // Fencing lock.
    let fenced = Lock::builder(client, "fenced").fencing(true).build()?;
    fenced.acquire()?;
    assert!(fenced.fencing_token().is_some());
    fenced.release()?;

    // Waiting in BLPOP and being woken by a release.
    let holder = Lock::new(client, "wait")?;
    holder.acquire()?;
    let waiter_client = client.clone();
    let waiter = thread::spawn(move || {
        let lock = Lock::new(&waiter_client, "wait")?;
        let got = lock.acquire_timeout(secs(30))?;
        lock.release()?;
        Ok::<bool, Error>(got)
    });
    server.until_blocked(1, secs(30), || waiter.is_finished());
    holder.release()?;
    assert!(waiter.join().unwrap()?, "the waiter was not woken");

    // A waiter takes an expiring lock at its expiry: the client ends its BLPOP then.
    let expiring = Lock::builder(client, "expiring")
        .expire(Duration::from_millis(200))
        .build()?;
    expiring.acquire()?;
    let taker = Lock::new(client, "expiring")?;
    assert!(taker.acquire_timeout(Duration::from_secs(5))?);
    taker.release()?;

    // Auto-renewal keeps a short lock past its expiry.
    let renewed = Lock::builder(client, "renewed")
        .expire(Duration::from_millis(300))
        .auto_renewal(true)
        .build()?;
    renewed.acquire()?;
    thread::sleep(Duration::from_millis(900));
    assert!(!renewed.lost(), "the renewal did not get through");
    assert_eq!(renewed.owner_id()?.as_deref(), Some(renewed.id()));
    renewed.release()?;

    // Reset and reset_all, by handles other than the holders'.
    holder.acquire()?;
    assert!(Lock::new(client, "wait")?.reset()?);
    Lock::new(client, "a")?.acquire()?;
    Lock::new(client, "b")?.acquire()?;
    assert_eq!(reset_all(client)?, 2);

    // The queue primitives: a semaphore's permit, and a waiter in its line, seen by
    // inspect and woken by the release; a fair lock; a read-write lock's read and write;
    // reset_all over a held permit.
    let permits = Semaphore::new(client, "permits", 1)?;
    let permit = permits.acquire()?;
    assert!(permits.try_acquire()?.is_none());
    let waiter_client = client.clone();
    let queued = thread::spawn(move || {
        let permits = Semaphore::new(&waiter_client, "permits", 1)?;
        match permits.try_acquire_for(secs(10))? {
            Some(permit) => permit.release().map(|()| true),
            None => Ok(false),
        }
    });
    server.until_queued(Primitive::Semaphore, "permits", 1, secs(30), || {
        queued.is_finished()
    });
    // Its process's waiting connection, one for all its queue waiters, blocks in BLPOP too
    // (the plain lock's waiter above is done).
    server.until_blocked(1, secs(30), || queued.is_finished());
    if queued.is_finished() {
        // Refused while it asked: that refusal is the outcome.
        queued.join().unwrap()?;
        panic!("the semaphore's waiter did not wait");
    }
    let line = inspect::queue(client, Primitive::Semaphore, "permits", secs(5));
    let released = permit.release();
    // Joined before any error is returned: no waiter outlives this run.
    let woken = queued.join().unwrap();
    assert_eq!(line?.waiters.len(), 1);
    released?;
    assert!(woken?, "the semaphore's waiter was not woken");
    let fair = Lock::builder(client, "fair").fair(true).build()?;
    fair.acquire()?;
    fair.release()?;
    let rw = RwLock::new(client, "rw")?;
    rw.read()?.unlock()?;
    rw.write()?.unlock()?;
    let held = permits.acquire()?;
    assert_eq!(reset_all(client)?, 1);
    drop(held);

    // An election: a campaign, the leader read and watched, the resignation.
    let election = Election::new(client, "leader")?;
    let leadership = election.campaign("a")?;
    assert_eq!(election.leader()?.map(|l| l.term), Some(leadership.term()));
    let mut watch = election.watch()?;
    let watched = watch.changed_for(secs(5)).and_then(Watched::into_leader);
    assert_eq!(watched.map(|l| l.term), Some(leadership.term()));
    leadership.resign()?;

    // Every script again after the server forgot them (NOSCRIPT, then EVAL).
    flush();
    fenced.acquire()?;
    flush();
    fenced.release()?;
    flush();
    assert!(plain.try_acquire()?);
    flush();
    plain.extend(None)?;
    flush();
    plain.release()?;
    plain.acquire()?;
    flush();
    assert!(plain.reset()?);
    plain.acquire()?;
    flush();
    assert_eq!(reset_all(client)?, 1);
    Ok(())
}

/// The ACL log's entries, as "reason object" lines (denied commands, keys, logins).
pub(crate) fn acl_log(server: &RedisServer) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .unwrap();
    entries
        .into_iter()
        .map(|entry| {
            let fields: std::collections::HashMap<String, redis::Value> =
                redis::from_redis_value(entry).unwrap();
            let text = |name: &str| match fields.get(name) {
                Some(v) => redis::from_redis_value::<String>(v.clone()).unwrap_or_default(),
                None => String::new(),
            };
            format!("{} {}", text("reason"), text("object"))
        })
        .collect()
}

#[test]
fn a_user_limited_to_the_documented_acl_rule_can_do_everything() {
    let server = RedisServer::start();
    let client = locker(&server, LOCKER_ACL);
    everything(&server, &client).expect("the locker user could not do everything");
    // Nothing was refused along the way, not even a command whose error is ignored. (Redis
    // 7.2 and later add CLIENT SETINFO, which the redis crate sends on connecting.)
    let refused: Vec<String> = acl_log(&server)
        .into_iter()
        .filter(|entry| !entry.contains("client|setinfo"))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
}

#[test]
fn every_right_in_the_acl_rule_is_needed_and_its_lack_is_an_acl_error() {
    let parts: Vec<&str> = LOCKER_ACL.split_whitespace().collect();
    let rights: Vec<&str> = parts
        .iter()
        .copied()
        .filter(|p| p.starts_with('+') || p.starts_with('~'))
        // Without these the lock still works, with the fallbacks the next tests pin (and
        // without `+info`, no word on the server's eviction policy: `eviction.rs`).
        .filter(|p| !p.starts_with("+client|") && *p != "+info" && *p != "+lpop")
        .collect();
    // Each right's check takes up to a second: eight servers take an eighth of them each.
    let unclear: Vec<String> = std::thread::scope(|scope| {
        let checks: Vec<_> = rights
            .chunks(rights.len().div_ceil(8))
            .map(|rights| {
                let parts = &parts;
                scope.spawn(move || {
                    let server = RedisServer::start();
                    let mut unclear = Vec::new();
                    for right in rights {
                        let rule: Vec<&str> =
                            parts.iter().copied().filter(|p| p != right).collect();
                        admin(&server, &["FLUSHALL"]);
                        admin(&server, &["SCRIPT", "FLUSH"]);
                        let client = locker(&server, &rule.join(" "));
                        match everything(&server, &client) {
                            Err(Error::Redis(e)) if is_acl_denial(&e) => {
                                println!("without {right}: {e}")
                            }
                            other => unclear.push(format!("without {right}: {other:?}")),
                        }
                    }
                    unclear
                })
            })
            .collect();
        checks
            .into_iter()
            .flat_map(|check| check.join().unwrap())
            .collect()
    });
    assert!(unclear.is_empty(), "{unclear:#?}");
}

#[test]
fn without_the_client_rights_the_lock_still_works() {
    let server = RedisServer::start();
    let rule: Vec<&str> = LOCKER_ACL
        .split_whitespace()
        .filter(|p| !p.starts_with("+client|"))
        .collect();
    let client = locker(&server, &rule.join(" "));
    everything(&server, &client).expect("the lock needs a client right after all");
    let refused = acl_log(&server);
    assert!(
        refused.iter().any(|entry| entry.contains("client|id")),
        "the lock never asked for its connection's id: {refused:?}"
    );
}

#[test]
fn without_lpop_the_queue_primitives_still_bring_every_grant() {
    let server = RedisServer::start();
    let rule: Vec<&str> = (LOCKER_ACL.split_whitespace())
        .filter(|p| *p != "+lpop")
        .collect();
    let client = locker(&server, &rule.join(" "));
    everything(&server, &client).expect("the queue primitives need LPOP after all");
    let refused = acl_log(&server);
    assert!(
        refused.iter().any(|entry| entry.contains("lpop")),
        "the waiting connection never took the other grants of its inbox: {refused:?}"
    );
}

/// An ACL refusal: `NOPERM` for a command sent by the client; Redis 7.0 reports a command
/// refused inside a script as `ERR The user executing the script can't run this command or
/// subcommand` (later versions say `NOPERM` there too).
fn is_acl_denial(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM")
        || (e.code() == Some("EXECABORT") && e.to_string().contains("NOPERM"))
        || (e.code() == Some("ERR")
            && e.to_string()
                .contains("The user executing the script can't run this command"))
        // Redis 7.2 and later, and Valkey, word the denial inside a script so.
        || (e.code() == Some("ERR") && e.to_string().contains("ACL failure in script"))
}

#[test]
fn a_password_in_the_url_authenticates() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret pass"]);
    let url = format!("redis://:s3cret%20pass@127.0.0.1:{}/", server.port);
    let client = redis::Client::open(url).unwrap();
    let lock = Lock::builder(&client, "l").fencing(true).build().unwrap();
    assert!(lock.try_acquire().unwrap());
    assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
    lock.release().unwrap();
}

#[test]
fn a_wrong_or_missing_password_is_a_clear_error() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    for url in [
        format!("redis://:wrong@127.0.0.1:{}/", server.port),
        format!("redis://127.0.0.1:{}/", server.port),
    ] {
        let lock = Lock::new(&redis::Client::open(url.clone()).unwrap(), "l").unwrap();
        match lock.try_acquire() {
            Err(Error::Redis(e)) => {
                let message = e.to_string();
                println!("{url}: {message}");
                assert!(
                    ["WRONGPASS", "NOAUTH", "uthentication"]
                        .iter()
                        .any(|m| message.contains(m)),
                    "{url}: {message}"
                );
            }
            other => panic!("{url}: expected an authentication error, got {other:?}"),
        }
    }
}

#[cfg(feature = "tls")]
mod tls {
    use std::path::{Path, PathBuf};
    use std::process::{Child, Command, Stdio};
    use std::thread;
    use std::time::Duration;

    use redis::TlsCertificates;
    use redis_blpop_lock::{Error, Lock};

    use crate::support::{eventually, free_port, server_binary};

    /// A scratch directory with a CA and a certificate for localhost / 127.0.0.1 signed by it,
    /// made by the `openssl` command line.
    struct Certificates {
        dir: PathBuf,
    }

    impl Certificates {
        fn make() -> Certificates {
            let dir = std::env::temp_dir().join(format!(
                "redis-lock-tls-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("server.ext"),
                "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n",
            )
            .unwrap();
            let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
            openssl(
                &dir,
                &format!(
                    "req -x509 -new {key} -keyout ca.key -out ca.crt -days 2 -subj /CN=test-CA"
                ),
            );
            openssl(
                &dir,
                &format!("req -new {key} -keyout server.key -out server.csr -subj /CN=localhost"),
            );
            openssl(
                &dir,
                "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
                 -out server.crt -days 2 -extfile server.ext",
            );
            Certificates { dir }
        }

        fn path(&self, name: &str) -> String {
            self.dir.join(name).to_string_lossy().into_owned()
        }

        fn ca_pem(&self) -> Vec<u8> {
            std::fs::read(self.dir.join("ca.crt")).unwrap()
        }
    }

    impl Drop for Certificates {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// Runs `openssl` with `args` (split at whitespace) in `dir`.
    fn openssl(dir: &Path, args: &str) {
        let output = Command::new("openssl")
            .args(args.split_whitespace())
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| {
                panic!("could not run openssl ({e}); install it: sudo apt-get install -y openssl")
            });
        assert!(
            output.status.success(),
            "openssl {args}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A `redis-server` that accepts only TLS connections; killed on drop.
    struct TlsServer {
        child: Child,
        port: u16,
    }

    impl TlsServer {
        fn start(certs: &Certificates) -> TlsServer {
            let port = free_port();
            let child = Command::new(server_binary())
                .args(["--port", "0", "--tls-port", &port.to_string()])
                .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(["--tls-cert-file", &certs.path("server.crt")])
                .args(["--tls-key-file", &certs.path("server.key")])
                .args(["--tls-ca-cert-file", &certs.path("ca.crt")])
                .args(["--tls-auth-clients", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("run redis-server");
            let mut server = TlsServer { child, port };
            let client = server.client(certs);
            eventually(Duration::from_secs(10), "the TLS server to answer", || {
                if let Ok(Some(status)) = server.child.try_wait() {
                    panic!(
                        "{} with TLS exited: {status} (built without TLS?)",
                        server_binary().display()
                    );
                }
                client
                    .get_connection()
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok()
            });
            server
        }

        fn url(&self) -> String {
            format!("rediss://127.0.0.1:{}/", self.port)
        }

        /// A client that trusts the test CA.
        fn client(&self, certs: &Certificates) -> redis::Client {
            redis::Client::build_with_tls(
                self.url(),
                TlsCertificates {
                    client_tls: None,
                    root_cert: Some(certs.ca_pem()),
                },
            )
            .unwrap()
        }
    }

    impl Drop for TlsServer {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[test]
    fn over_tls_a_lock_is_taken_waited_for_woken_and_released() {
        let certs = Certificates::make();
        let server = TlsServer::start(&certs);
        let client = server.client(&certs);
        let holder = Lock::builder(&client, "l")
            .expire(Duration::from_secs(30))
            .fencing(true)
            .signal_expire(Duration::from_secs(60))
            .build()
            .unwrap();
        assert!(holder.try_acquire().unwrap());
        assert!(holder.fencing_token().is_some());
        holder.extend(None).unwrap();
        let waiter_client = client.clone();
        let waiter = thread::spawn(move || {
            let lock = Lock::new(&waiter_client, "l").unwrap();
            let got = lock.acquire_timeout(Duration::from_secs(30)).unwrap();
            (got, lock)
        });
        // The waiter blocks in BLPOP (over TLS) until the release wakes it: the holder has
        // 30 s left, far longer than this wait.
        let mut admin = client.get_connection().unwrap();
        eventually(Duration::from_secs(30), "the waiter to block", || {
            let info: redis::InfoDict =
                redis::cmd("INFO").arg("clients").query(&mut admin).unwrap();
            info.get::<u64>("blocked_clients") == Some(1) || waiter.is_finished()
        });
        holder.release().unwrap();
        let (got, lock) = waiter.join().unwrap();
        assert!(got);
        // The release's signal lives for 60 s: it is gone only because the waiter popped it.
        let signal: bool = redis::cmd("EXISTS")
            .arg("lock-signal:l")
            .query(&mut admin)
            .unwrap();
        assert!(!signal, "the waiter was not woken by the release's signal");
        assert_eq!(lock.owner_id().unwrap().as_deref(), Some(lock.id()));
        lock.release().unwrap();
        assert_eq!(redis_blpop_lock::reset_all(&client).unwrap(), 0);
    }

    #[test]
    fn over_tls_a_server_certificate_from_an_unknown_ca_is_refused() {
        let certs = Certificates::make();
        let server = TlsServer::start(&certs);
        // The system's roots only: the test CA is not among them.
        let client = redis::Client::open(server.url()).unwrap();
        let lock = Lock::new(&client, "l").unwrap();
        match lock.try_acquire() {
            Err(Error::Redis(e)) => {
                println!("untrusted certificate: {e}");
                assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
            }
            other => panic!("expected a certificate error, got {other:?}"),
        }
    }
}
