-- After a leader resigned, or an operator's reset: with nobody granted in its place, the
-- record goes and the watchers are told; a successor granted meanwhile announces itself.
-- ARGV[1] the term that ended ("": whichever).
-- Returns 1 when the election was left without a leader, 0 otherwise.
if ARGV[1] ~= "" and redis.call("hget", KEYS[10], "term") ~= ARGV[1] then
    return 0
end
if redis.call("zrangebyscore", KEYS[1], "(" .. AT, "+inf", "limit", 0, 1)[1] then
    return 0
end
redis.call("del", KEYS[10])
tell_watchers("watch:" .. (redis.call("get", KEYS[7]) or "0"))
return 1
