-- Extends a lease the caller still holds (a run's lease, or a tool call's claim) to lapse
-- `lease_ms` from now, and the sweeper's watch of it with it (`member` of `watch`, until
-- `deadline`). Returns 1 when renewed, 0 when the lease is no longer the caller's.
local lease = KEYS[1]
local watch = KEYS[2]
local token = ARGV[1]
local lease_ms = ARGV[2]
local deadline = ARGV[3]
local member = ARGV[4]

if redis.call('GET', lease) == token then
  redis.call('PEXPIRE', lease, lease_ms)
  redis.call('ZADD', watch, deadline, member)
  return 1
end
return 0
