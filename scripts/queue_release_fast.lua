-- queue_release's fast part (its arguments and replies are queue_release.lua's): a holder
-- whose lease has not run out gives back its units in a few commands, and when somebody
-- waits, hands them to the head of the line, which the engine's grant pass would grant and
-- no one behind it. Any other case (a waiter leaving, a lease run out, a kept count that is
-- not current, a head that lapsed, that leaves room for the next, or whose lease ends before
-- its lapse, an older version's waiter), and any read that fails (a corrupt key is the
-- engine's to report), goes on to the engine with nothing written, and so does a release
-- that finds an expired holder, which the engine purges. What this part skips is only the
-- engine's tidying of lapsed heartbeats, which the next script that needs it does. It checks
-- what the engine checks, in as few string operations as it can, since each costs about as
-- much as a command.
repeat
    local id = ARGV[1]
    -- The capacity: a whole number from 1, of at most 15 digits.
    if not ARGV[2] or #ARGV[2] > 15 or not string.find(ARGV[2], "^0*[1-9]%d*$") then
        break
    end
    local waiting = redis.pcall("zcard", KEYS[3])
    if type(waiting) ~= "number" then
        break
    end
    -- Two expiries of as many digits compare as texts, which spares parsing one.
    local score = redis.pcall("zscore", KEYS[1], id)
    if type(score) ~= "string" or score ~= "inf" and (#score == #AT and score <= AT
        or #score ~= #AT and tonumber(score) <= NOW) then
        break
    end
    local entry = redis.pcall("hget", KEYS[2], id)
    if type(entry) ~= "string" then
        break
    end
    local units, token = string.match(entry, "^(%d+):(%d+)$")
    if not units or #units > 15 or not in_range(token) then
        break
    end
    local size = redis.call("zcard", KEYS[1])
    if size == 1 and waiting == 0 then
        -- The last holder: nothing is left to count, and no key is left behind.
        redis.call("del", KEYS[1], KEYS[2], KEYS[9])
    elseif redis.call("zrangebyscore", KEYS[1], "-inf", AT)[1] then
        -- The engine purges expired holders, so that none is left behind the last release.
        break
    else
        local fence = redis.pcall("get", KEYS[7]) or "0"
        local count = redis.pcall("get", KEYS[9])
        -- The counter is digits when the kept count, made of digits, names it.
        local used = type(fence) == "string" and in_range(fence) and type(count) == "string"
            and kept(count, fence, size)
        if not used then
            break
        end
        used = used - tonumber(units)
        -- The head of the line, granted when the units given back let it in.
        local head, of, beat, at, needs
        if waiting > 0 then
            head = redis.call("zrange", KEYS[3], 0, 0)[1]
            of = process(head)
            if of == head then
                break
            end
            beat = redis.pcall("zscore", KEYS[4], of)
            local wants = redis.pcall("hget", KEYS[5], head)
            if type(beat) ~= "string" or type(wants) ~= "string" then
                break
            end
            local lasts
            needs, lasts = string.match(wants, "^([1-9]%d*):(%d+)$")
            if not needs or #needs > 15 or #lasts > 15 then
                break
            end
            local after
            at, after = tonumber(beat), used + tonumber(needs)
            local capacity = tonumber(ARGV[2])
            if at <= NOW or after < capacity and waiting > 1
                or after <= capacity and lasts ~= "0" and NOW + tonumber(lasts) < at then
                -- A lapsed head, room for the one behind it, a lease that ends before its
                -- lapse (whose waiter behind is woken): the engine's.
                break
            end
            if after > capacity then
                head = nil
            else
                used = after
            end
        end
        if head then
            -- Held until the head's lapse unless it claims it (its lease outlasts that), and
            -- kept in its inbox as long.
            local token = next_token(fence)
            local inbox = KEYS[8] .. of
            -- The inbox is written without a read: first, so that one of another type stops
            -- this part before anything is written.
            local mail = token .. ":" .. beat .. ":" .. head
            if type(redis.pcall("lpush", inbox, mail)) == "table" then
                break
            end
            redis.call("pexpire", inbox, at - NOW)
            redis.call("zrem", KEYS[3], head)
            redis.call("hdel", KEYS[5], head)
            if waiting == 1 then
                redis.call("del", KEYS[6])
            end
            redis.call("set", KEYS[7], token)
            redis.call("zrem", KEYS[1], id)
            redis.call("hdel", KEYS[2], id)
            redis.call("zadd", KEYS[1], beat, head)
            redis.call("hset", KEYS[2], head, needs .. ":" .. token)
            redis.call("set", KEYS[9], string.format("%.0f:%s:%.0f", used, token, size))
        elseif size == 1 then
            redis.call("del", KEYS[1], KEYS[2], KEYS[9])
        else
            redis.call("zrem", KEYS[1], id)
            redis.call("hdel", KEYS[2], id)
            redis.call("set", KEYS[9], string.format("%.0f:%s:%.0f", used, fence, size - 1))
        end
    end
    -- Only an id that is its own process (an older version's) has a signal list of its own:
    -- a waiter of a process finds its grants in the process's inbox.
    if process(id) == id then
        redis.call("del", KEYS[8] .. id)
    end
    return 1
until true
