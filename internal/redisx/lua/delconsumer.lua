-- delconsumer deletes a consumer only when its PEL is empty and nobody has
-- read under its name for min_idle ms. XGROUP DELCONSUMER drops the
-- consumer's pending entries for good, so the emptiness check must sit in
-- the same script as the delete. KEYS[1] stream. ARGV: group, consumer,
-- min_idle_ms. Returns {outcome, pending}: deleted | gone | has-pending | not-idle.
local key, group, consumer, min_idle = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
if #redis.call('XPENDING', key, group, '-', '+', 1, consumer) > 0 then
  return {'has-pending', 1}
end
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', key, group)) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] == consumer then
    if f['idle'] < min_idle then
      return {'not-idle', 0}
    end
    local dropped = redis.call('XGROUP', 'DELCONSUMER', key, group, consumer)
    return {'deleted', dropped}
  end
end
return {'gone', 0}
