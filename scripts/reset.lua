-- Delete the lock whoever owns it and wake one waiter (python-redis-lock's RESET_SCRIPT).
-- KEYS[1] lock key, KEYS[2] signal list; ARGV[1] signal expiry in ms
-- Returns 1 when a lock was deleted, 0 when there was none.
redis.call("del", KEYS[2])
redis.call("lpush", KEYS[2], 1)
redis.call("pexpire", KEYS[2], ARGV[1])
return redis.call("del", KEYS[1])
