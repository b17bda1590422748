-- reclaim gives a consumer's pending entries back, guarded per entry, in
-- one atomic step per batch. KEYS[1] stream; KEYS[2] dead-letter stream
-- (the stream itself when dead-lettering is off).
-- ARGV: mode (requeue|claim|deadletter), group, consumer, min_idle_ms,
--       carry_field ('' = off), max_deliveries (0 = off), delete_original
--       (0|1), claim_to, reason, after, count, then ids.
-- With ids, each id is guarded on its own. Without ids, the batch is the
-- consumer's next count entries above `after` idle at least min_idle: that
-- XPENDING query, run inside this script, is itself the guard.
-- Returns {last_id, {outcome, n, ...}, {{id, outcome, detail, deliveries}, ...}}
-- where the last list holds every entry whose outcome is not the mode's
-- plain one (requeued / claimed), and, with ids, every entry.
--   requeued       detail = id of the copy
--   claimed        detail = the consumer it went to
--   dead-lettered  detail = id of the dead-letter record
--   tombstone      the stream entry was deleted; the PEL id was acked
--   not-pending | owner-changed | not-idle   nothing was done
local key, dlq = KEYS[1], KEYS[2]
local mode, group, consumer = ARGV[1], ARGV[2], ARGV[3]
local min_idle = tonumber(ARGV[4])
local carry = ARGV[5]
local max_deliveries = tonumber(ARGV[6])
local delete_original = ARGV[7] == '1'
local claim_to, reason, after, count = ARGV[8], ARGV[9], ARGV[10], tonumber(ARGV[11])
local explicit = #ARGV > 11

local counts, listed = {}, {}
local acks, claims, dels = {}, {}, {}
local function record(id, outcome, detail, deliveries)
  counts[outcome] = (counts[outcome] or 0) + 1
  if explicit or (outcome ~= 'requeued' and outcome ~= 'claimed') then
    listed[#listed + 1] = {id, outcome, detail, deliveries}
  end
end

-- act handles one entry that passed the guard; pel_deliveries is Redis's
-- delivery count for it.
local function act(id, pel_deliveries)
  local entry = redis.call('XRANGE', key, id, id)
  if #entry == 0 then
    acks[#acks + 1] = id
    record(id, 'tombstone', '', pel_deliveries)
    return
  end
  local fields = entry[1][2]
  local deliveries = carried(fields, carry) + pel_deliveries
  -- Mirrors policy.ShouldDeadLetter: delivered max_deliveries times.
  if mode == 'deadletter' or (max_deliveries > 0 and deliveries >= max_deliveries) then
    local rec = {}
    for j = 1, #fields do rec[j] = fields[j] end
    local why = reason
    if mode ~= 'deadletter' then why = 'max-deliveries' end
    for _, v in ipairs({'pelwarden-origin-id', id, 'pelwarden-origin-stream', key, 'pelwarden-group', group,
        'pelwarden-consumer', consumer, 'pelwarden-deliveries', tostring(deliveries), 'pelwarden-reason', why}) do
      rec[#rec + 1] = v
    end
    local dead = redis.call('XADD', dlq, '*', unpack(rec))
    acks[#acks + 1] = id
    if delete_original then dels[#dels + 1] = id end
    record(id, 'dead-lettered', dead, deliveries)
  elseif mode == 'claim' then
    claims[#claims + 1] = id
    record(id, 'claimed', claim_to, deliveries)
  else
    local copy = redis.call('XADD', key, '*', unpack(with_field(fields, carry, deliveries)))
    acks[#acks + 1] = id
    if delete_original then dels[#dels + 1] = id end
    record(id, 'requeued', copy, deliveries)
  end
end

local last = after
if explicit then
  local seen = {}
  for i = 12, #ARGV do
    local id = ARGV[i]
    local row, why
    if seen[id] then
      why = 'duplicate-id' -- acted on (or refused) once already in this batch
    else
      row, why = guard(key, group, id, consumer, min_idle)
    end
    seen[id] = true
    if row then
      act(id, row[4])
    else
      record(id, why, '', 0)
    end
    last = id
  end
else
  local start = '-'
  if after ~= '' then start = '(' .. after end
  for _, row in ipairs(redis.call('XPENDING', key, group, 'IDLE', min_idle, start, '+', count, consumer)) do
    act(row[1], row[4])
    last = row[1]
  end
end

-- The acknowledgements, claims and deletions of the batch, in chunks that
-- stay within Lua's argument limits.
local function each_chunk(ids, fn)
  for i = 1, #ids, 1000 do
    fn(unpack(ids, i, math.min(i + 999, #ids)))
  end
end
each_chunk(claims, function(...) redis.call('XCLAIM', key, group, claim_to, min_idle, ...) end)
each_chunk(acks, function(...) redis.call('XACK', key, group, ...) end)
each_chunk(dels, function(...) redis.call('XDEL', key, ...) end)

local flat = {}
for outcome, n in pairs(counts) do
  flat[#flat + 1] = outcome
  flat[#flat + 1] = n
end
return {last, flat, listed}
