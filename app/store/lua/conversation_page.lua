-- A page of a conversation's items, in one round trip whatever the conversation's length.
-- `after`: the id of the item the page starts after ("": from the start); `limit` 0: all.
-- Returns {the conversation object (JSON), has_more (0/1), item JSON...}, or {false} when there
-- is no such conversation, {object, -1} when it holds no item `after`, or {object, -2} when
-- blocks wait on `pending` (write.lua: the caller appends them first and calls again).
local conversation = KEYS[1]
local items_key = KEYS[2]
local order_key = KEYS[3]
local pending = KEYS[4]
local after = ARGV[1]
local is_descending = ARGV[2]
local limit = ARGV[3]

local object = redis.call('HGET', conversation, 'object')
if not object then return {false} end
if redis.call('EXISTS', pending) == 1 then return {object, -2} end
local count = tonumber(limit)
local bound = is_descending == '1' and '+inf' or '-inf'
if after ~= '' then
  local position = redis.call('ZSCORE', order_key, after)
  if not position then return {object, -1} end
  bound = '(' .. position
end
local ids
local page = count == 0 and {} or {'LIMIT', 0, count + 1}
if is_descending == '1' then
  ids = redis.call('ZREVRANGEBYSCORE', order_key, bound, '-inf', unpack(page))
else
  ids = redis.call('ZRANGEBYSCORE', order_key, bound, '+inf', unpack(page))
end
local has_more = 0
if count > 0 and #ids > count then
  has_more = 1
  ids[#ids] = nil
end
local reply = {object, has_more}
if #ids > 0 then
  local items = redis.call('HMGET', items_key, unpack(ids))
  for i = 1, #items do reply[#reply + 1] = items[i] end
end
return reply
