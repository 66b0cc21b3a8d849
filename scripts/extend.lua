-- Give our lock a new expiry (python-redis-lock's EXTEND_SCRIPT, in milliseconds).
-- KEYS[1] lock key; ARGV[1] owner id, ARGV[2] new expiry in ms
-- Returns 0 when extended, 1 when the lock is not ours, 2 when it has no expiry.
if redis.call("get", KEYS[1]) ~= ARGV[1] then
    return 1
elseif redis.call("pttl", KEYS[1]) < 0 then
    return 2
end
redis.call("pexpire", KEYS[1], ARGV[2])
return 0
