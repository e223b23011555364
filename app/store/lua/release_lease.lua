-- Gives a lease back, if the caller still holds it. With a `wait_until` (epoch seconds) the
-- response stays under the sweeper's watch until then (the run handed work on); without one
-- the watch ends. The run ended without dying: the count of the turn's starts (load_turn.lua)
-- goes with the lease. Returns 1 when released, 0 when the lease was no longer the caller's.
local lease = KEYS[1]
local active = KEYS[2]
local starts = KEYS[3]
local token = ARGV[1]
local response_id = ARGV[2]
local wait_until = ARGV[3]

if redis.call('GET', lease) == token then
  redis.call('DEL', lease, starts)
  if wait_until == '' then
    redis.call('ZREM', active, response_id)
  else
    redis.call('ZADD', active, wait_until, response_id)
  end
  return 1
end
return 0
