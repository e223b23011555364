-- Appending items to a conversation (included by the scripts that add items).

-- The id of an item (JSON); an item without one (none should come) is known by its position.
local function item_id(item, position)
  local ok, decoded = pcall(cjson.decode, item)
  if ok and type(decoded) == 'table' and type(decoded['id']) == 'string' then
    return decoded['id']
  end
  return 'item_' .. position
end

-- Appends `items` (JSON strings, each with an `id`) after the conversation's last item, in
-- order, and renews the conversation's time to live. An item whose id the conversation holds
-- already keeps its place and takes the new content. Returns how many items were added.
local function append_items(conversation, items_key, order_key, ttl, items)
  local added = 0
  for _, item in ipairs(items) do
    local position = redis.call('HINCRBY', conversation, 'next', 1)
    local id = item_id(item, position)
    if redis.call('HSET', items_key, id, item) == 1 then
      redis.call('ZADD', order_key, position, id)
      added = added + 1
    end
  end
  redis.call('EXPIRE', conversation, ttl)
  if redis.call('EXISTS', items_key) == 1 then
    redis.call('EXPIRE', items_key, ttl)
    redis.call('EXPIRE', order_key, ttl)
  end
  return added
end
