-- The fair queue engine's head: every queue_*.lua script but queue_beat starts with it (the
-- client sends the texts joined, since a script cannot load another). Then comes the
-- script's fast part when it has one (queue_acquire_fast, queue_release_fast: its common case
-- in the fewest commands), then the engine (queue_reads.lua, queue_engine.lua), then the
-- script's own part.
-- The fast part comes before the engine so that a call it answers does not create the
-- engine's tables and closures; whatever it does not answer it leaves to the engine with
-- nothing written.
-- One primitive's keys, one hash slot:
-- KEYS[1] holders: ZSET id -> lease expiry, server ms ("+inf": none)
-- KEYS[2] held: HASH id -> "<units>:<fencing token>"
-- KEYS[3] queue: ZSET waiter id -> ticket (arrival order)
-- KEYS[4] beats: ZSET process id -> when its waiters lapse, server ms (last heartbeat + lapse
-- window). A waiter id ends in "@<process id>" (16 hex digits): one heartbeat proves every
-- waiter of that process alive. An id without it (an older version's) is its own process.
-- KEYS[5] wants: HASH waiter id -> "<units>:<lease ms>"
-- KEYS[6] ticket counter, KEYS[7] fencing counter: the last token granted (never deleted)
-- KEYS[8] the signal lists' prefix: a process's inbox is the prefix followed by its id; a grant
-- pushes "<fencing token>:<claim expiry, server ms>:<waiter id>" there (an older version's
-- waiter: the token alone, to its own list).
-- KEYS[9] count: "<units>:<fencing counter>:<holders>": the units of every entry in KEYS[1]
-- (expired ones too, until purged), with the fencing counter and KEYS[1]'s size when it was
-- written. It spares each script a read of all holders; `queue_state` checks it against a
-- recount.
-- A script reads and checks all it needs first and writes only after: one stopped by an error
-- keeps the writes it made, and a corrupt key must leave everything as it was. A key's type
-- is checked by the reads that happen anyway, and by a TYPE only for a key a script writes
-- without having read it (`need`): each call costs a script about a microsecond. Time is the
-- server's, never a client's (Redis >= 5 replicates a script's effects, not its calls).

-- Now in server ms, as a number and as the text the reads take (made of TIME's texts: each
-- number printed or parsed costs a script about as much as a command); and TIME's own reply,
-- for the microseconds of a fencing token, which only a grant reads.
local NOW, AT, TIME
do
    TIME = redis.call("time")
    AT = TIME[1] .. string.sub("00000" .. TIME[2], -6, -4)
    NOW = tonumber(AT)
end

-- The process of waiter `id`, whose heartbeat keeps it in the queue.
local function process(id)
    return string.match(id, "^@(%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x)$", -17) or id
end

-- Whether whole-number text `n` is below 9 * 10^15: exact in Lua's doubles, with room for
-- every fencing token after it (the server's clock in microseconds stays below it until the
-- year 2255).
local function in_range(n)
    return #n < 16 or #n == 16 and n < "9000000000000000"
end

-- Whether counter text `n` is a whole number in range.
local function countable(n)
    return in_range(n) and string.find(n, "^%d+$")
end

-- The whole number text `n` plus one, as text: parsing and printing would cost about as much
-- as a command each.
local function plus_one(n)
    local last = string.byte(n, -1)
    if last < 57 then
        return string.sub(n, 1, -2) .. string.char(last + 1)
    end
    return string.format("%.0f", tonumber(n) + 1)
end

-- The fencing token after counter text `fence` (countable, without leading zeros), as text: a
-- hybrid logical clock, the server's time in microseconds, or `fence` + 1 when that is not
-- above it. It grows on a server that kept the counter, whatever its clock does, and past a
-- counter lost (a restart without persistence, a FLUSHALL, a promoted replica that missed the
-- last grants) as long as the server's clock is ahead of the last grant's. Compared as texts
-- (digits of one length compare as their numbers), which costs less than parsing them.
local function next_token(fence)
    local us = TIME[1] .. string.sub("00000" .. TIME[2], -6)
    if #us > #fence or #us == #fence and us > fence then
        return us
    end
    return plus_one(fence)
end

-- The kept count (KEYS[9]) when it is current, else nil: written with the fencing counter
-- `fence` and `size` entries in the holders' ZSET. A writer that does not keep it (an older
-- version of these scripts, a hand) moves one of the two, or leaves no count, or one below
-- a unit a holder: then the engine counts again.
local function kept(count, fence, size)
    local units, at, entries = string.match(count or "", "^(%d+):(%d+):(%d+)$")
    if units and #units <= 15 and at == fence and tonumber(entries) == size then
        units = tonumber(units)
        if units >= size then
            return units
        end
    end
end
