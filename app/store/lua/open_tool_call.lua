-- Everything a tool task does first: read the record, and claim the call's execution unless
-- its result is stored already, the response is no longer active, or another delivery holds
-- the claim. A claim lapses after `claim_ms` unless its holder renews it (renew_lease.lua)
-- and puts the call under the sweeper's watch (`running`, until `deadline`). Taking the claim
-- starts the call: with `counts_start`, that start is counted (per response and call, however
-- the call was delivered).
-- Returns {the start count (0: none counted, or not claimed), the claim (0 held elsewhere,
-- 1 claimed, 2 result stored, 3 response inactive or gone), the record's fields}.
--- @include operands
local record = KEYS[1]
local results = KEYS[2]
local claim = KEYS[3]
local starts = KEYS[4]
local running = KEYS[5]
local token = ARGV[1]
local claim_ms = ARGV[2]
local deadline = ARGV[3]
local starts_ttl = ARGV[4]
local counts_start = ARGV[5]
local active_statuses = ARGV[6]
local call_id = ARGV[7]
local member = ARGV[8]
local run_field = ARGV[9]
local run_stamp = ARGV[10]

local fields = redis.call(
  'HMGET', record, 'object', 'ver', 'turn', 'extra', 'status', 'history', 'owner'
)
if redis.call('HEXISTS', results, call_id) == 1 then return {0, 2, fields} end
local status = fields[5]
if not status or not has_status(active_statuses, status) then return {0, 3, fields} end
-- A claim that holds this call's own token was taken by this very call, whose reply was lost
-- (Redis stopped; app/store/once.py): claimed, and its start counted already.
local is_replay = false
if not redis.call('SET', claim, token, 'NX', 'PX', claim_ms) then
  if redis.call('GET', claim) ~= token then return {0, 0, fields} end
  is_replay = true
end
redis.call('ZADD', running, deadline, member)
-- Which worker runs the call, and when its message was sent and taken (the console's timeline).
if run_stamp ~= '' then redis.call('HSET', record, run_field, run_stamp) end
local start_count = 0
if counts_start == '1' and is_replay then
  start_count = tonumber(redis.call('GET', starts) or '0')
elseif counts_start == '1' then
  start_count = redis.call('INCR', starts)
  redis.call('EXPIRE', starts, starts_ttl)
end
return {start_count, 1, fields}
