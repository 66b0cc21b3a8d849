-- The fair queue engine: the part every queue_*.lua script starts with (the client sends the
-- two texts joined, since a script cannot load another). One primitive's keys, one hash slot:
-- KEYS[1] holders: ZSET id -> lease expiry, server ms ("+inf": none)
-- KEYS[2] held: HASH id -> "<units>:<fencing token>"
-- KEYS[3] queue: ZSET waiter id -> ticket (arrival order)
-- KEYS[4] beats: ZSET waiter id -> when it lapses, server ms (last heartbeat + lapse window)
-- KEYS[5] wants: HASH waiter id -> "<units>:<lease ms>"
-- KEYS[6] ticket counter, KEYS[7] fencing counter (never deleted)
-- KEYS[8] the signal lists' prefix: a waiter's list is the prefix followed by its id; a grant
-- pushes the fencing token there.
-- A script reads and checks all it needs first and writes only after: one stopped by an error
-- keeps the writes it made, and a corrupt key must leave everything as it was. Time is the
-- server's, never a client's (Redis >= 5 replicates a script's effects, not its calls).

local NOW
do
    local time = redis.call("time")
    NOW = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- `n` as the integer text Redis takes (Lua would print large numbers as 1.7e+12).
local function int(n)
    return string.format("%.0f", n)
end

-- ARGV[i] as a whole number of at most 15 digits (exact in Lua's doubles), or nil.
local function whole(i)
    local text = ARGV[i]
    if text and string.match(text, "^%d+$") and #text <= 15 then
        return tonumber(text)
    end
end

-- "<a>:<b>" as two numbers, or nil.
local function pair(text)
    local a, b = string.match(text or "", "^(%d+):(%d+)$")
    if a and #a <= 15 and #b <= 15 then
        return tonumber(a), tonumber(b)
    end
end

local KINDS = {"zset", "hash", "zset", "zset", "hash", "string", "string"}

-- A read of KEYS[k], or nil and the reply naming it when it holds another type. A read that
-- happens anyway checks the type for free: each call costs a script about a microsecond.
local function read(k, ...)
    local reply = redis.pcall(...)
    if type(reply) == "table" and reply.err then
        -- Any other refusal (a missing ACL right) is the script's error, not a corrupt key.
        if not string.find(reply.err, "WRONGTYPE", 1, true) then
            error(reply)
        end
        return nil, {-1, k, "it is not a " .. KINDS[k] .. ": " .. reply.err}
    end
    return reply
end

-- nil, or the reply naming KEYS[k] when it holds something other than its kind.
local function wrong_type(k)
    local found = redis.call("type", KEYS[k]).ok
    if found ~= "none" and found ~= KINDS[k] then
        return {-1, k, "it holds a " .. found .. ", not a " .. KINDS[k]}
    end
end

-- nil, or the reply naming counter KEYS[k] when it is not a whole number.
local function bad_counter(k)
    local n, bad = read(k, "get", KEYS[k])
    -- At most 15 digits: the counter stays exact in Lua's doubles, and INCR cannot overflow.
    if n and not (string.match(n, "^%d+$") and #n <= 15) then
        return {-1, k, "the counter is not an integer from 0 to 999999999999999"}
    end
    return bad
end

-- The state as the purge will leave it, read and checked, nothing written yet: the live
-- holders (expiry > now) with their units, token and expiry ("inf": none), the units they
-- use, and what the purge removes: expired holders, and waiters whose heartbeat lapsed.
-- Returns nil and the reply when a key is corrupt. Held entries of no holder (which only a
-- hand could write) are not looked for: that would cost a read of them all.
local function load()
    local bad = wrong_type(3) or wrong_type(5) or bad_counter(6) or bad_counter(7)
    if bad then
        return nil, bad
    end
    local holders
    holders, bad = read(1, "zrange", KEYS[1], 0, -1, "withscores")
    if not holders then
        return nil, bad
    end
    local s = {held = {}, used = 0, expired = {}, dropped = {}, lapsed = {}, gone = {}}
    local live = {}
    for i = 1, #holders, 2 do
        local score = holders[i + 1]
        if score == "inf" or tonumber(score) > NOW then
            table.insert(live, i)
        else
            table.insert(s.expired, holders[i])
        end
    end
    if #live == 0 then
        bad = wrong_type(2)
    end
    -- By a thousand: a Lua call takes only so many arguments.
    for from = 1, #live, 1000 do
        local ids = {}
        for j = from, math.min(from + 999, #live) do
            table.insert(ids, holders[live[j]])
        end
        local entries
        entries, bad = read(2, "hmget", KEYS[2], unpack(ids))
        if not entries then
            break
        end
        for j, id in ipairs(ids) do
            local units, token = pair(entries[j])
            if not units then
                return nil, {-1, 2, "the holder " .. id .. " has no \"<units>:<token>\" entry"}
            end
            s.held[id] = {units = units, token = token, expiry = holders[live[from + j - 1] + 1]}
            s.used = s.used + units
        end
    end
    if bad then
        return nil, bad
    end
    local lapsed
    lapsed, bad = read(4, "zrangebyscore", KEYS[4], "-inf", int(NOW))
    if not lapsed then
        return nil, bad
    end
    for _, id in ipairs(lapsed) do
        s.gone[id] = true
        table.insert(s.lapsed, id)
    end
    return s
end

-- Plans a holder's going (released, reset, or leaving after a grant): its units are free.
local function drop(s, id)
    s.used = s.used - s.held[id].units
    s.held[id] = nil
    table.insert(s.dropped, id)
end

-- Plans a waiter's going as if it had lapsed (it leaves).
local function forget(s, id)
    if not s.gone[id] then
        s.gone[id] = true
        table.insert(s.lapsed, id)
    end
end

-- A queued waiter's heartbeat time when it is still live, else nil.
local function live_beat(s, id)
    if s.gone[id] then
        return nil
    end
    local beat = tonumber(redis.call("zscore", KEYS[4], id))
    if beat and beat > NOW then
        return beat
    end
end

-- The grant pass, planned: in ticket order each live waiter is granted while its units fit in
-- `capacity`, up to the first that does not, which blocks those behind it (no big request is
-- starved by small ones). `tail`, when given, is a newcomer behind everyone. Waiters found
-- without a live heartbeat are planned to go. Returns the grants, or nil and the reply when a
-- waiter's entry is corrupt.
local function plan(s, capacity, tail)
    local grants = {}
    local start = 0
    while true do
        local batch = redis.call("zrange", KEYS[3], start, start + 63)
        for _, id in ipairs(batch) do
            if not s.gone[id] then
                local beat = live_beat(s, id)
                if not beat then
                    forget(s, id)
                else
                    local units, lease = pair(redis.call("hget", KEYS[5], id))
                    if not units then
                        return nil, {-1, 5, "the waiter " .. id .. " has no \"<units>:<lease>\" entry"}
                    end
                    if s.used + units > capacity then
                        return grants
                    end
                    s.used = s.used + units
                    table.insert(grants, {id = id, units = units, lease = lease, beat = beat, queued = true})
                end
            end
        end
        if #batch < 64 then
            break
        end
        start = start + 64
    end
    if tail and s.used + tail.units <= capacity then
        s.used = s.used + tail.units
        table.insert(grants, tail)
    end
    return grants
end

-- Writes what was planned: the purge, the goings, then the grants, each with a new fencing
-- token and its lease from now; each granted waiter but `me` (who gets the reply) finds its
-- token in its signal list, kept until its entry would have lapsed.
local function apply(s, grants, me)
    for _, id in ipairs(s.expired) do
        redis.call("zrem", KEYS[1], id)
        redis.call("hdel", KEYS[2], id)
    end
    for _, id in ipairs(s.dropped) do
        redis.call("zrem", KEYS[1], id)
        redis.call("hdel", KEYS[2], id)
        redis.call("del", KEYS[8] .. id)
    end
    for _, id in ipairs(s.lapsed) do
        redis.call("zrem", KEYS[3], id)
        redis.call("zrem", KEYS[4], id)
        redis.call("hdel", KEYS[5], id)
        redis.call("del", KEYS[8] .. id)
    end
    local left_queue = #s.lapsed > 0
    for _, g in ipairs(grants) do
        if g.queued then
            left_queue = true
            redis.call("zrem", KEYS[3], g.id)
            redis.call("zrem", KEYS[4], g.id)
            redis.call("hdel", KEYS[5], g.id)
        end
        g.token = redis.call("incr", KEYS[7])
        local expiry = "+inf"
        if g.lease > 0 then
            expiry = int(NOW + g.lease)
        end
        if g.id ~= me then
            -- Pushed to a waiter that may have died since its last heartbeat: held only
            -- until its entry would have lapsed, unless it claims the grant (an extend).
            local claim = g.beat
            if g.lease > 0 then
                claim = math.min(claim, NOW + g.lease)
            end
            expiry = int(claim)
        end
        redis.call("zadd", KEYS[1], expiry, g.id)
        redis.call("hset", KEYS[2], g.id, int(g.units) .. ":" .. int(g.token))
        if g.id ~= me then
            local list = KEYS[8] .. g.id
            redis.call("lpush", list, g.token)
            redis.call("pexpire", list, int(math.max(1, g.beat - NOW)))
        end
    end
    if left_queue and redis.call("zcard", KEYS[3]) == 0 then
        redis.call("del", KEYS[6])
    end
end

-- Plans and writes the grant pass after the caller's change; nil, or the reply of a corrupt
-- waiter entry (then nothing was written).
local function settle(s, capacity, tail, me)
    local grants, bad = plan(s, capacity, tail)
    if not grants then
        return nil, bad
    end
    apply(s, grants, me)
    return grants
end

-- The capacity at ARGV[i] (at least 1) and the state, or nil and the reply that refuses
-- the call.
local function start(i)
    local capacity = whole(i)
    if not capacity or capacity < 1 then
        return nil, redis.error_reply("ERR the capacity must be a whole number from 1")
    end
    local s, bad = load()
    if not s then
        return nil, bad
    end
    return s, capacity
end

-- Runs the grant pass and answers `reply`, or the reply of a corrupt waiter entry (then
-- nothing was written).
local function finish(s, capacity, reply)
    local grants, corrupt = settle(s, capacity)
    if not grants then
        return corrupt
    end
    return reply
end
