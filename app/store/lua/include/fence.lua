-- Fencing a run's writes with its lease token (app/store/fence.py; included by the scripts
-- that write for a run).

-- Whether the run holding `token` may write ('': no run's write, never refused). The lease is
-- the run's while its key holds the token. A lease that lapsed with no run taking it since
-- (the record's `holder` is still the token) is taken again for the run, with the sweeper's
-- watch, so a run that was merely slow goes on; any other holder refuses the write.
local function holds_lease(record, lease, active, token, lease_ms, deadline, response_id)
  if token == '' then return true end
  local holder = redis.call('GET', lease)
  if holder then return holder == token end
  if redis.call('HGET', record, 'holder') ~= token then return false end
  redis.call('SET', lease, token, 'NX', 'PX', lease_ms)
  redis.call('ZADD', active, deadline, response_id)
  return true
end
