-- Extends a lease the caller still holds, and the sweeper's watch with it.
-- Returns 1 when renewed, 0 when the lease is no longer the caller's.
local lease = KEYS[1]
local active = KEYS[2]
local token = ARGV[1]
local lease_ms = ARGV[2]
local deadline = ARGV[3]
local response_id = ARGV[4]

if redis.call('GET', lease) == token then
  redis.call('PEXPIRE', lease, lease_ms)
  redis.call('ZADD', active, deadline, response_id)
  return 1
end
return 0
