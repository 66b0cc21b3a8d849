-- Who leads, for anyone; for a watching process (ARGV[1], "" for none) also its heartbeat for
-- ARGV[2] ms more, by which the announcements find it.
-- Returns {1, id, term, since, info, lease ms left (-1: none)} for an announced leader whose
-- lease lasts; {0, ms, waiting, fence} when nobody leads, where ms is how long until the lease
-- of a holder granted but not announced yet ends (-1: none), waiting is 1 when candidates
-- wait in line (one of them is about to lead: a crashed leader's successor takes over at its
-- expiry), else 0, and fence the last term that is over (the fencing counter, or the term
-- before an unannounced holder's).
if ARGV[1] ~= "" then
    local lapse = tonumber(ARGV[2])
    if not lapse or lapse < 2 then
        return redis.error_reply("ERR election_read: bad lapse window")
    end
    redis.call("zadd", KEYS[4], "gt", string.format("%.0f", NOW + lapse), ARGV[1])
    if redis.call("pttl", KEYS[4]) < lapse then
        redis.call("pexpire", KEYS[4], lapse)
    end
end
local first = redis.call("zrangebyscore", KEYS[1], "(" .. AT, "+inf", "withscores", "limit", 0, 1)
if not first[1] then
    return {0, -1, math.min(1, redis.call("zcard", KEYS[3])), redis.call("get", KEYS[7]) or "0"}
end
local left = -1
if first[2] ~= "inf" then
    left = math.max(1, tonumber(first[2]) - NOW)
end
local record = redis.call("hmget", KEYS[10], "term", "id", "since", "info")
local entry = redis.call("hget", KEYS[2], first[1])
local term = entry and string.match(entry, ":(%d+)$")
if record[2] ~= first[1] or not term or term ~= record[1] then
    local over = redis.call("get", KEYS[7]) or "0"
    if term then
        over = string.format("%.0f", tonumber(term) - 1)
    end
    return {0, left, 1, over}
end
return {1, record[2], record[1], record[3], record[4] or "", left}
