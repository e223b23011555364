-- Extends a lease the caller still holds (a run's lease, or a tool call's claim) to lapse
-- `lease_ms` from now, and the sweeper's watch of it with it (`member` of `watch`, until
-- `deadline`). A lease that lapsed with nobody else taking it is taken back: it lapsed while
-- Redis was away (an outage outlasts a lease, and its holder could not renew), not because its
-- holder died. Returns 1 when renewed (or taken back), 0 when another holder has it now.
local lease = KEYS[1]
local watch = KEYS[2]
local token = ARGV[1]
local lease_ms = ARGV[2]
local deadline = ARGV[3]
local member = ARGV[4]

local holder = redis.call('GET', lease)
if holder == token then
  redis.call('PEXPIRE', lease, lease_ms)
elseif holder or not redis.call('SET', lease, token, 'NX', 'PX', lease_ms) then
  return 0
end
redis.call('ZADD', watch, deadline, member)
return 1
