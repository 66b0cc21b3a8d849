-- The operator's reset: removes the holder ARGV[1] whatever its lease (all holders when it is
-- empty), and hands the units on. Safe to send again. ARGV[2] capacity.
-- Returns how many holders it removed; {-1, k, reason} when KEYS[k] is corrupt, and nothing
-- was written.
local id = ARGV[1]
local s, capacity = start(2)
if not s then
    return capacity
end
local ids = {}
for holder in pairs(s.held) do
    if id == "" or holder == id then
        table.insert(ids, holder)
    end
end
for _, holder in ipairs(ids) do
    drop(s, holder)
end
return finish(s, capacity, #ids)
