-- Appends events to an active response's log and publishes them; refused, with nothing
-- written, once the response is no longer active (so nothing is emitted after a cancel), and
-- when the emitting run's lease (`lease_token`, "": none) is held by another run (fence.lua).
-- A call its writer already made (`once_token` in the writer's field `once_field`, once.lua:
-- a replay after a lost reply) returns that call's result and appends nothing.
-- Returns {the last sequence number, the status}; the number is -2 when the record is gone,
-- -1 when the response is not active and -3 when the lease is another run's.
--- @include operands
--- @include events
--- @include fence
--- @include once
local record = KEYS[1]
local sequence = KEYS[2]
local stream = KEYS[3]
local lease = KEYS[4]
local active = KEYS[5]
local channel = ARGV[1]
local maxlen = ARGV[2]
local ttl = ARGV[3]
local active_statuses = ARGV[4]
local lease_token = ARGV[5]
local lease_ms = ARGV[6]
local lease_deadline = ARGV[7]
local response_id = ARGV[8]
local once_field = ARGV[9]
local once_token = ARGV[10]
local event_types, at = counted_list(11)
local event_json_prefixes = counted_list(at)

local status = redis.call('HGET', record, 'status')
if not status then return {-2, ''} end
local first = first_result(record, once_field, once_token)
if first then return first end
if not has_status(active_statuses, status) then return {-1, status} end
if not holds_lease(record, lease, active, lease_token, lease_ms, lease_deadline, response_id) then
  return {-3, status}
end
local lines = {}
local last = append_all(sequence, stream, maxlen, ttl, event_types, event_json_prefixes, lines)
publish(channel, lines)
return remember(record, once_field, once_token, {last, status})
