-- Reads the primitive: the units in use; live holders as id, units, ms left (-1: no expiry)
-- and fencing token; live waiters in arrival order as id, units and ms until their heartbeat
-- lapses. ARGV[1] "": all of it, the operator's read, which counts the holders' units again
-- and checks the kept count against it; an id: a holder's read, as cheap as any script, of
-- that id's entry when it holds, else the first to expire, and no waiters.
-- Returns {used, {holder fields...}, {waiter fields...}, counted}, where counted is -1, or
-- the units the kept count said when the recount found another number: the count is then
-- deleted, so that the next script counts again (it writes nothing else). {-1, k, reason}
-- when KEYS[k] is corrupt.
local s, bad = load()
if not s then
    return bad
end

-- A holder's fields, appended to `fields`.
local function add(fields, id, held)
    local left = -1
    if held.expiry ~= "inf" then
        left = tonumber(held.expiry) - NOW
    end
    for _, field in ipairs({id, held.units, left, held.token}) do
        table.insert(fields, field)
    end
end

local holders = {}
if ARGV[1] ~= "" then
    local held
    held, bad = holding(ARGV[1])
    local id = ARGV[1]
    if not held and not bad then
        id = redis.call("zrangebyscore", KEYS[1], "(" .. AT, "+inf", "limit", 0, 1)[1]
        if id then
            held, bad = holding(id)
        end
    end
    if bad then
        return bad
    end
    if held then
        add(holders, id, held)
    end
    return {s.used, holders, {}, -1}
end

local live, used = live_holders()
if not live then
    return used
end
for _, held in ipairs(live) do
    add(holders, held.id, held)
end
local counted = -1
if used ~= s.used then
    counted = s.used
    -- A server refusing the write (a read-only user) still gets the report.
    redis.pcall("del", KEYS[9])
end
local waiters = {}
local queue
queue, bad = read(3, "zrange", KEYS[3], 0, -1)
if not queue then
    return bad
end
bad = need(5)
if bad then
    return bad
end
for _, id in ipairs(queue) do
    local beat = live_beat(s, id)
    local units = pair(redis.call("hget", KEYS[5], id))
    if beat and not units then
        return {-1, 5, "the waiter " .. id .. " has no \"<units>:<lease>\" entry"}
    end
    if beat then
        for _, field in ipairs({id, units, beat - NOW}) do
            table.insert(waiters, field)
        end
    end
end
return {used, holders, waiters, counted}
