-- tombstone acknowledges PEL ids whose stream entry was deleted (XDEL,
-- XTRIM): nothing can ever be delivered for them. KEYS[1] stream.
-- ARGV: group, consumer, min_idle_ms, then the ids.
-- Per id: {id, 'tombstone' | 'entry-exists' | guard reason}.
local key = KEYS[1]
local group, consumer, min_idle = ARGV[1], ARGV[2], ARGV[3]
local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local row, why = guard(key, group, id, consumer, min_idle)
  if not row then
    out[#out + 1] = {id, why}
  elseif #redis.call('XRANGE', key, row[1], row[1]) > 0 then
    out[#out + 1] = {id, 'entry-exists'}
  else
    redis.call('XACK', key, group, row[1])
    out[#out + 1] = {id, 'tombstone'}
  end
end
return out
