-- Appends items to an existing conversation, as one block (nothing can come between them),
-- unless the conversation holds the id of one of them already: then nothing is appended.
-- Returns {the conversation object (JSON), 0}, {the object, the position of the first item
-- whose id it holds} when refused, {false, 0} when there is no such conversation, or
-- {the object, -2} when blocks wait on `pending` (write.lua; nothing appended: the caller
-- appends them first, append_block.lua, and calls again).
--- @include operands
--- @include conversation
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local history = KEYS[4]
local generation = KEYS[5]
local pending = KEYS[6]
local ttl = ARGV[1]
local history_ttl = ARGV[2]
local items = counted_list(3)

local object = redis.call('HGET', conversation, 'object')
if not object then return {false, 0} end
if redis.call('EXISTS', pending) == 1 then return {object, -2} end
local held = first_held(items_key, items)
if held > 0 then return {object, held} end
append_items(conversation, items_key, order_key, ttl, items, history, generation, history_ttl)
return {object, 0}
