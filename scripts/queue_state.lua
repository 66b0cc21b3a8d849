-- Reads the primitive, writing nothing: the units in use; each live holder as id, units, ms
-- left (-1: no expiry) and fencing token; each live waiter in arrival order as id, units and
-- ms until its heartbeat lapses.
-- Returns {used, {holder fields...}, {waiter fields...}}, or {-1, k, reason} when KEYS[k] is
-- corrupt.
local s, bad = load()
if not s then
    return bad
end
local holders = {}
for _, id in ipairs(redis.call("zrange", KEYS[1], 0, -1)) do
    local held = s.held[id]
    if held then
        local left = -1
        if held.expiry ~= "inf" then
            left = tonumber(held.expiry) - NOW
        end
        for _, field in ipairs({id, held.units, left, held.token}) do
            table.insert(holders, field)
        end
    end
end
local waiters = {}
for _, id in ipairs(redis.call("zrange", KEYS[3], 0, -1)) do
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
return {s.used, holders, waiters}
