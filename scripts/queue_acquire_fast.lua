-- queue_acquire's fast part (its arguments and replies are queue_acquire.lua's): an id that
-- neither holds nor waits asks while the kept count is current. It is granted when its units
-- fit and nobody waits (expired holders stay counted until the engine purges them); when they
-- do not fit and no lease has run out, or behind a live waiter at the head whose units do not
-- fit, a try is refused and a wait joins the line at the back: the engine's grant pass would
-- grant nobody. Any other case, and any read that fails (a corrupt key is the engine's to
-- report), goes on to the engine with nothing written: what this part skips is only the
-- engine's tidying (purges of expired holders and lapsed heartbeats), which the next script
-- that needs it does. It checks what the engine checks, in as few string operations as it
-- can, since each costs about as much as a command.
repeat
    local id, mode = ARGV[1], ARGV[6]
    -- Whole numbers of at most 15 digits (exact in Lua's doubles); the units and the lapse
    -- window without a leading zero, so that ARGV[2] is the text the engine would write and a
    -- lapse window from 2 is one that is not "1".
    if #ARGV < 6 or (mode ~= "try" and mode ~= "wait") or #ARGV[2] > 15 or #ARGV[3] > 15
        or #ARGV[4] > 15 or #ARGV[5] > 15 or ARGV[5] == "1"
        or not string.find(ARGV[2] .. ":" .. ARGV[3] .. ":" .. ARGV[4] .. ":" .. ARGV[5],
            "^[1-9]%d*:%d+:%d+:[1-9]%d*$") then
        break
    end
    local units, capacity, lease = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
    if units > capacity then
        break
    end
    local waiting = redis.pcall("zcard", KEYS[3])
    if type(waiting) ~= "number" then
        break
    end
    -- Its process's heartbeat: a "known" process that lapsed is told so before anything is
    -- granted, and one that joins after its process lapsed is the engine's, which purges it.
    local of, mine = process(id), false
    if mode == "wait" and of ~= id and (ARGV[7] == "known" or waiting > 0) then
        mine = redis.pcall("zscore", KEYS[4], of)
        if type(mine) == "table" or (mine or ARGV[7] == "known")
            and tonumber(mine or 0) <= NOW then
            break
        end
    end
    local size = redis.pcall("zcard", KEYS[1])
    local fence = redis.pcall("get", KEYS[7]) or "0"
    if type(size) ~= "number" or type(fence) ~= "string" or not countable(fence) then
        break
    end
    local used = 0
    if size > 0 then
        if redis.call("zscore", KEYS[1], id) then
            break
        end
        local count = redis.pcall("get", KEYS[9])
        used = type(count) == "string" and kept(count, fence, size)
        if not used then
            break
        end
    end
    -- Expired holders are counted until the engine purges them: they stop only a refusal.
    local fits = used + units <= capacity
    if not fits or waiting > 0 then
        if size > 0 and redis.call("zrangebyscore", KEYS[1], "-inf", AT)[1] then
            break
        end
    end
    -- What times a waiter that joins (nil: its own process does): the lapse of the tail of
    -- the line when the tail is of another process, or with nobody in line the first holder's
    -- expiry ("inf": none).
    local event
    if waiting > 0 then
        -- A try behind a live waiter that does not fit is refused; the engine decides the rest.
        if redis.call("zscore", KEYS[3], id) then
            break
        end
        local head = redis.call("zrange", KEYS[3], 0, 0)[1]
        -- A process's heartbeat is read once.
        local first = process(head)
        local beat = first == of and mine or redis.pcall("zscore", KEYS[4], first)
        local wants = redis.pcall("hget", KEYS[5], head)
        if type(beat) ~= "string" or tonumber(beat) <= NOW or type(wants) ~= "string" then
            break
        end
        local needs, lasts = string.match(wants, "^(%d+):(%d+)$")
        if not needs or #needs > 15 or #lasts > 15 or used + tonumber(needs) <= capacity then
            break
        end
        if mode == "try" then
            return {0, 0, 0}
        end
        -- A tail that lapsed is the engine's to pass over.
        local last, ahead = first, beat
        if waiting > 1 then
            last = process(redis.call("zrange", KEYS[3], -1, -1)[1])
            ahead = last == first and beat or redis.pcall("zscore", KEYS[4], last)
        end
        if last == of then
            ahead = mine
        end
        if type(ahead) ~= "string" or tonumber(ahead) <= NOW then
            break
        end
        if last ~= of then
            event = ahead
        end
    elseif not fits then
        if mode == "try" then
            return {0, 0, 0}
        end
        event = redis.call("zrange", KEYS[1], 0, 0, "withscores")[2]
        -- Not read above: a process new to the line whose heartbeat lapsed is the engine's.
        if ARGV[7] ~= "known" and of ~= id then
            mine = redis.pcall("zscore", KEYS[4], of)
            if type(mine) == "table" or mine and tonumber(mine) <= NOW then
                break
            end
        end
    end
    if waiting > 0 or not fits then
        -- An older version's waiter (its own process) has a signal list to empty: the engine's.
        local tickets = redis.pcall("get", KEYS[6])
        if of == id or tickets and (type(tickets) ~= "string" or #tickets > 15
            or not string.find(tickets, "^%d+$")) then
            break
        end
        -- The wants' hash, which nothing read when nobody is in line, is written first:
        -- one of another type stops this part before anything is written.
        local wants = ARGV[2] .. ":" .. string.format("%.0f", lease)
        if type(redis.pcall("hset", KEYS[5], id, wants)) == "table" then
            break
        end
        local ticket = redis.call("incr", KEYS[6])
        redis.call("zadd", KEYS[3], ticket, id)
        local lapse = tonumber(ARGV[5])
        redis.call("zadd", KEYS[4], "gt", string.format("%.0f", NOW + lapse), of)
        if redis.call("pttl", KEYS[4]) < lapse then
            redis.call("pexpire", KEYS[4], ARGV[5])
        end
        local next = -1
        if event and event ~= "inf" then
            next = math.max(1, tonumber(event) - NOW)
        end
        return {0, redis.call("zrank", KEYS[3], id) + 1, next, ticket}
    end
    local text = next_token(fence)
    local token = tonumber(text)
    -- The entries' hash is written without a read: first, so that one of another type stops
    -- this part before anything is written.
    if type(redis.pcall("hset", KEYS[2], id, ARGV[2] .. ":" .. text)) == "table" then
        break
    end
    redis.call("set", KEYS[7], text)
    local expiry, left = "+inf", -1
    if lease > 0 then
        expiry, left = string.format("%.0f", NOW + lease), lease
    end
    redis.call("zadd", KEYS[1], expiry, id)
    if size == 0 then
        redis.call("set", KEYS[9], ARGV[2] .. ":" .. text .. ":1")
    else
        redis.call("set", KEYS[9], string.format("%.0f:%s:%.0f", used + units, text, size + 1))
    end
    return {1, token, left}
until true
