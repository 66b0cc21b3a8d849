-- Sets the lease of what the id holds to ARGV[2] ms from now ("0": no expiry), if it still
-- holds. Safe to send again. ARGV[1] acquisition id.
-- Returns 1 when extended, 0 when the id holds nothing; {-1, k, reason} when KEYS[k] is
-- corrupt, and nothing was written.
local id, lease = ARGV[1], whole(2)
if not lease then
    return redis.error_reply("ERR queue_extend: the lease must be a whole number of ms")
end
local score, bad = read(1, "zscore", KEYS[1], id)
if bad then
    return bad
end
local entry
entry, bad = read(2, "hget", KEYS[2], id)
if bad then
    return bad
end
local expiry = tonumber(score)
if not expiry or expiry <= NOW then
    return 0
end
if not pair(entry) then
    return no_entry(id)
end
if lease > 0 then
    redis.call("zadd", KEYS[1], "xx", int(NOW + lease), id)
else
    redis.call("zadd", KEYS[1], "xx", "+inf", id)
end
return 1
