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

-- A requeued copy carries its delivery count in the carry field and, next
-- to it, the marker field pelwarden-carried naming that field. The pair is
-- pelwarden's own only when the marker occurs once and names a field that
-- holds a count pelwarden writes (see counted) and occurs once with a
-- decimal count; everything else in an entry is the job's, and pelwarden
-- never writes over or drops a field of the job: an entry whose own fields
-- hold the carry field or the marker, or whose marker names a field of the
-- job (pelwarden-carried: amount), is a field collision.
local marker = 'pelwarden-carried'

-- legacy is the carry field copies had before the marker: the default
-- pelwarden-deliveries, in pelwarden's own field prefix. An unmarked copy
-- holding it once with a count is one an earlier version requeued, and its
-- count goes on; without this rule such an entry, once stuck again, would
-- stay pending for good. Another unmarked carry field is the job's.
local legacy = 'pelwarden-deliveries'

-- counted says a marker may name f: the carry field in use, or the
-- default one, whose counts copies keep carrying after deliveryCountField
-- is changed from it. Any other field a marker names is the job's, and
-- taking it for a count would drop it from the copy.
local function counted(f, name)
  return f == name or f == legacy
end

-- The lineage fields: a requeued copy names the entry it is a copy of, the
-- first original of its job, by its stream and id, so a worker can tell
-- two deliveries of one job apart from two jobs.
local original_stream, original_id = 'pelwarden-original-stream', 'pelwarden-original-id'

-- lineage reads the lineage fields of an entry that is to be copied:
-- whether it is itself a copy (both fields once, the stream its own, the
-- id a stream id), in which case the copy keeps naming that first
-- original; or, when they hold anything else, the field a copy would have
-- to write over (a field collision).
local function lineage(fields, key)
  local stream, id, n, first = nil, nil, 0, nil
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f == original_stream or f == original_id then
      n, first = n + 1, first or f
      if f == original_stream then stream = fields[i + 1] else id = fields[i + 1] end
    end
  end
  if n == 0 then return false, nil end
  if n == 2 and stream == key and id and string.match(id, '^%d+%-%d+$') then return true, nil end
  return false, first
end

-- with_lineage returns a first copy's fields: the job's, then the stream
-- and id of the entry it copies. A copy of a copy is returned unchanged.
-- It appends to fields, which the caller owns and reads no more.
local function with_lineage(fields, copied, key, id)
  if copied then return fields end
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = original_stream, key, original_id, id
  return fields
end

-- job_fields splits an entry's fields into the job's own and the count an
-- earlier requeue carried, and names the first field of the job a requeue
-- would write over (clash). An empty carry name keeps the entry whole. A
-- count has at most 12 digits, so that it never comes back from Lua in
-- exponent form. The job's fields may be fields itself.
local function job_fields(fields, name)
  if name == '' then
    return fields, 0, nil
  end
  local own, markers, legacies, named = nil, 0, 0, false
  for i = 1, #fields, 2 do
    local f = fields[i]
    if f == marker then own, markers = fields[i + 1], markers + 1 end
    if f == legacy then legacies = legacies + 1 end
    if f == name then named = true end
  end
  local unmarked = markers == 0 and name == legacy and legacies == 1
  -- Nothing carried (no copy of pelwarden's, the common first requeue):
  -- the job's fields are all of them, and only the carry field clashes.
  if markers == 0 and not unmarked then
    return fields, 0, named and name or nil
  end
  if unmarked then own, markers = legacy, 1 end
  if markers == 1 and not counted(own, name) then
    return fields, 0, marker
  end
  local count, seen, out = nil, 0, {}
  for i = 1, #fields, 2 do
    local f, v = fields[i], fields[i + 1]
    if markers == 1 and f == own then
      count, seen = v, seen + 1
    elseif f ~= marker or markers ~= 1 then
      out[#out + 1] = f
      out[#out + 1] = v
    end
  end
  if markers == 1 and (own == marker or seen ~= 1 or #count > 12 or not string.match(count, '^%d+$')) then
    return fields, 0, unmarked and legacy or marker
  end
  count = tonumber(count) or 0
  for i = 1, #out, 2 do
    if out[i] == name or out[i] == marker then return out, count, out[i] end
  end
  return out, count, nil
end

-- dead_tags is what a dead-letter record adds to the job's fields.
local function dead_tags(id, key, group, consumer, deliveries)
  return {'pelwarden-origin-id', id, 'pelwarden-origin-stream', key, 'pelwarden-group', group,
    'pelwarden-consumer', consumer, 'pelwarden-deliveries', tostring(deliveries), 'pelwarden-reason', 'max-deliveries'}
end

-- first_of returns the first of names that fields already hold, or nil.
local function first_of(fields, names)
  for i = 1, #fields, 2 do
    for j = 1, #names, 2 do
      if fields[i] == names[j] then return fields[i] end
    end
  end
  return nil
end

-- with_count returns the job's fields with the carried count and its
-- marker appended; an empty name returns fields unchanged. It appends to
-- fields, which the caller owns and reads no more. An integer format
-- writes what tostring would, without formatting a float, below 1e14.
local function with_count(fields, name, value)
  if name == '' then
    return fields
  end
  local n, count = #fields, value < 1e14 and string.format('%d', value) or tostring(value)
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = name, count, marker, name
  return fields
end

-- acknowledge acknowledges ids[i..j] and, with del, deletes them from the
-- stream: in one XACKDEL (Redis 8.2; its default KEEPREF does what XACK
-- then XDEL do) where ackdel asks for it, else, or where the server or the
-- connection's user refuses it, with XACK and XDEL. It returns false when
-- XACKDEL was refused, so that the caller stops asking. Nothing can make
-- it fail between a copy and its acknowledgement: the XACKDEL runs under
-- pcall, and a refused one changed nothing.
local function acknowledge(key, group, ids, i, j, del, ackdel)
  if del and ackdel and pcall(redis.call, 'XACKDEL', key, group, 'IDS', j - i + 1, unpack(ids, i, j)) then
    return true
  end
  redis.call('XACK', key, group, unpack(ids, i, j))
  if del then redis.call('XDEL', key, unpack(ids, i, j)) end
  return not (del and ackdel)
end
