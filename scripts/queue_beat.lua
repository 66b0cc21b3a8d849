-- A process's heartbeat: proves all its waiters in this primitive's queue alive for ARGV[2]
-- ms more (KEYS as in queue_head.lua, of which it needs only the beats and the inboxes'
-- prefix; it runs alone, to stay cheap: one per process and primitive every half window).
-- ARGV[1] process id. Safe to send again.
-- Returns the server's time (ms) when the process was live, which dates the claim expiries
-- of the grants in its inbox; 0 when it had lapsed (or never joined): then nothing is
-- written, and the process makes its waiters join again.
local time = redis.call("time")
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local beat = redis.pcall("zscore", KEYS[4], ARGV[1])
-- A beats key of another type is the engine scripts' to report.
if type(beat) ~= "string" or tonumber(beat) <= now then
    return 0
end
local lapse = tonumber(ARGV[2])
if not lapse or lapse < 2 then
    return redis.error_reply("ERR queue_beat: bad lapse window")
end
redis.call("zadd", KEYS[4], "gt", string.format("%.0f", now + lapse), ARGV[1])
-- The beats outlive none of the heartbeats they hold, and no key is left behind.
if redis.call("pttl", KEYS[4]) < lapse then
    redis.call("pexpire", KEYS[4], lapse)
end
-- Grants not yet read last as long as the waiters they are for.
redis.call("pexpire", KEYS[8] .. ARGV[1], lapse)
return now
