-- The fair queue engine, after queue_head.lua (the keys, the clock, `process` and `kept`) and
-- queue_reads.lua (numbers and checked reads): the general path every script but queue_beat
-- and queue_extend takes.

-- The units of holder entries `ids` (by a thousand: a Lua call takes only so many
-- arguments), or nil when one has no "<units>:<token>" entry. Calls `each(id, units, token)`
-- when given; a type error is returned as the second value.
local function units_of(ids, each)
    local sum = 0
    for from = 1, #ids, 1000 do
        local batch = {unpack(ids, from, math.min(from + 999, #ids))}
        local entries, bad = read(2, "hmget", KEYS[2], unpack(batch))
        if not entries then
            return nil, bad
        end
        for j, id in ipairs(batch) do
            local units, token = pair(entries[j])
            if not units then
                return nil
            end
            if each then
                each(id, units, token)
            end
            sum = sum + units
        end
    end
    return sum
end

-- The live holders (expiry > now) in order of expiry, as {id, units, token, expiry ("inf":
-- none)}, and the units they use: a read of them all, for the operator's paths and a count
-- that is not current. nil and the reply when an entry is corrupt.
local function live_holders()
    local found, bad = read(1, "zrangebyscore", KEYS[1], "(" .. AT, "+inf", "withscores")
    if not found then
        return nil, bad
    end
    local ids, expiry = {}, {}
    for i = 1, #found, 2 do
        table.insert(ids, found[i])
        expiry[found[i]] = found[i + 1]
    end
    local holders = {}
    local used
    used, bad = units_of(ids, function(id, units, token)
        table.insert(holders, {id = id, units = units, token = token, expiry = expiry[id]})
    end)
    if bad then
        return nil, bad
    end
    if not used then
        local id = ids[#holders + 1]
        return nil, no_entry(id)
    end
    return holders, used
end

-- The state as the purge will leave it, read and checked, nothing written yet: the units
-- the live holders use, and what the purge removes: expired holders, and waiters whose
-- heartbeat lapsed. Its cost does not grow with the holders or the waiters, only with what
-- the purge removes: the units in use are the kept count (KEYS[9]) less those of the
-- expired, unless the count is not current. Returns nil and the reply when a key is corrupt.
local function load()
    local fence, bad = counter(7)
    if not fence then
        return nil, bad
    end
    local size
    size, bad = read(1, "zcard", KEYS[1])
    if not size then
        return nil, bad
    end
    local s = {
        expired = {}, dropped = {}, lapsed = {}, gone = {}, beats = {}, fence = fence, size = size
    }
    if size == 0 then
        s.used = 0
    else
        local count
        s.expired, bad = read(1, "zrangebyscore", KEYS[1], "-inf", AT)
        if not bad then
            count, bad = read(9, "get", KEYS[9])
        end
        if bad then
            return nil, bad
        end
        count = kept(count, fence, size)
        if count then
            local gone
            gone, bad = units_of(s.expired)
            if bad then
                return nil, bad
            end
            if gone and gone <= count then
                s.used = count - gone
            end
        end
    end
    if not s.used then
        local holders, used = live_holders()
        if not holders then
            return nil, used
        end
        s.used, s.changed = used, true
    end
    local lapsed
    lapsed, bad = read(4, "zrangebyscore", KEYS[4], "-inf", AT)
    if not lapsed then
        return nil, bad
    end
    for _, id in ipairs(lapsed) do
        s.gone[id] = true
        table.insert(s.lapsed, id)
    end
    return s
end

-- What holder `id` holds while its lease lasts, as {units, token, expiry ("inf": none)}; nil
-- when it holds nothing. nil and the reply when its entry is corrupt.
local function holding(id)
    local score, bad = read(1, "zscore", KEYS[1], id)
    if bad then
        return nil, bad
    end
    if not score or (score ~= "inf" and tonumber(score) <= NOW) then
        return nil
    end
    local entry
    entry, bad = read(2, "hget", KEYS[2], id)
    if bad then
        return nil, bad
    end
    local units, token = pair(entry)
    if not units then
        return nil, no_entry(id)
    end
    return {units = units, token = token, expiry = score}
end

-- Plans a holder's going (released, reset, or leaving after a grant): its units are free.
local function drop(s, id, held)
    s.used = s.used - held.units
    table.insert(s.dropped, id)
end

-- Plans a waiter's going as if it had lapsed (it leaves).
local function forget(s, id)
    if not s.gone[id] then
        s.gone[id] = true
        table.insert(s.lapsed, id)
    end
end

-- KEYS[k] lasts at least `ms` more, and no key outlives the heartbeats kept in it.
local function outlive(k, ms)
    if redis.call("pttl", KEYS[k]) < ms then
        redis.call("pexpire", KEYS[k], int(ms))
    end
end

-- A queued waiter's heartbeat time (its process's) when it is still live, else nil.
-- A process's heartbeat is read once a script: its waiters in line are read one after another.
local function live_beat(s, id)
    local of = process(id)
    if s.gone[id] or s.gone[of] then
        return nil
    end
    local beat = s.beats[of]
    if beat == nil then
        beat = tonumber(redis.call("zscore", KEYS[4], of)) or false
        s.beats[of] = beat
    end
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
        local batch, bad = read(3, "zrange", KEYS[3], start, start + 63)
        if not batch then
            return nil, bad
        end
        for _, id in ipairs(batch) do
            if not s.gone[id] then
                local beat = live_beat(s, id)
                if not beat then
                    forget(s, id)
                else
                    local entry, bad = read(5, "hget", KEYS[5], id)
                    if bad then
                        return nil, bad
                    end
                    local units, lease = pair(entry)
                    if not units then
                        return nil, {-1, 5, "the waiter " .. id .. " has no \"<units>:<lease>\" entry"}
                    end
                    if s.used + units > capacity then
                        return grants
                    end
                    -- The grant is pushed to the waiter's inbox, a key no read has checked:
                    -- one of another type stops the script here, before anything is written.
                    local inbox = KEYS[8] .. process(id)
                    local found = redis.call("type", inbox).ok
                    if found ~= "none" and found ~= "list" then
                        return nil, {-1, 8, "the inbox " .. inbox .. " holds a " .. found}
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

-- Writes the count of units in use, once the holders are as `s` says; with no holders left
-- there is nothing to count, and no key is left behind.
local function keep(s, grants)
    local size = s.size - #s.expired - #s.dropped + #grants
    if size == 0 then
        redis.call("del", KEYS[9])
    else
        redis.call("set", KEYS[9], int(s.used) .. ":" .. s.fence .. ":" .. size)
    end
end

-- Tells the first live waiter in line with a ticket of `from` or after (a ZRANGEBYSCORE
-- bound) to ask again (`ask:<id>` in its process's inbox), unless it is `told` already,
-- passing over entries without a live heartbeat, which the next grant pass removes: its id,
-- or nil when there is none. An older version's waiter (its own process) is not told: it asks
-- by itself every half lapse window.
local function wake_behind(s, from, told)
    local offset = 0
    while true do
        local batch = redis.call("zrangebyscore", KEYS[3], from, "+inf", "limit", offset, 64)
        for _, id in ipairs(batch) do
            local beat = live_beat(s, id)
            if beat then
                if process(id) == id or id == told then
                    return id
                end
                -- A wake is a hint (the waiter asks again at its own time anyway), pushed
                -- after the writes: an inbox of another type goes without it.
                local list = KEYS[8] .. process(id)
                if type(redis.pcall("lpush", list, "ask:" .. id)) == "number" then
                    redis.call("pexpire", list, int(math.max(1, beat - NOW)))
                end
                return id
            end
        end
        if #batch < 64 then
            return nil
        end
        offset = offset + 64
    end
end

-- Writes what was planned: the purge, the goings, then the grants, each with a new fencing
-- token and its lease from now; each granted waiter but `me` (who gets the reply) finds its
-- token in its signal list, kept until its entry would have lapsed. Only an id that is its
-- own process (a process's, or an older version's waiter) has a heartbeat and a signal list
-- of its own: a waiter of a process has neither to remove.
local function apply(s, grants, me)
    -- The ticket of a waiter that leaves before it lapses (`s.leaving`, a waiter's release):
    -- the first live waiter behind it is woken below, once the line is as this script leaves
    -- it.
    local leaving = s.leaving and redis.call("zscore", KEYS[3], s.leaving)
    for _, id in ipairs(s.expired) do
        redis.call("zrem", KEYS[1], id)
        redis.call("hdel", KEYS[2], id)
    end
    for _, id in ipairs(s.dropped) do
        redis.call("zrem", KEYS[1], id)
        redis.call("hdel", KEYS[2], id)
        if process(id) == id then
            redis.call("del", KEYS[8] .. id)
        end
    end
    for _, id in ipairs(s.lapsed) do
        redis.call("zrem", KEYS[3], id)
        redis.call("hdel", KEYS[5], id)
        if process(id) == id then
            redis.call("zrem", KEYS[4], id)
            redis.call("del", KEYS[8] .. id)
        end
    end
    local left_queue = #s.lapsed > 0
    -- Whether a waiter granted from the line holds a lease that ends before its heartbeat
    -- lapses: the waiter behind it timed its next ask to that lapse, and would be late if
    -- the new holder crashed.
    local short = false
    for _, g in ipairs(grants) do
        if g.queued then
            left_queue = true
            short = short or (g.lease > 0 and NOW + g.lease < g.beat)
            redis.call("zrem", KEYS[3], g.id)
            redis.call("hdel", KEYS[5], g.id)
            if process(g.id) == g.id then
                redis.call("zrem", KEYS[4], g.id)
            end
        end
        s.fence = next_token(s.fence)
        g.token = tonumber(s.fence)
        redis.call("set", KEYS[7], s.fence)
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
        redis.call("hset", KEYS[2], g.id, int(g.units) .. ":" .. s.fence)
        if g.id ~= me then
            local of = process(g.id)
            local list = KEYS[8] .. of
            if of == g.id then
                redis.call("lpush", list, s.fence)
            else
                redis.call("lpush", list, s.fence .. ":" .. expiry .. ":" .. g.id)
            end
            redis.call("pexpire", list, int(math.max(1, g.beat - NOW)))
        end
    end
    local woken
    if short then
        -- The new head of the line asks again, to time itself to the holders' expiry.
        woken = wake_behind(s, "-inf")
    end
    -- The waiter behind a leaver timed its next ask to the leaver's lapse, or had no timer
    -- (the leaver was of its own process): it asks again, to time itself to what is ahead of
    -- it now, the holders' expiry when it is first. Any process's, and past lapsed entries:
    -- a wake that stopped at either would leave it asleep up to a lapse window, or for ever.
    if leaving then
        wake_behind(s, "(" .. leaving, woken)
    end
    if left_queue and redis.call("zcard", KEYS[3]) == 0 then
        redis.call("del", KEYS[6])
    end
    if s.changed or #s.expired > 0 or #s.dropped > 0 or #grants > 0 then
        keep(s, grants)
    end
end

-- Plans and writes the grant pass after the caller's change; nil, or the reply of a corrupt
-- waiter entry (then nothing was written).
local function settle(s, capacity, tail, me)
    local grants, bad = plan(s, capacity, tail)
    if not grants then
        return nil, bad
    end
    local holders = #grants > 0 or #s.expired > 0 or #s.dropped > 0
    bad = (holders and need(2)) or (#s.lapsed > 0 and (need(3) or need(5)))
    if bad then
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
