-- Take the lock and a fencing token together, or neither; otherwise say who holds the lock
-- and for how long.
-- KEYS[1] lock key, KEYS[2] fencing counter: the last token handed out
-- ARGV[1] owner id, ARGV[2] expiry in ms ("0": none)
-- Returns {1, token} when taken, {0, owner, pttl} when busy, and {-1, k, reason} when KEYS[k]
-- holds something no lock writes; then nothing was written.
-- Everything that could fail is checked before the SET: a script stopped by an error keeps
-- the writes it made.
local fence_type = redis.call("type", KEYS[2]).ok
if fence_type ~= "none" and fence_type ~= "string" then
    return {-1, 2, "the fencing counter is a " .. fence_type .. ", not an integer"}
end
local fence = redis.call("get", KEYS[2]) or "0"
-- Below 9 * 10^15: the counter stays exact in Lua's doubles, with room for every token after
-- it (the server's clock in microseconds stays below it until the year 2255).
if not string.find(fence, "^%d+$") or #fence > 16
    or #fence == 16 and fence >= "9000000000000000" then
    return {-1, 2, "the fencing counter is not an integer from 0 to 8999999999999999"}
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
    -- A hybrid logical clock: the server's time in microseconds, or the last token + 1 when
    -- that is not above it. It grows on a server that kept the counter, whatever its clock
    -- does, and past a counter lost (a restart without persistence, a FLUSHALL, a promoted
    -- replica that missed the last grants) as long as the server's clock is ahead of the
    -- last grant's.
    local time = redis.call("time")
    local clock = tonumber(time[1]) * 1000000 + tonumber(time[2])
    local token = math.max(tonumber(fence) + 1, clock)
    redis.call("set", KEYS[2], string.format("%.0f", token))
    return {1, token}
end
return {0, redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1])}
