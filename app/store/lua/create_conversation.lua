-- Creates a conversation with its first items (none is fine), and its items' history list
-- (generation 0: conversation.lua).
-- Returns 1, or 0 when a conversation of that id exists already.
--- @include operands
--- @include conversation
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local history = KEYS[4]
local generation = KEYS[5]
local object = ARGV[1]
local ttl = ARGV[2]
local history_ttl = ARGV[3]
local items = counted_list(4)

if redis.call('EXISTS', conversation) == 1 then return 0 end
redis.call('HSET', conversation, 'object', object, 'next', 0)
redis.call('DEL', history)
redis.call('SET', generation, 0, 'EX', history_ttl)
append_items(conversation, items_key, order_key, ttl, items, history, generation, history_ttl)
return 1
