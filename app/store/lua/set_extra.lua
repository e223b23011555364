-- Replaces the request's `extra` fields of a record; a deleted record is not brought back as
-- a stub.
local record = KEYS[1]
local extra = ARGV[1]

if redis.call('EXISTS', record) == 1 then redis.call('HSET', record, 'extra', extra) end
return 0
