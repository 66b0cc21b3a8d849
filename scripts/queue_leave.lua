-- A waiter that gives up (its deadline, a cancel) leaves the queue; a grant it received
-- meanwhile is given back and handed on. Safe to send again.
-- ARGV[1] acquisition id, ARGV[2] capacity.
-- Returns 1 when it gave back a grant, 0 when it held nothing; {-1, k, reason} when KEYS[k]
-- is corrupt, and nothing was written.
local id = ARGV[1]
local capacity, refused = capacity_at(2)
if not capacity then
    return refused
end
local s, bad = load()
if not s then
    return bad
end
local held = s.held[id] ~= nil
if held then
    drop(s, id)
end
forget(s, id)
local grants, corrupt = settle(s, capacity)
if not grants then
    return corrupt
end
if held then
    return 1
end
return 0
