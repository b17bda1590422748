-- reclaim gives a consumer's pending entries back, guarded per entry, in
-- one atomic step per batch. KEYS[1] stream; KEYS[2] dead-letter stream
-- (the stream itself when dead-lettering is off).
-- ARGV: group, consumer, min_idle_ms, carry_field ('' = off),
--       max_deliveries (0 = off), delete_original (0|1), claim_to ('' =
--       requeue), after, count, dry (0|1), hold ('' = write the
--       dead-letter record here), release (0|1), ackdel (0|1), then ids.
-- release = 1 gives entries back with XNACK instead of a copy: each keeps
-- its id and waits with no owner for a reader that claims. ackdel = 1 lets
-- acknowledge (guard.lua) use XACKDEL where XACK and XDEL would do.
-- hold names the reserved consumer of the two-step dead-letter path (the
-- dead-letter stream is in another Cluster slot): a poison entry moves to
-- it, guarded like a claim, and deadletter.lua and ackheld.lua finish it.
-- With ids, each id is guarded on its own. Without ids, the batch is the
-- consumer's next count entries above `after` idle at least min_idle: that
-- XPENDING query, run inside this script, is itself the guard.
-- dry = 1 runs every guard and every decision, reads the entry as a real
-- run would, and writes nothing: a dry run predicts tombstones and carried
-- delivery counts exactly, because it is the same code.
-- Returns {last_id, {outcome, n, ...}, {{id, outcome, detail, deliveries}, ...},
-- ackdel_refused ('1' when XACKDEL was refused, else '')} where the third
-- list holds every entry whose outcome is not the mode's plain one
-- (requeued / claimed / released), and, with ids, every entry.
--   requeued       detail = id of the copy ('' in a dry run); the copy is
--                  the job's fields, the lineage fields naming the first
--                  original (see lineage), the carried count and marker
--   claimed        detail = the consumer it went to
--   released       the entry is pending with no owner (XNACK FAIL: the
--                  delivery to the owner counts as a failed one)
--   dead-lettered  detail = id of the dead-letter record ('' in a dry run)
--   dead-letter-held  detail = the holding consumer
--   tombstoned     the stream entry was deleted; the PEL id was acked
--   failed         a write failed (detail says why); the entry is untouched
--   field-collision  the entry holds a field the requeue or the dead-letter
--                  record would write (detail names it; see job_fields and
--                  lineage): the entry is untouched. A claim writes no
--                  field.
--   not-pending | owner-changed | not-idle | duplicate-id   nothing was done
-- A failing write is caught and leaves its entry untouched, and every
-- entry whose copy or record is written is acknowledged in this script,
-- even when the script fails after it (see finish), so an error can never
-- leave a copy behind an unacknowledged original.
local key, dlq = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
-- Numbers go back to Redis as the strings they came in as: a Lua number
-- may be formatted in exponent form, which XPENDING and XCLAIM refuse.
local min_idle = ARGV[3]
local carry = ARGV[4]
local max_deliveries = tonumber(ARGV[5])
local delete_original = ARGV[6] == '1'
local claim_to, after, count = ARGV[7], ARGV[8], ARGV[9]
local dry = ARGV[10] == '1'
local hold = ARGV[11]
local release = ARGV[12] == '1'
local ackdel = ARGV[13] == '1'
local explicit = #ARGV > 13
local ackdel_refused = false

local counts, listed = {}, {}

