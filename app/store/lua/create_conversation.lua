-- Creates a conversation with its first items (none is fine).
-- Returns 1, or 0 when a conversation of that id exists already.
--- @include operands
--- @include conversation
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local object = ARGV[1]
local ttl = ARGV[2]
local items = counted_list(3)

if redis.call('EXISTS', conversation) == 1 then return 0 end
redis.call('HSET', conversation, 'object', object, 'next', 0)
append_items(conversation, items_key, order_key, ttl, items)
return 1
