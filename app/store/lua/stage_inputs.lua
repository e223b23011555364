-- Stages a batch of a new response's input items on a list of their own, before its create
-- renames the list into place (write.lua): a create of many items takes Redis a batch at a
-- time, not all its items in one call. The batch goes on only when the list holds `before`
-- items, so a replay after a lost reply pushes nothing twice.
-- Returns the list's length after the call.
--- @include operands
local staged = KEYS[1]
local before = ARGV[1]
local ttl = ARGV[2]
local items = counted_list(3)

local length = redis.call('LLEN', staged)
if length ~= tonumber(before) then return length end
length = redis.call('RPUSH', staged, unpack(items))
redis.call('EXPIRE', staged, ttl)
return length
