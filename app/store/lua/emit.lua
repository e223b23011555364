-- Appends events to an active response's log and publishes them; refused, with nothing
-- written, once the response is no longer active (so nothing is emitted after a cancel).
-- Returns {the last sequence number, the status}; the number is -2 when the record is gone
-- and -1 when the response is not active.
--- @include operands
--- @include events
local record = KEYS[1]
local sequence = KEYS[2]
local stream = KEYS[3]
local channel = ARGV[1]
local maxlen = ARGV[2]
local ttl = ARGV[3]
local active_statuses = ARGV[4]
local event_types, at = counted_list(5)
local event_json_prefixes = counted_list(at)

local status = redis.call('HGET', record, 'status')
if not status then return {-2, ''} end
if not has_status(active_statuses, status) then return {-1, status} end
local lines = {}
local last = append_all(sequence, stream, maxlen, ttl, event_types, event_json_prefixes, lines)
publish(channel, lines)
return {last, status}
