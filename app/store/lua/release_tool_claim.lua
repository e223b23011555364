-- Deletes a claim, if it is still the caller's.
local claim = KEYS[1]
local token = ARGV[1]

if redis.call('GET', claim) == token then return redis.call('DEL', claim) end
return 0
