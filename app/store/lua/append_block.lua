-- Appends the next `count` items of the first block waiting on a conversation to it
-- (conversation.lua's `append_items`): `pending` lists the blocks (each a list of items, queued
-- by a response's final write, write.lua) in the order they are to follow each other, and
-- `block` must be its first (else nothing is done). A block appended to its end leaves
-- `pending`. When the conversation is gone, the block is dropped.
-- Returns the first block waiting now (its key), or false when none waits.
--- @include conversation
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local history = KEYS[4]
local generation = KEYS[5]
local pending = KEYS[6]
local block = KEYS[7]
local count = ARGV[1]
local ttl = ARGV[2]
local history_ttl = ARGV[3]

local first = redis.call('LINDEX', pending, 0)
if first ~= block then return first end
if redis.call('EXISTS', conversation) == 0 then
  redis.call('DEL', block)
else
  local items = redis.call('LPOP', block, count)
  if items then
    append_items(conversation, items_key, order_key, ttl, items, history, generation, history_ttl)
  end
end
if redis.call('EXISTS', block) == 0 then redis.call('LPOP', pending) end
return redis.call('LINDEX', pending, 0)
