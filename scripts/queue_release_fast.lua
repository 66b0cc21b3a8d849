-- queue_release's fast part (its arguments and replies are queue_release.lua's): a holder
-- whose lease has not run out gives back its units while nobody waits, in a few commands.
-- Any other case (a waiter leaving, a lease run out, a kept count that is not current while
-- other holders stay), and any read that fails (a corrupt key is the engine's to report),
-- goes on to the engine with nothing written, and so does a release that finds an expired
-- holder, which the engine purges. It checks what the engine checks, in as few
-- string operations as it can, since each costs about as much as a command.
repeat
    local id = ARGV[1]
    -- The capacity: a whole number from 1, of at most 15 digits.
    if not ARGV[2] or #ARGV[2] > 15 or not string.find(ARGV[2], "^0*[1-9]%d*$") then
        break
    end
    local waiting = redis.pcall("zcard", KEYS[3])
    if waiting ~= 0 then
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
    if not units or #units > 15 or #token > 15 then
        break
    end
    local size = redis.call("zcard", KEYS[1])
    if size == 1 then
        -- The last holder: nothing is left to count, and no key is left behind.
        redis.call("del", KEYS[1], KEYS[2], KEYS[9])
    elseif redis.call("zrangebyscore", KEYS[1], "-inf", AT)[1] then
        -- The engine purges expired holders, so that none is left behind the last release.
        break
    else
        local fence = redis.pcall("get", KEYS[7]) or "0"
        local count = redis.pcall("get", KEYS[9])
        local used = type(fence) == "string" and #fence <= 15 and type(count) == "string"
            and kept(count, fence, size)
        if not used then
            break
        end
        redis.call("zrem", KEYS[1], id)
        redis.call("hdel", KEYS[2], id)
        redis.call("set", KEYS[9],
            string.format("%.0f:%s:%.0f", used - tonumber(units), fence, size - 1))
    end
    -- Only an id that is its own process (an older version's) has a signal list of its own:
    -- a waiter of a process finds its grants in the process's inbox.
    if process(id) == id then
        redis.call("del", KEYS[8] .. id)
    end
    return 1
until true
