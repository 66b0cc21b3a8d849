-- Asks for units, or asks again (a heartbeat). Safe to send again: everything is by id.
-- ARGV[1] acquisition id, ARGV[2] units, ARGV[3] capacity, ARGV[4] lease ms ("0": none),
-- ARGV[5] lapse window ms, ARGV[6] "try" (no queueing) or "wait".
-- Returns {1, token, lease ms left (-1: none)} when the id holds, {0, position, next ms} when
-- it waits (position from 1; 0 for a try that was not queued), where next is when to ask
-- again: the earliest event that could let it in, and at most half the lapse window (its
-- heartbeat). {-1, k, reason} when KEYS[k] is corrupt, and nothing was written.
local id, units, lease, lapse, mode = ARGV[1], whole(2), whole(4), whole(5), ARGV[6]
if not (units and units >= 1 and lease and lapse and lapse >= 2) or (mode ~= "try" and mode ~= "wait") then
    return redis.error_reply("ERR queue_acquire: bad arguments")
end
local s, capacity = start(3)
if not s then
    return capacity
end
if units > capacity then
    return redis.error_reply("ERR " .. ARGV[2] .. " units asked of a capacity of " .. ARGV[3])
end

-- The reply to a holder.
local function holds(token, expiry)
    local left = -1
    if expiry ~= "inf" then
        left = math.max(1, tonumber(expiry) - NOW)
    end
    return {1, token, left}
end

local held, bad = holding(id)
if bad then
    return bad
end
if held then
    -- Granted by another's script: the token pushed to its list, if not read, is spent.
    redis.call("del", KEYS[8] .. id)
    return holds(held.token, held.expiry)
end
-- A waiter whose entry lapsed (it was stopped) is new again, and joins at the back.
local queued = false
if live_beat(s, id) then
    queued, bad = read(3, "zscore", KEYS[3], id)
    if bad then
        return bad
    end
end
local tail
if not queued then
    tail = {id = id, units = units, lease = lease}
    -- Joining writes the queue's keys, which nothing may have read yet.
    if mode == "wait" then
        bad = select(2, counter(6)) or need(5)
        if bad then
            return bad
        end
    end
end
local grants, corrupt = settle(s, capacity, tail, id)
if not grants then
    return corrupt
end
for _, g in ipairs(grants) do
    if g.id == id then
        local expiry = "inf"
        if lease > 0 then
            expiry = NOW + lease
        end
        return holds(g.token, expiry)
    end
end
if not queued then
    if mode == "try" then
        return {0, 0, 0}
    end
    -- A new entry starts with an empty signal list: no token of an earlier grant is read.
    redis.call("del", KEYS[8] .. id)
    redis.call("zadd", KEYS[3], redis.call("incr", KEYS[6]), id)
    redis.call("hset", KEYS[5], id, int(units) .. ":" .. int(lease))
end
redis.call("zadd", KEYS[4], int(NOW + lapse), id)
local position = redis.call("zrank", KEYS[3], id) + 1
local next = math.floor(lapse / 2)
local event
if position == 1 then
    -- The first holder to expire may free enough.
    local first = redis.call("zrange", KEYS[1], 0, 0, "withscores")
    if first[2] and first[2] ~= "inf" then
        event = tonumber(first[2])
    end
else
    -- The waiter just ahead may lapse: the script that looks then lets this one move up.
    local ahead = redis.call("zrange", KEYS[3], position - 2, position - 2)
    event = tonumber(redis.call("zscore", KEYS[4], ahead[1]))
end
if event then
    next = math.min(next, event - NOW)
end
return {0, position, math.max(1, next)}
