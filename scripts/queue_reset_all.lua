-- reset_all for one queue-engine primitive (KEYS as in queue_head.lua, the one part it is
-- sent after: it uses only the clock and `process`, and reads nothing it must trust). Deletes
-- the holders and the queue, keeps the fencing counter (as reset_all keeps a lock's
-- `lock-fence:`), and pushes a wake that is not a token to each holder's and waiter's signal
-- list (or its process's inbox): a blocked waiter asks again, finds its entry gone and joins
-- anew; a token not yet read is withdrawn. Safe to send again.
-- ARGV[1] signal expiry in ms.
-- Returns how many holders with a live lease it removed.
-- The members of zset `key` with their scores; none when it holds another type.
local function members(key)
    local found = redis.pcall("zrange", key, 0, -1, "withscores")
    if found.err then
        return {}
    end
    return found
end

local live = 0
local ids = {}
for _, key in ipairs({KEYS[1], KEYS[3]}) do
    local found = members(key)
    for i = 1, #found, 2 do
        table.insert(ids, found[i])
        if key == KEYS[1] and (found[i + 1] == "inf" or tonumber(found[i + 1]) > NOW) then
            live = live + 1
        end
    end
end
-- Each waiter's own list, or its process's inbox ("@<process id>" ends its id), once.
local lists = {}
for _, id in ipairs(ids) do
    local list = KEYS[8] .. process(id)
    if not lists[list] then
        lists[list] = true
        redis.call("del", list)
        redis.call("lpush", list, "reset")
        redis.call("pexpire", list, ARGV[1])
    end
end
redis.call("del", KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[9])
return live
