-- Reading the operands of a script (included by the scripts that need it).

-- A counted list of ARGV starting at `at`: its length, then its items. Returns the items and
-- where the next operand starts.
local function counted_list(at)
  local count = tonumber(ARGV[at])
  local items = {}
  for i = 1, count do items[i] = ARGV[at + i] end
  return items, at + count + 1
end

-- Whether `status` is in a packed set of statuses ("|a|b|", app/store/status.py's `packed`).
local function has_status(statuses, status)
  return string.find(statuses, '|' .. status .. '|', 1, true) ~= nil
end
