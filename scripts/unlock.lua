-- Release the lock if ARGV[1] owns it and wake one waiter (python-redis-lock's UNLOCK_SCRIPT).
-- KEYS[1] lock key, KEYS[2] signal list; ARGV[1] owner id, ARGV[2] signal expiry in ms
-- Returns 0 when released, 1 when the lock is not ours.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 1
end
redis.call("del", KEYS[2])
redis.call("lpush", KEYS[2], 1)
redis.call("pexpire", KEYS[2], ARGV[2])
redis.call("del", KEYS[1])
return 0
