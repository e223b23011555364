-- Appending to a response's event log (included by every script that emits events).
-- The published form is app/store/events.py's line format: one line per event,
-- `<sequence_number> <type> <json>`, the lines of one script call in one message. `lines`
-- gathers the message's pieces (add_line), joined once when it is published: an event's JSON,
-- megabytes maybe (a response object), is not copied into a line first.

-- Adds a line (its pieces) to the message `lines`.
local function add_line(lines, ...)
  if #lines > 0 then lines[#lines + 1] = '\n' end
  for i = 1, select('#', ...) do lines[#lines + 1] = select(i, ...) end
end

-- Assigns the next sequence number, completes the event's JSON with it (the JSON prefix ends
-- right before the sequence number's value), adds the event to the stream (entry id
-- 1-<sequence_number>, with `at`: Redis's clock in epoch seconds, for the console's timeline)
-- and its line to `lines`. An empty prefix is a response event of `object`, the response object
-- the calling script writes: composed here, as app/store/events.py's response_event_json does,
-- so a large object is sent to Redis once, not once more per event. Returns the sequence number.
local function append(sequence, stream, maxlen, event_type, json_prefix, lines, object)
  local seq = redis.call('INCR', sequence) - 1
  local json
  if json_prefix == '' then
    json = '{"type":"' .. event_type .. '","response":' .. object .. ',"sequence_number":' .. seq
      .. '}'
  else
    json = json_prefix .. seq .. '}'
  end
  local now = redis.call('TIME')
  local at = now[1] .. '.' .. string.format('%06d', now[2])
  redis.call(
    'XADD', stream, 'MAXLEN', '~', maxlen, '1-' .. seq, 't', event_type, 'd', json, 'at', at
  )
  add_line(lines, seq .. ' ' .. event_type .. ' ', json)
  return seq
end

-- Appends every event (`types[i]`, `json_prefixes[i]`; `object`: the response object the
-- script writes, for its response events) and renews the log's time to live.
-- Returns the last sequence number (-1: no event).
local function append_all(sequence, stream, maxlen, ttl, types, json_prefixes, lines, object)
  local last = -1
  for i = 1, #types do
    last = append(sequence, stream, maxlen, types[i], json_prefixes[i], lines, object)
  end
  redis.call('EXPIRE', sequence, ttl)
  redis.call('EXPIRE', stream, ttl)
  return last
end

-- Publishes the lines of one call as one message (none when there are none). `channel` is
-- the response's channel, or on a Redis Cluster `<shard channel> <response id>` (app/keys.py):
-- then the message goes to the shard's channel with SPUBLISH, the response id its first line.
local function publish(channel, lines)
  if #lines == 0 then return end
  local shard_channel, response_id = string.match(channel, '^(%S+) (%S+)$')
  if shard_channel then
    table.insert(lines, 1, response_id .. '\n')
    redis.call('SPUBLISH', shard_channel, table.concat(lines))
  else
    redis.call('PUBLISH', channel, table.concat(lines))
  end
end
