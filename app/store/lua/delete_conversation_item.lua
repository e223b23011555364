-- Removes one item of a conversation.
-- Returns {the conversation object (JSON), 1 removed / 0 no such item}, or {false, 0} when
-- there is no such conversation.
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local item_id = ARGV[1]

local object = redis.call('HGET', conversation, 'object')
if not object then return {false, 0} end
redis.call('ZREM', order_key, item_id)
return {object, redis.call('HDEL', items_key, item_id)}
