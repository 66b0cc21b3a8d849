-- The fair queue engine's reads, after queue_head.lua: numbers from texts and back, and the
-- reads that check a key's type. The engine (queue_engine.lua) builds on them; queue_extend
-- needs only these, and so does not create the engine's closures.

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

-- "<a>:<b>" as two numbers, or nil: a count of at most 15 digits, and one in range (a fencing
-- token).
local function pair(text)
    local a, b = string.match(text or "", "^(%d+):(%d+)$")
    if a and #a <= 15 and in_range(b) then
        return tonumber(a), tonumber(b)
    end
end

local KINDS = {"zset", "hash", "zset", "zset", "hash", "string", "string", "list", "string"}

-- The keys whose type a read has checked, by their place in KEYS.
local CHECKED = {}

-- A read of KEYS[k], or nil and the reply naming it when it holds another type.
local function read(k, ...)
    CHECKED[k] = true
    local reply = redis.pcall(...)
    if type(reply) == "table" and reply.err then
        -- Any other refusal (a missing ACL right) is the script's error, not a corrupt key:
        -- raised by running the read again with `redis.call`, whose error every server
        -- passes on as it is (Redis 6.2 garbles an error table raised by the script itself).
        if not string.find(reply.err, "WRONGTYPE", 1, true) then
            return redis.call(...)
        end
        return nil, {-1, k, "it is not a " .. KINDS[k] .. ": " .. reply.err}
    end
    return reply
end

-- nil, or the reply naming KEYS[k] when it holds something other than its kind: for a key
-- about to be written that no read has checked.
local function need(k)
    if CHECKED[k] then
        return nil
    end
    CHECKED[k] = true
    local found = redis.call("type", KEYS[k]).ok
    if found ~= "none" and found ~= KINDS[k] then
        return {-1, k, "it holds a " .. found .. ", not a " .. KINDS[k]}
    end
end

-- Counter KEYS[k]'s value ("0" when there is none), or nil and the reply naming it when it
-- is not a whole number.
local function counter(k)
    local n, bad = read(k, "get", KEYS[k])
    if bad then
        return nil, bad
    end
    if n and not countable(n) then
        return nil, {-1, k, "the counter is not an integer from 0 to 8999999999999999"}
    end
    return n or "0"
end

-- The reply naming holder `id`'s entry in KEYS[2] as corrupt.
local function no_entry(id)
    return {-1, 2, "the holder " .. id .. " has no \"<units>:<token>\" entry"}
end
