-- deadletter is step 2 of the two-step dead-letter path (the dead-letter
-- stream hashes to another Cluster slot than the stream): it adds one
-- record for a held entry unless an earlier run of this step already did,
-- so a crash or a retry between the steps never writes a second copy.
-- KEYS[1] the dead-letter stream. ARGV: origin stream, group, origin id,
-- held_ms (how long the entry has been held), look_back (the most records
-- read), dry (0|1), carry field ('' = off), the PEL's delivery count, the
-- consumer the entry was taken from ('' when the run that held it is
-- gone), then the held entry's fields as read. The record is the job's
-- fields (less the count a requeue carried, by guard.lua's job_fields, the
-- rule the hold step checked) and pelwarden's, in dead_tags' order, as
-- reclaim.lua writes it.
-- An earlier copy was written after the entry was held, so the search
-- reads back only to the hold, on this node's clock less a minute for
-- clocks that step, and at most look_back records: when those run out
-- before the hold's time, the answer is look-back-exhausted and nothing is
-- written; the entry stays held for an operator, never copied twice.
-- Returns {'added', id, deliveries, consumer} | {'found', id, deliveries,
-- consumer} (as the earlier record says them) | {'look-back-exhausted', ''}
-- | {'failed', why}; a dry run answers 'added' with an empty id.
local dlq = KEYS[1]
local stream, group, origin = ARGV[1], ARGV[2], ARGV[3]
local held_ms, look_back = tonumber(ARGV[4]), tonumber(ARGV[5])
local dry = ARGV[6] == '1'
local carry, pel_deliveries, consumer = ARGV[7], tonumber(ARGV[8]), ARGV[9]
local margin_ms = 60000

local t = redis.call('TIME')
local from = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - held_ms - margin_ms
local start = '-'
if from > 0 then start = string.format('%d', from) end
local recs = redis.call('XREVRANGE', dlq, '+', start, 'COUNT', look_back)
for _, rec in ipairs(recs) do
  -- The last occurrence of a name wins: pelwarden's fields come after the
  -- job's own, which may carry an older record's (a replayed entry).
  local f = {}
  for i = 1, #rec[2], 2 do f[rec[2][i]] = rec[2][i + 1] end
  if f['pelwarden-origin-id'] == origin and f['pelwarden-origin-stream'] == stream and f['pelwarden-group'] == group then
    return {'found', rec[1], f['pelwarden-deliveries'] or '', f['pelwarden-consumer'] or ''}
  end
end
if #recs >= look_back then
  return {'look-back-exhausted', ''}
end
local raw = {}
for i = 10, #ARGV do raw[#raw + 1] = ARGV[i] end
local fields, count = job_fields(raw, carry)
local deliveries = tostring(count + pel_deliveries)
if dry then return {'added', '', deliveries, consumer} end
for _, v in ipairs(dead_tags(origin, stream, group, consumer, deliveries)) do
  fields[#fields + 1] = v
end
local ok, res = pcall(function() return redis.call('XADD', dlq, '*', unpack(fields)) end)
if ok then return {'added', res, deliveries, consumer} end
if type(res) == 'table' and res.err then return {'failed', res.err} end
return {'failed', tostring(res)}
