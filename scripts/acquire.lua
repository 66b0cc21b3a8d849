-- Take the lock if it is free; otherwise say who holds it and for how long.
-- KEYS[1] lock key, KEYS[2] fencing-token key
-- ARGV[1] owner id, ARGV[2] expiry in ms ("0": none), ARGV[3] "1" to take a fencing token
-- Returns {1, token} when taken (token 0 without fencing), else {0, owner, pttl}.
local taken
if ARGV[2] == "0" then
    taken = redis.call("set", KEYS[1], ARGV[1], "nx")
else
    taken = redis.call("set", KEYS[1], ARGV[1], "nx", "px", ARGV[2])
end
if taken then
    if ARGV[3] == "1" then
        return {1, redis.call("incr", KEYS[2])}
    end
    return {1, 0}
end
return {0, redis.call("get", KEYS[1]), redis.call("pttl", KEYS[1])}
