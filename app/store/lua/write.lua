-- The compare-and-set write of a response record, with the events that go with it.
-- Checks the record's status (one of the transition's sources; for a create: no record yet)
-- and optionally its version, then writes the record and emits the events in the same step,
-- so `response.completed` exists exactly when the stored status says `completed`. A create
-- stores the input items too (or renames the list they were staged on, `is_staged`:
-- append_batch.lua), and with a `watch_until` puts the response under the sweeper's
-- watch until then (its first turn must start by then). A terminal write sets the inputs' time to live, frees the
-- response's lease (no run of it is needed any more) with the count of starts of the turn a run
-- was on (`starts`, load_turn.lua) and a client's steer (`steered`), and publishes the end line. A run's
-- write passes its lease token (`lease_token`, "": none) and is refused when another run holds
-- the lease (fence.lua). A terminal write of a response that belongs to a conversation and
-- `appends_to_conversation` appends its input items and `conversation_items` (its output) to
-- the conversation as one block (conversation.lua: and to its items' history list,
-- `conversation_history`, with its `conversation_generation`), unless the conversation is gone.
-- A block of more than `inline_items` items, or one that comes while others wait, is not
-- appended here but queued: copied to `conversation_block` (by Redis itself, never read into
-- the script) and put last on `conversation_pending`, where append_block.lua appends it, a batch
-- a call, before anyone reads or changes the conversation (app/store/conversations.py).
-- A create records the response's owner (`owner`, "": none) and its history's reference
-- (`history`, "": none). A terminal write that `is_forgotten` (a `store: false` response's)
-- gives its tool results and the history list its create began the record's time to live: what
-- the response was given and what its tools answered go with it. No other response can use
-- that list: none can continue a `store: false` response through the store.
-- A call its writer already made (`once_token` in the writer's field `once_field`, once.lua:
-- a replay after a lost reply) returns that call's result, writing nothing.
-- Returns {the new version, the new status, the last sequence number, 1 when a block was
-- queued (else 0)}, or when refused
-- {-1 (status), -2 (no record), -3 (version moved) or -4 (lease lost), the stored status, -1}.
--- @include operands
--- @include events
--- @include fence
--- @include conversation
--- @include once
local record = KEYS[1]
local sequence = KEYS[2]
local stream = KEYS[3]
local inputs_key = KEYS[4]
local lease = KEYS[5]
local active = KEYS[6]
local conversation = KEYS[7]
local conversation_items_key = KEYS[8]
local conversation_order = KEYS[9]
local results = KEYS[10]
local own_history = KEYS[11]
local staged_inputs = KEYS[12]
local conversation_history = KEYS[13]
local conversation_generation = KEYS[14]
local conversation_pending = KEYS[15]
local conversation_block = KEYS[16]
local starts = KEYS[17]
local steered = KEYS[18]
local channel = ARGV[1]
local maxlen = ARGV[2]
local ttl = ARGV[3]
local is_create = ARGV[4]
local source_statuses = ARGV[5]
local expected_version = ARGV[6]
local new_status = ARGV[7]
local object = ARGV[8]
local turn = ARGV[9]
local extra = ARGV[10]
local started = ARGV[11]
local is_terminal = ARGV[12]
local end_line = ARGV[13]
local response_id = ARGV[14]
local lease_token = ARGV[15]
local lease_ms = ARGV[16]
local lease_deadline = ARGV[17]
local appends_to_conversation = ARGV[18]
local conversation_ttl = ARGV[19]
local owner = ARGV[20]
local once_field = ARGV[21]
local once_token = ARGV[22]
local watch_until = ARGV[23]
local history = ARGV[24]
local is_forgotten = ARGV[25]
local is_staged = ARGV[26]
local history_ttl = ARGV[27]
local inline_items = ARGV[28]
local inputs, at = counted_list(29)
local event_types, at = counted_list(at)
local event_json_prefixes, at = counted_list(at)
local conversation_items = counted_list(at)

local status = redis.call('HGET', record, 'status')
if status then
  local first = first_result(record, once_field, once_token)
  if first then return first end
end
if is_create == '1' then
  if status then return {-1, status, -1} end
else
  if not status then return {-2, '', -1} end
  if not has_status(source_statuses, status) then return {-1, status, -1} end
  if expected_version ~= '' and redis.call('HGET', record, 'ver') ~= expected_version then
    return {-3, status, -1}
  end
end
if not holds_lease(record, lease, active, lease_token, lease_ms, lease_deadline, response_id) then
  return {-4, status, -1}
end
if is_create == '1' then
  redis.call('DEL', inputs_key)
  if is_staged == '1' then
    redis.call('RENAME', staged_inputs, inputs_key)
  end
  for i = 1, #inputs, 1000 do
    redis.call('RPUSH', inputs_key, unpack(inputs, i, math.min(i + 999, #inputs)))
  end
  redis.call('EXPIRE', inputs_key, ttl)
  -- the tenant that created the response: nothing ever changes it (app.ownership)
  if owner ~= '' then redis.call('HSET', record, 'owner', owner) end
  -- what comes before the input: a reference into the chain's list (app/store/history.py)
  if history ~= '' then redis.call('HSET', record, 'history', history) end
  if watch_until ~= '' then redis.call('ZADD', active, 'NX', watch_until, response_id) end
end
if extra ~= '' then redis.call('HSET', record, 'extra', extra) end
-- `started` (the object as the first run starts it) lives from the create to the first write.
if started ~= '' then
  redis.call('HSET', record, 'started', started)
else
  redis.call('HDEL', record, 'started')
end
redis.call('HSET', record, 'status', new_status, 'object', object)
local ver = redis.call('HINCRBY', record, 'ver', 1)
if turn ~= '' then redis.call('HSET', record, 'turn', turn) end
redis.call('EXPIRE', record, ttl)
local lines = {}
local queued = 0
local last = append_all(
  sequence, stream, maxlen, ttl, event_types, event_json_prefixes, lines, object)
if is_terminal == '1' then
  redis.call('EXPIRE', inputs_key, ttl)
  redis.call('DEL', lease, starts, steered)
  redis.call('ZREM', active, response_id)
  add_line(lines, end_line)
  if is_forgotten == '1' then
    redis.call('EXPIRE', results, ttl)
    redis.call('EXPIRE', own_history, ttl)
  end
  if appends_to_conversation == '1' and redis.call('EXISTS', conversation) == 1 then
    local size = redis.call('LLEN', inputs_key) + #conversation_items
    if size > tonumber(inline_items) or redis.call('EXISTS', conversation_pending) == 1 then
      redis.call('COPY', inputs_key, conversation_block, 'REPLACE')
      for i = 1, #conversation_items, 1000 do
        redis.call('RPUSH', conversation_block,
                   unpack(conversation_items, i, math.min(i + 999, #conversation_items)))
      end
      if size > 0 then
        redis.call('EXPIRE', conversation_block, conversation_ttl)
        redis.call('RPUSH', conversation_pending, conversation_block)
        redis.call('EXPIRE', conversation_pending, conversation_ttl)
        queued = 1
      end
    else
      local block = redis.call('LRANGE', inputs_key, 0, -1)
      for _, item in ipairs(conversation_items) do block[#block + 1] = item end
      append_items(conversation, conversation_items_key, conversation_order, conversation_ttl,
                   block, conversation_history, conversation_generation, history_ttl)
    end
  end
end
publish(channel, lines)
return remember(record, once_field, once_token, {ver, new_status, last, queued})
