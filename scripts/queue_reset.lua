-- The operator's reset: removes the holder ARGV[1] whatever its lease (all holders when it is
-- empty), and hands the units on. Safe to send again. ARGV[2] capacity.
-- Returns how many holders it removed; {-1, k, reason} when KEYS[k] is corrupt, and nothing
-- was written.
local id = ARGV[1]
local s, capacity = start(2)
if not s then
    return capacity
end
-- All live holders, or the one named.
local holders, bad = {}, nil
if id == "" then
    local found, used = live_holders()
    holders, bad = found, not found and used
else
    local held
    held, bad = holding(id)
    if held then
        held.id = id
        holders = {held}
    end
end
if bad then
    return bad
end
for _, held in ipairs(holders) do
    drop(s, held.id, held)
end
return finish(s, capacity, #holders)
