-- Replaces the object of an existing conversation (a deleted one is not brought back).
-- Returns 1, or 0 when there is no such conversation.
local conversation = KEYS[1]
local object = ARGV[1]

if redis.call('EXISTS', conversation) == 0 then return 0 end
redis.call('HSET', conversation, 'object', object)
return 1
