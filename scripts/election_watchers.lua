-- Leader election (an election is the queue engine's primitive of capacity 1, whose holder is
-- the leader), after queue_head.lua. KEYS as there, and KEYS[10] the leader's record: a HASH
-- of its `term` (its grant's fencing token), `id`, `since` (server ms) and `info`, written
-- by the leader itself once granted. It is kept beside the fencing counter, and trusted only
-- while its id holds that term: a crashed leader's record says nothing once its lease ends.

-- Tells every process that watches the election (a live entry in the heartbeats, KEYS[4])
-- that the leader changed, with `news`, in its inbox, kept as long as the process's
-- heartbeat: "watch:<term>:<since>:<lease ms left, -1: none>:<id's length>:<id><info>" for a
-- new leader, "watch:<fencing counter>" when nobody leads. An older version's waiter (an id
-- that is not a process id) has no inbox to be told in.
local function tell_watchers(news)
    local live = redis.call("zrangebyscore", KEYS[4], "(" .. AT, "+inf", "withscores")
    for i = 1, #live, 2 do
        local of = live[i]
        if #of == 16 and string.find(of, "^%x+$") then
            local inbox = KEYS[8] .. of
            redis.call("lpush", inbox, news)
            redis.call("pexpire", inbox, string.format("%.0f", math.max(1, tonumber(live[i + 1]) - NOW)))
        end
    end
end
