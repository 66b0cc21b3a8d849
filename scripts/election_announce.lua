-- The new leader's announcement, once its campaign was granted: its record, and a word to
-- the watchers. Safe to send again: a record of the same term keeps its `since`.
-- ARGV[1] the leader's id, ARGV[2] its term, ARGV[3] its info.
-- Returns 1 when the id holds with that term, 0 when it does not (it lost the lease before
-- it could announce): then nothing is written.
local score = redis.call("zscore", KEYS[1], ARGV[1])
if not score or (score ~= "inf" and tonumber(score) <= NOW) then
    return 0
end
local entry = redis.call("hget", KEYS[2], ARGV[1])
if not entry or string.match(entry, ":(%d+)$") ~= ARGV[2] then
    return 0
end
if redis.call("hget", KEYS[10], "term") == ARGV[2] then
    return 1
end
redis.call("hset", KEYS[10], "term", ARGV[2], "id", ARGV[1], "since", AT, "info", ARGV[3])
local left = "-1"
if score ~= "inf" then
    left = string.format("%.0f", math.max(1, tonumber(score) - NOW))
end
tell_watchers("watch:" .. ARGV[2] .. ":" .. AT .. ":" .. left .. ":" .. #ARGV[1] .. ":" .. ARGV[1]
    .. ARGV[3])
return 1
