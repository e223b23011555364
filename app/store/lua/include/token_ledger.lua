-- A tenant's tokens per minute as one ledger (a hash; app/keys.py's `token_ledger`): `window`,
-- the minute it was last counted in; `used`, its tokens there; `limit`, the limit then. What
-- passed the limit in one minute is carried into the next, less that minute's limit, and so on:
-- a response that took three minutes' tokens keeps its tenant's creates out for two more.

-- The ledger's tokens in `window` (what earlier minutes carried into it), the window they count
-- in (`window`, or the ledger's own when a clock behind the others' asks) and the limit they
-- carry by. `limit`: the tenant's tokens per minute; 0: the limit the ledger was counted with.
local function tokens_now(ledger, window, limit)
  local last = redis.call('HMGET', ledger, 'window', 'used', 'limit')
  local used = tonumber(last[2] or '0')
  if limit <= 0 then limit = tonumber(last[3] or '0') end
  local since = window - tonumber(last[1] or window)
  if since < 0 then return used, window - since, limit end
  if since > 0 then used = math.max(0, used - since * limit) end
  return used, window, limit
end

-- Write `used` tokens in `window` with `limit` (0: none known yet), and keep the ledger until
-- its debt is paid and a minute more.
local function count_tokens(ledger, window, window_ms, limit, used)
  local fields = {'window', string.format('%d', window), 'used', string.format('%d', used)}
  local windows = 2
  if limit > 0 then
    fields[#fields + 1], fields[#fields + 2] = 'limit', string.format('%d', limit)
    windows = windows + math.ceil(used / limit)
  end
  redis.call('HSET', ledger, unpack(fields))
  redis.call('PEXPIRE', ledger, window_ms * windows)
end
