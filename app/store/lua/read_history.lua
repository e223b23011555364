-- A response's history: the first `length` items of its chain's list from `start` on (the
-- reader knows those before), and the list then lives at least `ttl` seconds from now (each
-- turn that reads it keeps it for the responses after).
-- Returns the items (fewer than asked when the list expired).
local history = KEYS[1]
local start = ARGV[1]
local length = ARGV[2]
local ttl = ARGV[3]

local items = {}
if tonumber(start) < tonumber(length) then
  items = redis.call('LRANGE', history, start, tonumber(length) - 1)
end
if redis.call('EXISTS', history) == 1 and redis.call('TTL', history) < tonumber(ttl) then
  redis.call('EXPIRE', history, ttl)
end
return items
