-- Removes one item of a conversation.
-- Its items' history list (`history`, conversation.lua) loses the item too, after it moved on
-- from generation `expected_generation` (the one the caller read; `snapshot` is that
-- generation's list: `next_generation`). Deletes with no response created between them keep no
-- list.
-- Returns {the conversation object (JSON), 1 removed / 0 no such item}, {false, 0} when there
-- is no such conversation, {the object, -1} when the generation is not the one expected
-- (nothing removed: the caller reads it again), or {the object, -2} when blocks wait on
-- `pending` (write.lua; nothing removed: the caller appends them first and calls again).
--- @include conversation
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local history = KEYS[4]
local generation = KEYS[5]
local snapshot = KEYS[6]
local referenced = KEYS[7]
local pending = KEYS[8]
local item_id = ARGV[1]
local expected_generation = ARGV[2]
local history_ttl = ARGV[3]

local object = redis.call('HGET', conversation, 'object')
if not object then return {false, 0} end
if redis.call('EXISTS', pending) == 1 then return {object, -2} end
local item = redis.call('HGET', items_key, item_id)
if item and redis.call('EXISTS', generation) == 1 then
  if redis.call('GET', generation) ~= expected_generation then return {object, -1} end
  next_generation(history, generation, snapshot, referenced, history_ttl)
  redis.call('LREM', history, 1, item)
end
redis.call('ZREM', order_key, item_id)
return {object, redis.call('HDEL', items_key, item_id)}
