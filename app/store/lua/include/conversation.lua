-- Appending items to a conversation (included by the scripts that add items).

-- The id of an item (JSON), or nil when it has none (none should come).
local function id_of(item)
  local ok, decoded = pcall(cjson.decode, item)
  if ok and type(decoded) == 'table' and type(decoded['id']) == 'string' then
    return decoded['id']
  end
  return nil
end

-- The position in `items` of the first item whose id the conversation holds already (0: none).
local function first_held(items_key, items)
  for i, item in ipairs(items) do
    local id = id_of(item)
    if id and redis.call('HEXISTS', items_key, id) == 1 then return i end
  end
  return 0
end

-- Appends `items` (JSON strings, each with an `id`; one without is known by its position)
-- after the conversation's last item, in order, and renews the conversation's time to live.
-- An id is never taken twice: an item whose id the conversation holds already is not stored,
-- and the one there keeps its place and content. The scripts a client's request runs refuse
-- such a block first (`first_held`); a response's final write cannot be refused, and meets one
-- only when an id of the response's input was added after the response was created.
-- `history` (`Keys.conversation_history`, app/store/history.py) holds the same items in the
-- same order, as a history list, when its `generation` key exists (a conversation made before
-- it has none): the items added are pushed there too, and both live `history_ttl` from now.
-- Returns how many items were added.
local function append_items(conversation, items_key, order_key, ttl, items, history, generation,
                            history_ttl)
  local added = {}
  for _, item in ipairs(items) do
    local position = redis.call('HINCRBY', conversation, 'next', 1)
    local id = id_of(item) or ('item_' .. position)
    if redis.call('HSETNX', items_key, id, item) == 1 then
      redis.call('ZADD', order_key, position, id)
      added[#added + 1] = item
    end
  end
  redis.call('EXPIRE', conversation, ttl)
  if redis.call('EXISTS', items_key) == 1 then
    redis.call('EXPIRE', items_key, ttl)
    redis.call('EXPIRE', order_key, ttl)
  end
  if redis.call('EXISTS', generation) == 1 then
    for i = 1, #added, 1000 do
      redis.call('RPUSH', history, unpack(added, i, math.min(i + 999, #added)))
    end
    redis.call('EXPIRE', history, history_ttl)
    redis.call('EXPIRE', generation, history_ttl)
  end
  return #added
end

-- Moves a conversation's history list (`history`) on to its next generation, before the list
-- changes otherwise than by an append (a delete, or the list built afresh): the list as it is
-- becomes `snapshot`, the list of the generation that ends, when a reference into it was made
-- since the last move (`referenced`, set as a new response reads the conversation's head), so
-- the reference reads the items it was made with (app/store/history.py). Redis copies it
-- itself; nothing is read into the script.
local function next_generation(history, generation, snapshot, referenced, history_ttl)
  if redis.call('DEL', referenced) == 1 then
    redis.call('COPY', history, snapshot, 'REPLACE')
    redis.call('EXPIRE', snapshot, history_ttl)
  end
  redis.call('INCR', generation)
  redis.call('EXPIRE', generation, history_ttl)
end
