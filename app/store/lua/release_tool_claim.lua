-- Deletes a claim, if it is still the caller's, and ends the sweeper's watch of the call.
local claim = KEYS[1]
local running = KEYS[2]
local token = ARGV[1]
local member = ARGV[2]

if redis.call('GET', claim) == token then
  redis.call('ZREM', running, member)
  return redis.call('DEL', claim)
end
return 0
