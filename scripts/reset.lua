-- Reset a lock: delete it if it still holds the owner the client read, and wake one waiter.
-- python-redis-lock's reset deletes the lock whoever holds it; this one is owner-checked, so a
-- reset whose reply was lost can be sent again without deleting a lock taken in between.
-- KEYS[1] lock key, KEYS[2] signal list; ARGV[1] the owner read, ARGV[2] signal expiry in ms,
-- ARGV[3] "1" to delete a key at KEYS[1] that is not a lock (not a string) instead of failing.
-- Returns 0 when it deleted the lock, 1 when the lock no longer holds that owner (released,
-- expired or taken since), 2 when it deleted a key that was not a lock. Without ARGV[3], a key
-- that is not a lock fails the GET with WRONGTYPE, and nothing is written.
local result = 0
local kind = redis.call("type", KEYS[1]).ok
if ARGV[3] == "1" and kind ~= "string" and kind ~= "none" then
    result = 2
elseif redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 1
end
redis.call("del", KEYS[2])
redis.call("lpush", KEYS[2], 1)
redis.call("pexpire", KEYS[2], ARGV[2])
redis.call("del", KEYS[1])
return result
