-- A holder keeps fewer units (a read-write lock's downgrade: from the capacity to 1), with
-- the same token and lease, and the units it let go are handed on. Safe to send again.
-- ARGV[1] acquisition id, ARGV[2] units to keep (at least 1, at most what it holds),
-- ARGV[3] capacity.
-- Returns 1 when the id holds that many now, 0 when it holds nothing; {-1, k, reason} when
-- KEYS[k] is corrupt, and nothing was written.
local id, units = ARGV[1], whole(2)
if not units or units < 1 then
    return redis.error_reply("ERR queue_shrink: the units kept must be a whole number from 1")
end
local s, capacity = start(3)
if not s then
    return capacity
end
local held, bad = holding(id)
if bad then
    return bad
end
if held and units > held.units then
    return redis.error_reply("ERR a holder cannot grow: it holds " .. held.units .. " units")
end
if held then
    s.used = s.used - (held.units - units)
    s.changed = true
end
local grants, corrupt = settle(s, capacity)
if not grants then
    return corrupt
end
if not held then
    return 0
end
redis.call("hset", KEYS[2], id, int(units) .. ":" .. int(held.token))
return 1
