-- Sets a claim to lapse `ttl_ms` from now, if the claim is still the caller's.
local claim = KEYS[1]
local token = ARGV[1]
local ttl_ms = ARGV[2]

if redis.call('GET', claim) == token then return redis.call('PEXPIRE', claim, ttl_ms) end
return 0
