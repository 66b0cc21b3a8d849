-- Give back a key that a failed quorum try or extend took (Redlock's unlock of a lost vote).
-- KEYS[1] lock key, KEYS[2] signal list; ARGV[1] owner id, ARGV[2] "1" to wake a waiter,
-- ARGV[3] signal expiry in ms.
-- A minority's keys are given back without a signal: freeing them lets nobody in, and a signal
-- would wake the very waiter that took one (it blocks on one of these servers) into a loop.
-- Keys that were a majority, won too late, are given back with one.
-- Returns 1 when the key was ours and is gone, 0 when it was not ours.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 0
end
redis.call("del", KEYS[1])
if ARGV[2] == "1" then
    redis.call("del", KEYS[2])
    redis.call("lpush", KEYS[2], 1)
    redis.call("pexpire", KEYS[2], ARGV[3])
end
return 1
