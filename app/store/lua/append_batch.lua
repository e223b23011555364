-- Appends a batch of items to the list `target`, only when it holds `before` items, so a replay
-- after a lost reply pushes nothing twice: many items go in a batch a call, and Redis serves
-- everyone else between two. Used to stage a create's input items on a list of their own,
-- before its create renames the list into place (write.lua), and to append the rest of a long
-- block to a chain's history list (app/store/history.py). The list then lives `ttl` seconds.
-- Returns the list's length after the call.
--- @include operands
local target = KEYS[1]
local before = ARGV[1]
local ttl = ARGV[2]
local items = counted_list(3)

local length = redis.call('LLEN', target)
if length ~= tonumber(before) then return length end
length = redis.call('RPUSH', target, unpack(items))
redis.call('EXPIRE', target, ttl)
return length
