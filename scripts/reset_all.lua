-- Reset one batch of locks found by the client's SCAN, waking a waiter on each.
-- Unlike python-redis-lock's RESET_ALL_SCRIPT it never calls KEYS, so a large keyspace
-- does not block the server; a key under lock:* that is not a string is not a lock and is left.
-- KEYS: lock keys ("lock:<name>"); ARGV[1] signal expiry in ms
-- Returns how many locks were deleted.
local reset = 0
for _, lock in ipairs(KEYS) do
    if redis.call("type", lock).ok == "string" then
        local signal = "lock-signal:" .. string.sub(lock, 6)
        redis.call("del", signal)
        redis.call("lpush", signal, 1)
        redis.call("pexpire", signal, ARGV[1])
        reset = reset + redis.call("del", lock)
    end
end
return reset
