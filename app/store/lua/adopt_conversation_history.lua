-- Makes `staged` (a conversation's items, in order, as read with the conversation's `next`
-- counter at `expected_next` and its `order` holding `expected_count` items) the
-- conversation's history list (conversation.lua), when nothing changed the conversation since:
-- a conversation made before it had such a list, or whose list missed a change (an older
-- fleet's script). A list there already is the list of `expected_generation`, which must not
-- have moved, and moves on (`next_generation`: `snapshot` is that generation's list). The list
-- is renamed into place by Redis itself, never read into the script.
-- Returns 1, or 0 when the conversation changed (`staged` is dropped).
--- @include conversation
local conversation = KEYS[1]
local order_key = KEYS[2]
local history = KEYS[3]
local generation = KEYS[4]
local staged = KEYS[5]
local snapshot = KEYS[6]
local referenced = KEYS[7]
local expected_next = ARGV[1]
local expected_count = ARGV[2]
local expected_generation = ARGV[3]
local history_ttl = ARGV[4]

local function changed()
  redis.call('DEL', staged)
  return 0
end

if redis.call('HGET', conversation, 'next') ~= expected_next then return changed() end
if redis.call('ZCARD', order_key) ~= tonumber(expected_count) then return changed() end
local now = redis.call('GET', generation)
if (now or '') ~= expected_generation then return changed() end
if now then
  next_generation(history, generation, snapshot, referenced, history_ttl)
else
  redis.call('SET', generation, 0)
end
if redis.call('EXISTS', staged) == 1 then
  redis.call('RENAME', staged, history)
else
  redis.call('DEL', history)
end
redis.call('EXPIRE', history, history_ttl)
redis.call('EXPIRE', generation, history_ttl)
return 1
