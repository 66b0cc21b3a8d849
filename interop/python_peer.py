"""The python-redis-lock side of tests/integration/interop.rs, on the server at argv[1] (a
node of a Redis Cluster when argv[2] is "cluster"). It answers commands, one a line on standard input, with a line each on standard output:

    acquire NAME [ID]   take lock NAME (as owner ID), waiting as long as it takes
    wait NAME SECONDS   say "waiting", then wait up to SECONDS for lock NAME
    release NAME [ID]   release lock NAME: the one taken here, or as owner ID
    reset_all           redis_lock.reset_all
"""
import sys

import redis
import redis_lock

if sys.argv[2:] == ["cluster"]:
    from redis.cluster import RedisCluster

    conn = RedisCluster.from_url(sys.argv[1])
    # python-redis-lock accepts other clients than StrictRedis only when told to.
    options = {"strict": False}
else:
    conn = redis.StrictRedis.from_url(sys.argv[1])
    options = {}
held = {}
print("ready", flush=True)
for line in sys.stdin:
    command, *args = line.split()
    if command == "acquire":
        lock = redis_lock.Lock(conn, args[0], id=args[1] if len(args) > 1 else None, **options)
        lock.acquire()
        held[args[0]] = lock
        print("acquired", lock.id, flush=True)
    elif command == "wait":
        lock = redis_lock.Lock(conn, args[0], **options)
        print("waiting", flush=True)
        print("result", lock.acquire(timeout=int(args[1])), flush=True)
    elif command == "release":
        lock = redis_lock.Lock(conn, args[0], id=args[1], **options) if len(args) > 1 else held.pop(args[0])
        lock.release()
        print("released", flush=True)
    elif command == "reset_all":
        redis_lock.reset_all(conn)
        print("reset", flush=True)
    else:
        sys.exit(f"unknown command {line!r}")
