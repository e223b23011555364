-- A new response's history: its parent's history (`base_length` items of the list `base`)
-- followed by `items` (the parent's input and output), as a prefix of one append-only list.
-- When `base` holds exactly `base_length` items (the parent is the list's tip) the items are
-- appended to it; when it holds more (a branch from an older response) its first
-- `base_length` items and the items are copied into `branch`, once; with no base
-- (`base_length` 0) `branch` holds the items alone. A list's items never change, so every
-- response's reference (list, length) stays true whoever appends after it. Run again (a reply
-- lost), an append finds the list longer and makes the branch instead: the same history.
-- Each list used lives at least `ttl` seconds from now.
-- Returns {1 appended to base or 2 written to branch, the new length}, or {-1, the length
-- found} when base holds fewer items than `base_length` (it expired).
--- @include operands
local base = KEYS[1]
local branch = KEYS[2]
local base_length = ARGV[1]
local ttl = ARGV[2]
local items = counted_list(3)

local function push(list, values)
  for i = 1, #values, 1000 do
    redis.call('RPUSH', list, unpack(values, i, math.min(i + 999, #values)))
  end
end

local function keep(list)
  if redis.call('TTL', list) < tonumber(ttl) then redis.call('EXPIRE', list, ttl) end
end

local wanted = tonumber(base_length)
if wanted > 0 then
  local held = redis.call('LLEN', base)
  if held < wanted then return {-1, held} end
  if held == wanted then
    push(base, items)
    keep(base)
    return {1, held + #items}
  end
end
-- The prefix is copied by Redis itself, never read into the script: a list read into a script
-- costs some twenty times a plain read (each item a Lua string) while Redis serves no one else.
if wanted > 0 then
  redis.call('COPY', base, branch, 'REPLACE')
  redis.call('LTRIM', branch, 0, wanted - 1)
else
  redis.call('DEL', branch)
end
push(branch, items)
keep(branch)
return {2, wanted + #items}
