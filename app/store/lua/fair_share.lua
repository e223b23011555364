-- A tenant's fair share of the fleet: at most `cap` of its responses run (are queued on the
-- fleet or running) at once; the rest wait parked, in order, and start as the running ones end.
-- `running` holds the tenant's dispatched responses; one that left `active` (the sweeper's set
-- of queued and running responses: a terminal write removes it) has ended and frees its place.
-- With a `response_id`, a new response is dispatched when a place is free and none of the
-- tenant's responses waits before it, else parked. Then parked responses take the free places.
-- Each response dispatched here is put under the sweeper's watch (`active`, until
-- `watch_until`), as a create does for a response it queues.
-- A gateway's call keeps its `mode` (`auto` or the number it was configured with) in
-- `cap_key` for a day, so the workers, which need not know the fleet's keys, start parked
-- responses with the cap the gateways use ('': leave it).
-- On a Redis Cluster (`watches_active` 0) `active` is in another slot: the caller passes the
-- running responses it found ended (no longer queued or running: `ended`), and puts the ones
-- dispatched here under the sweeper's watch itself (app/fairness.py).
-- A job a request waits for (`job:<kind>:<id>`: a compaction, a token count) takes a place as a
-- response does, or parks in the same order; its place is in `jobs`, scored by when it lapses
-- (`job_until`; the waiting gateway renews it and frees it once answered). A job's own call
-- starts no parked response: places it finds free while others are parked are the next end's
-- or sweep's to give.
-- Returns the ids to queue on the fleet now, in order (a job: its member, for its gateway).
--- @include operands
local running = KEYS[1]
local active = KEYS[2]
local parked = KEYS[3]
local parked_tenants = KEYS[4]
local arrivals = KEYS[5]
local cap_key = KEYS[6]
local jobs = KEYS[7]
local cap = ARGV[1]
local now_ms = ARGV[2]
local watch_until = ARGV[3]
local job_until = ARGV[4]
local response_id = ARGV[5]
local tenant = ARGV[6]
local mode = ARGV[7]
local watches_active = ARGV[8]
local ended = counted_list(9)
cap = tonumber(cap)
local function is_job(id) return string.sub(id, 1, 4) == 'job:' end

if mode ~= '' then redis.call('SET', cap_key, mode, 'EX', 86400) end

if watches_active == '1' then
  for _, member in ipairs(redis.call('ZRANGE', running, 0, -1)) do
    if not redis.call('ZSCORE', active, member) then redis.call('ZREM', running, member) end
  end
end
for _, member in ipairs(ended) do redis.call('ZREM', running, member) end
redis.call('ZREMRANGEBYSCORE', jobs, '-inf', now_ms)  -- lapsed: their gateway stopped waiting
local count = redis.call('ZCARD', running) + redis.call('ZCARD', jobs)
local start = {}
local function dispatch(id)
  if is_job(id) then
    redis.call('ZADD', jobs, job_until, id)
    redis.call('PEXPIRE', jobs, 86400000)
  else
    redis.call('ZADD', running, now_ms, id)
    if watches_active == '1' then redis.call('ZADD', active, watch_until, id) end
  end
  start[#start + 1] = id
  count = count + 1
end
if response_id ~= '' then
  if count < cap and redis.call('ZCARD', parked) == 0 then
    dispatch(response_id)
  else
    -- scores from a counter: arrival order holds for responses of the same millisecond
    redis.call('ZADD', parked, redis.call('INCR', arrivals), response_id)
    redis.call('PEXPIRE', arrivals, 86400000)
    redis.call('SADD', parked_tenants, tenant)
  end
end
while count < cap and not is_job(response_id) do
  local popped = redis.call('ZPOPMIN', parked)
  if #popped == 0 then break end
  dispatch(popped[1])
end
if redis.call('ZCARD', parked) == 0 then redis.call('SREM', parked_tenants, tenant) end
redis.call('PEXPIRE', running, 86400000)
return start
