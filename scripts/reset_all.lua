-- Reset a batch of locks found by the client's SCAN, waking a waiter on each. Unlike
-- python-redis-lock's RESET_ALL_SCRIPT it never calls KEYS, so a large keyspace does not
-- block the server, and it deletes a lock only if it still holds the owner the client read,
-- so running it twice never deletes a lock taken in between.
-- KEYS: pairs of lock key and its signal list; ARGV[1] signal expiry in ms, ARGV[1 + i] the
-- owner read for the i-th pair.
-- Returns how many locks were deleted.
local reset = 0
for i = 1, #KEYS, 2 do
    local lock, signal = KEYS[i], KEYS[i + 1]
    if redis.call("type", lock).ok == "string" and redis.call("get", lock) == ARGV[1 + (i + 1) / 2] then
        redis.call("del", signal)
        redis.call("lpush", signal, 1)
        redis.call("pexpire", signal, ARGV[1])
        redis.call("del", lock)
        reset = reset + 1
    end
end
return reset