-- Claims move ownership and write no copy, so they are done together at
-- the end, grouped by the delivery count each entry will have: XCLAIM
-- JUSTID with RETRYCOUNT sets the count a plain XCLAIM would (one more
-- delivery) and leaves the same PEL behind, without replying with every
-- entry's fields. A count too large for a Lua number to write exactly
-- takes the plain XCLAIM, which counts the delivery itself.
local claims, claim_counts = {}, {}
local function claim(id, pel_deliveries)
  local retry = ''
  if pel_deliveries < 1e12 then retry = string.format('%d', pel_deliveries + 1) end
  local ids = claims[retry]
  if not ids then
    ids = {}
    claims[retry] = ids
    claim_counts[#claim_counts + 1] = retry
  end
  ids[#ids + 1] = id
end

-- Releases, like claims, write no copy: they are done together at the end,
-- in chunks of one XNACK each.
local releases = {}

local function record(id, outcome, detail, deliveries)
  counts[outcome] = (counts[outcome] or 0) + 1
  if explicit or (outcome ~= 'requeued' and outcome ~= 'claimed' and outcome ~= 'released') then
    listed[#listed + 1] = {id, outcome, detail, deliveries}
  end
end

-- finish acknowledges (and optionally deletes) an entry whose copy or
-- dead-letter record is written. A named entry is acknowledged at once:
-- a later id of the batch may name it again, and its guard must find it
-- acknowledged. A page's entries are acknowledged together by flush, one
-- XACK for up to 1000 of them instead of a command each; nothing in a page
-- reads the PEL after its one XPENDING, and the page runs under pcall so
-- that flush runs even when an entry fails with an error.
local finished = {}
local function ack(ids, i, j)
  if not acknowledge(key, group, ids, i, j, delete_original, ackdel) then
    ackdel, ackdel_refused = false, true
  end
end

local function finish(id)
  if explicit then
    ack({id}, 1, 1)
  else
    finished[#finished + 1] = id
  end
end

local function flush()
  for i = 1, #finished, 1000 do
    ack(finished, i, math.min(i + 999, #finished))
  end
  finished = {}
end

local function xadd(stream_key, fields)
  return redis.call('XADD', stream_key, '*', unpack(fields))
end

-- write runs one XADD, catching both Redis errors and Lua's own (a field
-- list too long to unpack), so a failure leaves the entry untouched. A dry
-- run writes nothing and answers ''.
local function write(stream_key, fields)
  if dry then return '', nil end
  local ok, res = pcall(xadd, stream_key, fields)
  if ok then return res, nil end
  if type(res) == 'table' and res.err then return nil, res.err end
  return nil, tostring(res)
end

-- act handles one entry that passed the guard; id is the id Redis returned
-- for it, pel_deliveries its delivery count, and entry its fields as the
-- stream holds them, or false when the stream no longer does.
local function act(id, pel_deliveries, entry)
  if not entry then
    if not dry then redis.call('XACK', key, group, id) end
    record(id, 'tombstoned', '', pel_deliveries)
    return
  end
  local fields, count, clash = job_fields(entry, carry)
  local deliveries = count + pel_deliveries
  -- Mirrors policy.ShouldDeadLetter: delivered max_deliveries times.
  if max_deliveries > 0 and deliveries >= max_deliveries then
    -- The record, written here or by the two-step path, adds these fields.
    clash = first_of(fields, dead_tags(id, key, group, consumer, deliveries))
    if clash then
      record(id, 'field-collision', clash, deliveries)
      return
    end
  end
  if max_deliveries > 0 and deliveries >= max_deliveries and hold ~= '' then
    -- JUSTID: the holder is not a delivery, so the count stays the entry's.
    if not dry then redis.call('XCLAIM', key, group, hold, min_idle, id, 'JUSTID') end
    record(id, 'dead-letter-held', hold, deliveries)
  elseif max_deliveries > 0 and deliveries >= max_deliveries then
    local tags = dead_tags(id, key, group, consumer, deliveries)
    local rec = {}
    for j = 1, #fields do rec[j] = fields[j] end
    for _, v in ipairs(tags) do rec[#rec + 1] = v end
    local dead, err = write(dlq, rec)
    if not dead then
      record(id, 'failed', 'dead-letter: ' .. err, deliveries)
      return
    end
    if not dry then finish(id) end
    record(id, 'dead-lettered', dead, deliveries)
  elseif claim_to ~= '' then
    claim(id, pel_deliveries)
    record(id, 'claimed', claim_to, deliveries)
  elseif release then
    releases[#releases + 1] = id
    record(id, 'released', '', deliveries)
  else
    -- A copy names its original; a dead-letter record keeps the lineage
    -- as the job's fields, beside its own origin fields.
    local copied, lclash = lineage(fields, key)
    clash = clash or lclash
    if clash then
      record(id, 'field-collision', clash, deliveries)
      return
    end
    local copy, err = write(key, with_count(with_lineage(fields, copied, key, id), carry, deliveries))
    if not copy then
      record(id, 'failed', 'requeue: ' .. err, deliveries)
      return
    end
    if not dry then finish(id) end
    record(id, 'requeued', copy, deliveries)
  end
end

local last = after
if explicit then
  local seen = {}
  for i = 14, #ARGV do
    local id = ARGV[i]
    local row, why = guard(key, group, id, consumer, min_idle)
    -- Redis's own id, so 5-1 and 05-1 are one entry.
    if row and seen[row[1]] then
      row, why = nil, 'duplicate-id'
    end
    if row then
      seen[row[1]] = true
      act(row[1], row[4], one_entry(key, row[1]))
    else
      record(id, why, '', 0)
    end
    last = id
  end
else
  local start = '-'
  if after ~= '' then start = '(' .. after end
  local rows = redis.call('XPENDING', key, group, 'IDLE', min_idle, start, '+', count, consumer)
  local entry = page_entries(key, rows)
  local ok, err = pcall(function()
    for i, row in ipairs(rows) do
      act(row[1], row[4], entry(i))
      last = row[1]
    end
  end)
  flush()
  if not ok then error(err, 0) end
end

-- In chunks within Lua's argument limits.
if not dry then
  for _, retry in ipairs(claim_counts) do
    local ids = claims[retry]
    for i = 1, #ids, 1000 do
      local chunk = {key, group, claim_to, min_idle}
      for j = i, math.min(i + 999, #ids) do chunk[#chunk + 1] = ids[j] end
      if retry ~= '' then
        chunk[#chunk + 1] = 'RETRYCOUNT'
        chunk[#chunk + 1] = retry
        chunk[#chunk + 1] = 'JUSTID'
      end
      redis.call('XCLAIM', unpack(chunk))
    end
  end
end

-- FAIL keeps the delivery count: the owner's delivery failed, and the
-- reader that claims the entry counts one more, as a requeued copy carries
-- the count on.
if not dry then
  for i = 1, #releases, 1000 do
    local j = math.min(i + 999, #releases)
    redis.call('XNACK', key, group, 'FAIL', 'IDS', j - i + 1, unpack(releases, i, j))
  end
end

local flat = {}
for outcome, n in pairs(counts) do
  flat[#flat + 1] = outcome
  flat[#flat + 1] = n
end
local refused = ''
if ackdel_refused then refused = '1' end
return {last, flat, listed, refused}
