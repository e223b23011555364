-- A tenant's fair share of one tool queue: at most `cap` of its tool calls hold a place there
-- (queued on the queue or running) at once; a response whose calls find none parks, in order,
-- and goes on as the tenant's calls there end.
-- `running` holds the places, `<response id> <call id>`; a place whose response left `active`
-- (the sweeper's set of queued and running responses: a terminal write removes it) is free.
-- `parked` holds the responses waiting, `<response id> <turn> <call id>` (the first call that
-- needs a place), by arrival.
-- action `take`: places for `calls` (the response's, in order), where free and none of the
--   tenant's responses waits before it (a place the response holds already stays its own).
--   Returns the calls that have a place. Taking one takes the response out of `parked`.
-- action `park`: the response waits for a place for `calls[1]` at turn `turn` (where it waited
--   already, it keeps its place in the line); then as `release`, for a place freed since the
--   response's `take` (it may be the one that gets it).
-- action `release`: `calls` (the response's, when given) have ended and give their places
--   back; then parked responses take the free places, each one for its waiting call. Returns
--   the parked members that got one, in order (their turns are to be queued again).
-- A call keeps the gateways' `mode` (`auto` or a number) in `mode_key` for a day ('': leave it).
-- On a Redis Cluster (`watches_active` 0) `active` is in another slot: the caller passes the
-- responses it found ended (`ended`).
--- @include operands
local running = KEYS[1]
local active = KEYS[2]
local parked = KEYS[3]
local parked_tenants = KEYS[4]
local arrivals = KEYS[5]
local mode_key = KEYS[6]
local action = ARGV[1]
local cap = ARGV[2]
local mode = ARGV[3]
local now_ms = ARGV[4]
local response_id = ARGV[5]
local turn = ARGV[6]
local entry = ARGV[7]
local watches_active = ARGV[8]
local calls, at = counted_list(9)
local ended = counted_list(at)
cap = tonumber(cap)

if mode ~= '' then redis.call('SET', mode_key, mode, 'EX', 86400) end

local gone = {}
for _, id in ipairs(ended) do gone[id] = true end
local function response_of(member) return string.match(member, '^(%S+)') end
local function has_ended(id)
  if gone[id] then return true end
  return watches_active == '1' and not redis.call('ZSCORE', active, id)
end

for _, member in ipairs(redis.call('ZRANGE', running, 0, -1)) do
  if has_ended(response_of(member)) then redis.call('ZREM', running, member) end
end

local result = {}
if action == 'take' then
  local count = redis.call('ZCARD', running)
  local waiting = redis.call('ZCARD', parked)
  for _, call in ipairs(calls) do
    local member = response_id .. ' ' .. call
    if redis.call('ZSCORE', running, member) then
      result[#result + 1] = call
    elseif count < cap and waiting == 0 then
      redis.call('ZADD', running, now_ms, member)
      count = count + 1
      result[#result + 1] = call
    end
  end
  if #result > 0 then
    redis.call('ZREM', parked, response_id .. ' ' .. turn .. ' ' .. calls[1])
    if redis.call('ZCARD', parked) == 0 then redis.call('SREM', parked_tenants, entry) end
  end
elseif action == 'park' then
  local member = response_id .. ' ' .. turn .. ' ' .. calls[1]
  if not redis.call('ZSCORE', parked, member) then
    redis.call('ZADD', parked, redis.call('INCR', arrivals), member)
    redis.call('PEXPIRE', arrivals, 86400000)
  end
  redis.call('SADD', parked_tenants, entry)
  redis.call('PEXPIRE', parked, 86400000)
else
  for _, call in ipairs(calls) do redis.call('ZREM', running, response_id .. ' ' .. call) end
end
if action ~= 'take' then
  local count = redis.call('ZCARD', running)
  while count < cap do
    local popped = redis.call('ZPOPMIN', parked)
    if #popped == 0 then break end
    local member = popped[1]
    local id, _, call = string.match(member, '^(%S+) (%S+) (.*)$')
    if id and not has_ended(id) then  -- one that ended while parked has nothing to go on with
      redis.call('ZADD', running, now_ms, id .. ' ' .. call)
      count = count + 1
      result[#result + 1] = member
    end
  end
  if redis.call('ZCARD', parked) == 0 then redis.call('SREM', parked_tenants, entry) end
end
redis.call('PEXPIRE', running, 86400000)
return result
