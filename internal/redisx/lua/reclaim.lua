-- reclaim gives a batch of a consumer's pending entries back, one guarded
-- step per entry. KEYS[1] stream; KEYS[2] dead-letter stream (may be the
-- stream itself when dead-lettering is off).
-- ARGV: mode (requeue|claim|deadletter), group, consumer, min_idle_ms,
--       carry_field ('' = off), max_deliveries (0 = off), delete_original
--       (0|1), claim_to, reason, then the ids.
-- Per entry it returns {id, outcome, detail, deliveries}:
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
local claim_to, reason = ARGV[8], ARGV[9]

local out = {}
for i = 10, #ARGV do
  local id = ARGV[i]
  local row, why = guard(key, group, id, consumer, min_idle)
  if not row then
    out[#out + 1] = {id, why, '', 0}
  else
    local entry = redis.call('XRANGE', key, id, id)
    if #entry == 0 then
      redis.call('XACK', key, group, id)
      out[#out + 1] = {id, 'tombstone', '', row[4]}
    else
      local fields = entry[1][2]
      local deliveries = carried(fields, carry) + row[4]
      -- Mirrors policy.ShouldDeadLetter: delivered max_deliveries times.
      if mode == 'deadletter' or (max_deliveries > 0 and deliveries >= max_deliveries) then
        local rec = {}
        for j = 1, #fields do rec[j] = fields[j] end
        local why_dead = reason
        if mode ~= 'deadletter' then why_dead = 'max-deliveries' end
        for _, v in ipairs({'pelwarden-origin-id', id, 'pelwarden-origin-stream', key, 'pelwarden-group', group,
            'pelwarden-consumer', consumer, 'pelwarden-deliveries', tostring(deliveries), 'pelwarden-reason', why_dead}) do
          rec[#rec + 1] = v
        end
        local dead = redis.call('XADD', dlq, '*', unpack(rec))
        redis.call('XACK', key, group, id)
        if delete_original then redis.call('XDEL', key, id) end
        out[#out + 1] = {id, 'dead-lettered', dead, deliveries}
      elseif mode == 'claim' then
        redis.call('XCLAIM', key, group, claim_to, min_idle, id)
        out[#out + 1] = {id, 'claimed', claim_to, deliveries}
      else
        local copy = redis.call('XADD', key, '*', unpack(with_field(fields, carry, deliveries)))
        redis.call('XACK', key, group, id)
        if delete_original then redis.call('XDEL', key, id) end
        out[#out + 1] = {id, 'requeued', copy, deliveries}
      end
    end
  end
end
return out
