-- Recognising a call run a second time after its reply was lost (app/store/once.py; included
-- by the scripts that emit or write for a writer).

-- The result the writer's call `token` returned when it first ran, or nil when this is its
-- first run ('': no token, never a replay). `field` is the writer's field of the record.
local function first_result(record, field, token)
  if token == '' then return nil end
  local seen = redis.call('HGET', record, field)
  if not seen then return nil end
  local at = string.find(seen, ' ', 1, true)
  if string.sub(seen, 1, at - 1) ~= token then return nil end
  return cjson.decode(string.sub(seen, at + 1))
end

-- Remembers `result` as the writer's call `token`'s (the record must exist). Returns `result`.
local function remember(record, field, token, result)
  if token ~= '' then
    redis.call('HSET', record, field, token .. ' ' .. cjson.encode(result))
  end
  return result
end
