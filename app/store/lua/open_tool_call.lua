-- Everything a tool task does first: count its delivery (optional), read the record, and claim
-- the call's execution unless its result is stored already, the response is no longer active,
-- or another delivery holds the claim (which lapses after `claim_ms`).
-- Returns {the delivery count (0: none counted), the claim (0 held elsewhere, 1 claimed,
-- 2 result stored, 3 response inactive or gone), the record's fields}.
--- @include operands
local record = KEYS[1]
local results = KEYS[2]
local claim = KEYS[3]
local deliveries = KEYS[4]
local token = ARGV[1]
local claim_ms = ARGV[2]
local deliveries_ttl = ARGV[3]
local counts_delivery = ARGV[4]
local active_statuses = ARGV[5]
local call_id = ARGV[6]

local delivery_count = 0
if counts_delivery == '1' then
  delivery_count = redis.call('INCR', deliveries)
  redis.call('EXPIRE', deliveries, deliveries_ttl)
end
local fields = redis.call('HMGET', record, 'object', 'ver', 'turn', 'extra', 'status')
if redis.call('HEXISTS', results, call_id) == 1 then return {delivery_count, 2, fields} end
local status = fields[5]
if not status or not has_status(active_statuses, status) then
  return {delivery_count, 3, fields}
end
if redis.call('SET', claim, token, 'NX', 'PX', claim_ms) then
  return {delivery_count, 1, fields}
end
return {delivery_count, 0, fields}
