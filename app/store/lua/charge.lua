-- Charges a tenant's tokens per minute for what its model calls took past their reservation
-- (app/limits.py's `charge_tokens`): added to its ledger's current minute, after what earlier
-- minutes carried into it, which may take it over the limit (the rest carries on).
-- Returns the tokens used in the current minute.
--- @include token_ledger
local tokens_ledger = KEYS[1]
local now_ms = ARGV[1]
local window_ms = ARGV[2]
local tokens = ARGV[3]
now_ms, window_ms, tokens = tonumber(now_ms), tonumber(window_ms), tonumber(tokens)

local used, window, limit = tokens_now(tokens_ledger, math.floor(now_ms / window_ms), 0)
used = used + tokens
count_tokens(tokens_ledger, window, window_ms, limit, used)
return used
