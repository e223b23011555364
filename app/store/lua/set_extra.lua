-- Replaces the request's `extra` fields of a record (the model's plan) for a run; refused when
-- the run's lease (`lease_token`, "": none) is held by another run (fence.lua). A deleted
-- record is not brought back as a stub.
-- Returns {1 when written, -2 when the record is gone or -4 when the lease is another run's,
-- the status}.
--- @include fence
local record = KEYS[1]
local lease = KEYS[2]
local active = KEYS[3]
local extra = ARGV[1]
local lease_token = ARGV[2]
local lease_ms = ARGV[3]
local lease_deadline = ARGV[4]
local response_id = ARGV[5]

local status = redis.call('HGET', record, 'status')
if not status then return {-2, ''} end
if not holds_lease(record, lease, active, lease_token, lease_ms, lease_deadline, response_id) then
  return {-4, status}
end
redis.call('HSET', record, 'extra', extra)
return {1, status}
