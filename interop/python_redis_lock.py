"""python-redis-lock 4.x and the redis-lock CLI share locks: each blocks the other, a release
on either side wakes a waiter on the other, a shared id is one owner, and python's reset_all
frees a Rust holder's lock.

    pip install python-redis-lock==4.0.1 redis
    cargo build --features cli
    python3 interop/python_redis_lock.py redis://127.0.0.1:6379/ target/debug/redis-lock
"""
import subprocess, sys, time
import redis, redis_lock

url = sys.argv[1]
cli = sys.argv[2]
conn = redis.StrictRedis.from_url(url)

def run(*args):
    return subprocess.Popen([cli, "--url", url, "run", "interop", *args])

# Python holds; the Rust waiter blocks, then wakes on Python's release.
py = redis_lock.Lock(conn, "interop")
py.acquire()
rust = run("--", "true")
time.sleep(1.0)
assert rust.poll() is None, "rust did not wait for python's lock"
released = time.time()
py.release()
assert rust.wait(timeout=10) == 0
print(f"rust waiter took the lock {1000 * (time.time() - released):.1f} ms after python released it")

# Rust holds; python's non-blocking acquire fails, its blocking acquire wakes on Rust's release.
rust = run("--", "sleep", "1")
time.sleep(0.3)
py = redis_lock.Lock(conn, "interop")
assert not py.acquire(blocking=False), "python got a lock rust holds"
owner = py.get_owner_id()
start = time.time()
assert py.acquire(timeout=30)
print(f"python waiter took the lock {1000 * (time.time() - start):.0f} ms after starting to wait (rust held it ~700 ms more); owner was {owner!r}")
assert rust.wait(timeout=10) == 0
py.release()

# Same id on both sides is the same owner: python extends and releases a lock rust took.
rust = subprocess.Popen([cli, "--url", url, "run", "interop", "--id", "shared-id", "--expire", "5", "--", "sleep", "2"])
time.sleep(0.5)
py = redis_lock.Lock(conn, "interop", id="shared-id", expire=5)
py.extend(expire=60)
ttl = conn.ttl("lock:interop")
assert ttl > 50, ttl
print(f"python extended rust's lock to {ttl} s under the shared id")
rust.wait(timeout=10)

# python's reset_all frees a lock rust holds.
rust = run("--expire", "30", "--", "sleep", "30")
time.sleep(0.5)
redis_lock.reset_all(conn)
code = rust.wait(timeout=60)
print(f"after python's reset_all the rust holder exited {code} (75: lock lost)")
