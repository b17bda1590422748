-- collisions finds, with the reclaim script's own rule (job_fields,
-- lineage, dead_tags), the entries a reclaim would skip as field
-- collisions. It
-- only reads. KEYS[1] stream. ARGV: carry_field ('' = off), dead (0|1:
-- dead-lettering is on), then ids. Returns {id, field, ...} for each
-- entry that collides; a deleted entry does not.
local key, carry, dead = KEYS[1], ARGV[1], ARGV[2] == '1'
local tags = dead_tags('', key, '', '', 0)
local out = {}
for i = 3, #ARGV do
  local entry = redis.call('XRANGE', key, ARGV[i], ARGV[i])
  if #entry == 1 then
    local fields, _, clash = job_fields(entry[1][2], carry)
    local _, lclash = lineage(fields, key)
    clash = clash or lclash
    if dead then clash = clash or first_of(fields, tags) end
    if clash then
      out[#out + 1] = ARGV[i]
      out[#out + 1] = clash
    end
  end
end
return out
