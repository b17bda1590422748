-- ackheld is step 3 of the two-step dead-letter path: it acknowledges
-- (and optionally deletes) entries whose dead-letter record is written,
-- each only while the holding consumer still holds it (guard.lua with no
-- idle floor: only pelwarden uses that name). XACK checks no owner, so
-- without the guard an entry a worker took back would be acked unseen.
-- KEYS[1] stream. ARGV: group, holder, delete_original (0|1), then ids.
-- Returns {{id, outcome}, ...}: dead-lettered | not-pending | owner-changed.
local key, group, holder = KEYS[1], ARGV[1], ARGV[2]
local delete_original = ARGV[3] == '1'
local out = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local row, why = guard(key, group, id, holder, 0)
  if row then
    redis.call('XACK', key, group, id)
    if delete_original then redis.call('XDEL', key, id) end
    out[#out + 1] = {id, 'dead-lettered'}
  else
    out[#out + 1] = {id, why}
  end
end
return out
