-- Stores a claimed call's result while the response is active (a result that arrives after a
-- cancel is discarded), and gives the claim back either way (the sweeper's watch of the call
-- ends with it). Once the result is stored, the call's count of starts (open_tool_call.lua) goes:
-- the call never starts again, and the count would outlive a `store: false` response.
-- Returns {1 when stored (by this call, or by its first run), the status ('' when the record is
-- gone)}.
--- @include operands
local record = KEYS[1]
local results = KEYS[2]
local claim = KEYS[3]
local running = KEYS[4]
local starts = KEYS[5]
local result_json = ARGV[1]
local ttl = ARGV[2]
local token = ARGV[3]
local active_statuses = ARGV[4]
local call_id = ARGV[5]
local member = ARGV[6]
local end_field = ARGV[7]

local status = redis.call('HGET', record, 'status') or ''
local stored = 0
if status ~= '' and has_status(active_statuses, status) then
  stored = redis.call('HSETNX', results, call_id, result_json)
  -- The same result stored already: this very call, replayed after its reply was lost
  -- (app/store/once.py); the claim it held is gone with its first run.
  if stored == 0 and redis.call('HGET', results, call_id) == result_json then stored = 1 end
  redis.call('EXPIRE', results, ttl)
  -- When the call ended, by Redis's clock in epoch seconds (the console's timeline).
  if stored == 1 then
    redis.call('DEL', starts)
    local now = redis.call('TIME')
    redis.call('HSETNX', record, end_field, now[1] .. '.' .. string.format('%06d', now[2]))
  end
end
if redis.call('GET', claim) == token then
  redis.call('DEL', claim)
  redis.call('ZREM', running, member)
end
return {stored, status}
