-- Asks for units, or asks again. Safe to send again: everything is by id.
-- ARGV[1] acquisition id, ARGV[2] units, ARGV[3] capacity, ARGV[4] lease ms ("0": none),
-- ARGV[5] lapse window ms, ARGV[6] "try" (no queueing) or "wait", ARGV[7] "new" when the
-- waiter's process may be new to this primitive, "known" when it joined before (older
-- versions send none: "new").
-- Returns {1, token, lease ms left (-1: none)} when the id holds, {0, position, next ms,
-- ticket} when it waits (position from 1), {0, 0, 0} for a try that was not queued. Next is
-- when to ask again: the earliest event that could let it in (-1: none but a grant, which
-- comes to its process's inbox, or the waiter of its own process ahead of it, whose process
-- then times it: see the hub), and for an id that is its own process at most half the lapse
-- window (its heartbeat). The ticket is its place in the line's order (from 1 again once the
-- line has emptied): its process tells by it which of its waiters is ahead. {-2} when its process is "known" but lapsed (it was stopped): nothing is
-- written, and the process makes its waiters join again. {-1, k, reason} when KEYS[k] is
-- corrupt, and nothing was written.
local id, units, lease, lapse, mode = ARGV[1], whole(2), whole(4), whole(5), ARGV[6]
local of = process(id)
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
    -- Granted by another's script: the token pushed to its own list, if not read, is spent.
    if of == id then
        redis.call("del", KEYS[8] .. id)
    end
    return holds(held.token, held.expiry)
end
-- A waiter whose entry lapsed (it was stopped) is new again, and joins at the back; one of a
-- process that lapsed waits for its process to make all its waiters join again, so that
-- none keeps a place its process lost.
local live = live_beat(s, id)
if mode == "wait" and of ~= id and ARGV[7] == "known" and not live then
    return {-2}
end
local queued = false
if live then
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
    -- A new entry of its own process starts with an empty signal list: no token of an
    -- earlier grant is read.
    if of == id then
        redis.call("del", KEYS[8] .. id)
    end
    queued = redis.call("incr", KEYS[6])
    redis.call("zadd", KEYS[3], queued, id)
    redis.call("hset", KEYS[5], id, int(units) .. ":" .. int(lease))
end
-- Its heartbeat, which for a process proves all its waiters alive: never shortened.
redis.call("zadd", KEYS[4], "gt", int(NOW + lapse), of)
outlive(4, lapse)
local position = redis.call("zrank", KEYS[3], id) + 1
local next = -1
if of == id then
    next = math.floor(lapse / 2)
end
local event
-- The nearest waiter ahead that is live may lapse, unless it lapses with this one (the same
-- process): the script that looks then lets this one move up. Waiters ahead without a live
-- heartbeat (lapsed, behind where the grant pass stopped) are passed over, one at a time;
-- with none live ahead this one is first in all but name.
local first = true
for at = position - 2, 0, -1 do
    local ahead = redis.call("zrange", KEYS[3], at, at)[1]
    local beat = live_beat(s, ahead)
    if beat then
        first = false
        if process(ahead) ~= of then
            event = beat
        end
        break
    end
end
if first then
    -- The first holder to expire may free enough.
    local held = redis.call("zrange", KEYS[1], 0, 0, "withscores")
    if held[2] and held[2] ~= "inf" then
        event = tonumber(held[2])
    end
end
if event and (next < 0 or event - NOW < next) then
    next = event - NOW
end
if next >= 0 then
    next = math.max(1, next)
end
return {0, position, next, tonumber(queued)}
