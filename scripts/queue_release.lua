-- Gives back what the id holds, and hands the units on. Safe to send again.
-- ARGV[1] acquisition id, ARGV[2] capacity.
-- Returns 1 when the id held, 0 when it held nothing (its lease expired, or it was reset);
-- {-1, k, reason} when KEYS[k] is corrupt, and nothing was written.
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
local grants, corrupt = settle(s, capacity)
if not grants then
    return corrupt
end
if held then
    return 1
end
return 0
