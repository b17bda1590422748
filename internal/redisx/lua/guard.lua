-- Shared prelude of every guarded action. Each action on a pending entry
-- first proves, inside the same script, that the entry is still pending,
-- still owned by the consumer it is taken from, and idle at least min_idle
-- milliseconds. Anything else is a no-op with the reason, so a retry after a
-- crash, or a second pelwarden racing on the same entry, changes nothing.

-- guard returns the XPENDING row {id, consumer, idle, deliveries}, or nil
-- and why the entry may not be touched.
local function guard(key, group, id, consumer, min_idle)
  local row = redis.call('XPENDING', key, group, 'IDLE', min_idle, id, id, 1, consumer)
  if #row == 1 then
    return row[1], nil
  end
  local any = redis.call('XPENDING', key, group, id, id, 1)
  if #any == 0 then
    return nil, 'not-pending'
  end
  if any[1][2] ~= consumer then
    return nil, 'owner-changed'
  end
  return nil, 'not-idle'
end

-- carried is the delivery count an earlier requeue stored in the entry.
local function carried(fields, name)
  if name == '' then
    return 0
  end
  for i = 1, #fields, 2 do
    if fields[i] == name then
      return tonumber(fields[i + 1]) or 0
    end
  end
  return 0
end

-- with_field returns a copy of fields with name set to value (appended when
-- absent); an empty name returns fields unchanged.
local function with_field(fields, name, value)
  if name == '' then
    return fields
  end
  local out = {}
  local set = false
  for i = 1, #fields, 2 do
    out[#out + 1] = fields[i]
    if fields[i] == name then
      out[#out + 1] = tostring(value)
      set = true
    else
      out[#out + 1] = fields[i + 1]
    end
  end
  if not set then
    out[#out + 1] = name
    out[#out + 1] = tostring(value)
  end
  return out
end
