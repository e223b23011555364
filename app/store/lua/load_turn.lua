-- A run's first step, in one round trip: take the response's lease (optional), count the
-- turn's start (optional), and read the turn.
--
-- The lease is taken with SET NX (two runs of one turn never overlap) and puts the response
-- under the sweeper's watch until `lease_deadline`. When the lease is held elsewhere nothing
-- is read and nothing counted. `starts` counts the runs of one turn (per response and turn,
-- whatever task delivered them) that took the lease; a run that gives its lease back resets
-- it (release_lease.lua), so it counts the runs that died one after another. The read: the
-- record, its input items, and where the turn's events begin — the last sequence number
-- when the turn first started (a re-run finds the mark of the first run). The
-- mark is only set on a record that exists: a deleted one is not brought back as a stub. A
-- record in a status the start moves from is started on the way: the object its creator stored
-- for that moment (`started`) becomes the object, with the start event after the mark.
-- Taking the lease records its token as the record's `holder` (app/store/fence.py), and the
-- run's task stamp (`run_stamp`, app/telemetry/stamps.py) goes to `run_field`.
--
-- `steered` is there when a WebSocket client steered the response (app/socket_session.py).
--
-- The input items come in the reply when there are at most `inline_inputs` of them; else their
-- count does, and the caller reads the list with a plain LRANGE (app/store/turns.py): a list
-- read into a script costs Redis some twenty times a plain read (each item a Lua string),
-- time in which every client of the fleet waits. The list never changes once created.
--
-- Returns {1 when the lease was taken (or none was asked for), the start count (0: none
-- counted), and only when taken {record fields, inputs (or their count), the mark, 1 when a
-- re-run, 1 when steered}}.
--- @include operands
--- @include events
local record = KEYS[1]
local inputs_key = KEYS[2]
local sequence = KEYS[3]
local stream = KEYS[4]
local lease = KEYS[5]
local active = KEYS[6]
local starts = KEYS[7]
local steered = KEYS[8]
local turn_field = ARGV[1]
local channel = ARGV[2]
local maxlen = ARGV[3]
local ttl = ARGV[4]
local start_sources = ARGV[5]
local start_target = ARGV[6]
local start_event_type = ARGV[7]
local lease_token = ARGV[8]
local lease_ms = ARGV[9]
local lease_deadline = ARGV[10]
local response_id = ARGV[11]
local counts_start = ARGV[12]
local run_field = ARGV[13]
local run_stamp = ARGV[14]
local inline_inputs = ARGV[15]

local function start(fields)
  local started = fields[6]
  redis.call('HSET', record, 'status', start_target, 'object', started)
  redis.call('HDEL', record, 'started')
  fields[1] = started
  fields[2] = redis.call('HINCRBY', record, 'ver', 1)
  local lines = {}
  -- the start event, a response event of the started object (events.lua composes it)
  append_all(sequence, stream, maxlen, ttl, {start_event_type}, {''}, lines, started)
  publish(channel, lines)
end

local function load_turn()
  local fields = redis.call(
    'HMGET', record, 'object', 'ver', 'turn', 'extra', 'status', 'started', 'history', 'owner')
  local inputs = redis.call('LLEN', inputs_key)
  if inputs <= tonumber(inline_inputs) then inputs = redis.call('LRANGE', inputs_key, 0, -1) end
  local read = {fields[1], fields[2], fields[3], fields[4], fields[7], fields[8]}
  if not fields[1] then return {read, inputs, -1, 0, 0} end
  -- Which worker runs the turn, and when its message was sent and taken (the last run's).
  if run_stamp ~= '' then redis.call('HSET', record, run_field, run_stamp) end
  -- The run's writes are fenced with its token; `holder` tells them whether another run took
  -- the lease since (fence.lua).
  if lease_token ~= '' then redis.call('HSET', record, 'holder', lease_token) end
  local raw = redis.call('GET', sequence)
  local last = -1
  if raw then last = tonumber(raw) - 1 end
  local mark, rerun = last, 0
  if redis.call('HSETNX', record, turn_field, last) == 0 then
    mark, rerun = tonumber(redis.call('HGET', record, turn_field)) or last, 1
  end
  if has_status(start_sources, fields[5]) and fields[6] then
    start(fields)
    read[1], read[2] = fields[1], fields[2]
  end
  return {read, inputs, mark, rerun, redis.call('EXISTS', steered)}
end

-- A lease that holds this call's own token was taken by this very call, whose reply was lost
-- (Redis stopped; app/store/once.py): taken, and its start counted already.
local is_replay = false
if lease_token ~= '' then
  if not redis.call('SET', lease, lease_token, 'NX', 'PX', lease_ms) then
    if redis.call('GET', lease) ~= lease_token then return {0, 0} end
    is_replay = true
  end
  redis.call('ZADD', active, lease_deadline, response_id)
end
local start_count = 0
if counts_start == '1' and is_replay then
  start_count = tonumber(redis.call('GET', starts) or '0')
elseif counts_start == '1' then
  start_count = redis.call('INCR', starts)
  redis.call('EXPIRE', starts, ttl)
end
return {1, start_count, load_turn()}
