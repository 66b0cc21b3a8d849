-- Take the lock and a fencing token together, or neither; otherwise say who holds the lock
-- and for how long.
-- KEYS[1] lock key, KEYS[2] fencing counter
-- ARGV[1] owner id, ARGV[2] expiry in ms ("0": none)
-- Returns {1, token} when taken, {0, owner, pttl} when busy, and {-1, k, reason} when KEYS[k]
-- holds something no lock writes; then nothing was written.
-- Everything that could fail is checked before the SET: a script stopped by an error keeps
-- the writes it made.
local fence_type = redis.call("type", KEYS[2]).ok
if fence_type ~= "none" and fence_type ~= "string" then
    return {-1, 2, "the fencing counter is a " .. fence_type .. ", not an integer"}
end
local fence = redis.call("get", KEYS[2])
-- At most 15 digits: the counter stays exact in Lua's doubles, and INCR cannot overflow.
if fence and not (string.match(fence, "^%d+$") and #fence <= 15) then
    return {-1, 2, "the fencing counter is not an integer from 0 to 999999999999999"}
end
local lock_type = redis.call("type", KEYS[1]).ok
if lock_type ~= "none" and lock_type ~= "string" then
    return {-1, 1, "it holds a " .. lock_type .. ", so it is not a lock"}
end
local taken
if ARGV[2] == "0" then
    taken = redis.call("set", KEYS[1], ARGV[1], "nx")
else
    taken = redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2])
end
if taken then
    return {1, redis.call("incr", KEYS[2])}
end
return {0, redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1])}
