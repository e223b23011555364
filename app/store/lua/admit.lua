-- Admits one request of a tenant against its limits, for every gateway replica at once: the
-- requests of the current minute's window, the (estimated) tokens of its minute in the tenant's
-- token ledger (with what earlier minutes carried over: include/token_ledger.lua), and, for a
-- new response, how many of the tenant's responses are queued or running. A limit of 0 is no
-- limit (no tokens are counted without one).
-- `in_flight` holds the tenant's response ids: score 0 once the response is stored (it then
-- counts while it is in `active`, the sweeper's set of queued and running responses, or parked
-- by the tenant's fair share, `parked`), else the
-- time (ms) its admission reserved the place (it counts for `reserve_ms` while it is stored).
-- On a Redis Cluster (`watches_active` 0) `active` is in other slots: the caller passes the
-- members it found no longer queued or running (`ended`; app/store/fair_share.py).
-- Nothing is counted when a limit refuses.
-- Returns {0 (admitted) or 1 (requests), 2 (tokens), 3 (in flight), requests used,
-- tokens used, responses in flight}.
--- @include operands
--- @include token_ledger
local requests_key = KEYS[1]
local tokens_ledger = KEYS[2]
local in_flight = KEYS[3]
local active = KEYS[4]
local parked = KEYS[5]
local now_ms = ARGV[1]
local window_ms = ARGV[2]
local request_limit = ARGV[3]
local token_limit = ARGV[4]
local in_flight_limit = ARGV[5]
local requests = ARGV[6]
local tokens = ARGV[7]
local response_id = ARGV[8]
local reserve_ms = ARGV[9]
local watches_active = ARGV[10]
local ended = counted_list(11)
now_ms, window_ms, reserve_ms = tonumber(now_ms), tonumber(window_ms), tonumber(reserve_ms)
request_limit, token_limit = tonumber(request_limit), tonumber(token_limit)
in_flight_limit, requests, tokens = tonumber(in_flight_limit), tonumber(requests), tonumber(tokens)

local used_requests = tonumber(redis.call('GET', requests_key) or '0')
local used_tokens, window = 0, math.floor(now_ms / window_ms)
if token_limit > 0 then used_tokens, window = tokens_now(tokens_ledger, window, token_limit) end
if request_limit > 0 and requests > 0 and used_requests + requests > request_limit then
  return {1, used_requests, used_tokens, -1}
end
if token_limit > 0 and tokens > 0 and used_tokens + tokens > token_limit then
  return {2, used_requests, used_tokens, -1}
end
local has_ended = {}
for _, member in ipairs(ended) do has_ended[member] = true end
local running = -1
if response_id ~= '' and in_flight_limit > 0 then
  running = 0
  local members = redis.call('ZRANGE', in_flight, 0, -1, 'WITHSCORES')
  for i = 1, #members, 2 do
    local reserved = tonumber(members[i + 1])
    local is_active
    if watches_active == '1' then
      is_active = redis.call('ZSCORE', active, members[i]) or redis.call('ZSCORE', parked, members[i])
    else
      is_active = not has_ended[members[i]]
    end
    if (reserved == 0 and is_active) or (reserved > 0 and now_ms - reserved < reserve_ms) then
      running = running + 1
    else
      redis.call('ZREM', in_flight, members[i])
    end
  end
  if running >= in_flight_limit then return {3, used_requests, used_tokens, running} end
  redis.call('ZADD', in_flight, now_ms, response_id)
  redis.call('PEXPIRE', in_flight, 86400000)
  running = running + 1
end
if requests > 0 then
  used_requests = redis.call('INCRBY', requests_key, requests)
  redis.call('PEXPIRE', requests_key, window_ms * 2)
end
if tokens > 0 and token_limit > 0 then
  used_tokens = used_tokens + tokens
  count_tokens(tokens_ledger, window, window_ms, token_limit, used_tokens)
end
return {0, used_requests, used_tokens, running}
