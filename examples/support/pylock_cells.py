# The `crash` and `overshoot` cells of examples/bench.rs, run against python-redis-lock.
#
# The bench runs this as `python3 -c <this file> --url URL --cell crash|overshoot --trials N
# --expire-ms E --timeout-ms D1,D2,...` and prints one JSON line per cell with the raw samples
# (microseconds); the bench computes the percentiles with the same code as for its own cells.
# The trial protocol is the bench's, step for step (see the doc comment of examples/bench.rs).
#
# python-redis-lock takes `expire` and `timeout` in whole seconds (it calls int() on both), so
# the expiry is rounded up to whole seconds, and a timeout that is not a whole number of seconds
# is not measured: `acquire(timeout=0.3)` becomes timeout 0, which means no timeout at all.
import argparse
import json
import os
import signal
import sys
import time

import redis
import redis_lock

WAITER_TIMEOUT_S = 10
GOLDEN = 0.6180339887498949


def now():
    return time.perf_counter_ns()


def ping_us(client):
    sent = now()
    client.ping()
    return (now() - sent) // 1000


def sleep_until(instant_ns):
    left = instant_ns - now()
    if left > 0:
        time.sleep(left / 1e9)


def crash_trial(url, client, name, expire_s, frac):
    """One trial: a forked holder takes the lock with `expire_s`, says so and is SIGKILLed;
    a waiter here arrives at `frac` of the way to the key's expiry and waits for the lock.
    Returns (lateness_us, pttl_round_trip_us)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            own = redis.StrictRedis.from_url(url)
            redis_lock.Lock(own, name, expire=expire_s).acquire()
            os.write(write_end, b"held\n")
            time.sleep(3600)
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        said = os.read(read_end, 16)
        if said != b"held\n":
            raise RuntimeError(f"the holder did not take the lock (said {said!r})")
        sent = now()
        pttl = client.pttl("lock:" + name)
        received = now()
        os.kill(pid, signal.SIGKILL)
    finally:
        os.close(read_end)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(pid, 0)
    if pttl <= 0:
        raise RuntimeError(f"the holder's key has no expiry (PTTL {pttl})")
    expiry = sent + pttl * 1_000_000
    waiter = redis_lock.Lock(client, name, expire=expire_s)
    killed = now()
    sleep_until(killed + int(0.9 * frac * max(0, expiry - killed)))
    # python-redis-lock refuses a timeout longer than the expiry (TimeoutTooLarge), so the
    # waiter cannot ask for 10 s the way ours does: it blocks without a timeout, which is
    # BLPOP(expire) then SET NX, again and again.
    if not waiter.acquire(blocking=True):
        raise RuntimeError("the waiter did not get the lock")
    got = now()
    waiter.release()
    return (got - expiry) // 1000, (received - sent) // 1000


def crash(args, client):
    expire_s = max(1, -(-args.expire_ms // 1000))
    note = None
    if expire_s * 1000 != args.expire_ms:
        note = (
            f"python-redis-lock takes whole seconds: expire {args.expire_ms} ms "
            f"rounded up to {expire_s * 1000} ms"
        )
    samples, pttl_rtts, rtts = [], [], []
    for i in range(args.trials):
        name = f"bench:crash:python:{os.getpid()}:{i}"
        time.sleep(((i * GOLDEN) % 1.0) / max(1, args.hz))
        lateness, pttl_rtt = crash_trial(args.url, client, name, expire_s, (i * GOLDEN) % 1.0)
        samples.append(lateness)
        pttl_rtts.append(pttl_rtt)
        rtts.append(ping_us(client))
    print(
        json.dumps(
            {
                "cell": "crash",
                "expire_ms": expire_s * 1000,
                "samples_us": samples,
                "pttl_rtt_us": pttl_rtts,
                "rtt_us": rtts,
                "note": note,
            }
        ),
        flush=True,
    )


def overshoot(args, client):
    for timeout_ms in args.timeout_ms:
        samples, rtts, note = [], [], None
        if timeout_ms % 1000 != 0 or timeout_ms == 0:
            note = (
                f"not measured: python-redis-lock takes whole seconds, and "
                f"acquire(timeout={timeout_ms / 1000:g}) truncates it to 0, i.e. no timeout: "
                f"against a held lock it never returns"
            )
        else:
            name = f"bench:overshoot:python:{os.getpid()}:{timeout_ms}"
            holder = redis_lock.Lock(client, name)
            if not holder.acquire(blocking=False):
                raise RuntimeError(f"{name} is busy")
            try:
                for i in range(args.trials):
                    waiter = redis_lock.Lock(client, name)
                    # Spread the start over one server tick, as the bench does (tick_phase).
                    time.sleep(((i * GOLDEN) % 1.0) / max(1, args.hz))
                    started = now()
                    got = waiter.acquire(blocking=True, timeout=timeout_ms // 1000)
                    elapsed = now() - started
                    if got:
                        raise RuntimeError("the waiter took a held lock")
                    samples.append((elapsed - timeout_ms * 1_000_000) // 1000)
                    rtts.append(ping_us(client))
            finally:
                holder.release()
        print(
            json.dumps(
                {
                    "cell": "overshoot",
                    "timeout_ms": timeout_ms,
                    "samples_us": samples,
                    "rtt_us": rtts,
                    "note": note,
                }
            ),
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--cell", choices=["crash", "overshoot"], required=True)
    parser.add_argument("--trials", type=int, required=True)
    parser.add_argument("--hz", type=int, default=10)
    parser.add_argument("--expire-ms", type=int, required=True)
    parser.add_argument(
        "--timeout-ms", type=lambda s: [int(x) for x in s.split(",")], required=True
    )
    args = parser.parse_args(sys.argv[1:])
    client = redis.StrictRedis.from_url(args.url)
    client.ping()
    if args.cell == "crash":
        crash(args, client)
    else:
        overshoot(args, client)


main()
