-- Gives back what the id holds and takes it out of the queue, and hands the units on: a
-- holder's release, and a waiter's leaving (its deadline, a cancel) with any grant that came
-- meanwhile. Safe to send again.
-- ARGV[1] acquisition id, ARGV[2] capacity.
-- Returns 1 when the id held (and gave back), 0 when it held nothing (a waiter's grant had not
-- come; a holder's lease expired, or it was reset); {-1, k, reason} when KEYS[k] is corrupt,
-- and nothing was written.
local id = ARGV[1]
local s, capacity = start(2)
if not s then
    return capacity
end
local held, bad = holding(id)
if bad then
    return bad
end
-- A holder is in no queue: it left it when granted.
if held then
    drop(s, id, held)
else
    -- A live waiter leaving: the one behind it is woken (`apply`).
    if live_beat(s, id) then
        s.leaving = id
    end
    forget(s, id)
end
return finish(s, capacity, held and 1 or 0)
