-- Appends items to an existing conversation, as one block (nothing can come between them).
-- Returns the conversation object (JSON), or false when there is no such conversation.
--- @include operands
--- @include conversation
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local ttl = ARGV[1]
local items = counted_list(2)

local object = redis.call('HGET', conversation, 'object')
if not object then return false end
append_items(conversation, items_key, order_key, ttl, items)
return object
