-- A write fenced by a lock's token, on the store's own Redis (not the lock's): the write is
-- refused when a holder with a newer token has written, so a stale holder (paused past its
-- lease, or on a server that failed over) cannot overwrite what came after it.
-- KEYS[1] the value, KEYS[2] the highest token accepted for it
-- ARGV[1] the writer's fencing token, ARGV[2] the value
-- Returns 1 when written, 0 when refused.
-- Tokens are below 2^53, exact in Lua's numbers. An equal token is the same holder's: a holder
-- may write more than once.
local top = tonumber(redis.call("get", KEYS[2]) or "0")
local token = tonumber(ARGV[1])
if not token or token < top then
    return 0
end
redis.call("set", KEYS[2], ARGV[1])
redis.call("set", KEYS[1], ARGV[2])
return 1
