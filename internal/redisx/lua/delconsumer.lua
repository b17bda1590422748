-- delconsumer deletes a consumer only when its PEL is empty and nobody has
-- read under its name for min_idle ms. XGROUP DELCONSUMER drops the
-- consumer's pending entries for good, so the emptiness check must sit in
-- the same script as the delete. KEYS[1] stream. ARGV: group, consumer,
-- min_idle_ms, dry (0|1: check everything, delete nothing).
-- Returns {outcome, dropped}: consumer-deleted | delete-gone |
-- delete-has-pending | delete-not-idle.
local key, group, consumer, min_idle = KEYS[1], ARGV[1], ARGV[2], tonumber(ARGV[3])
local dry = ARGV[4] == '1'
if #redis.call('XPENDING', key, group, '-', '+', 1, consumer) > 0 then
  return {'delete-has-pending', 0}
end
for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', key, group)) do
  local f = {}
  for i = 1, #c, 2 do f[c[i]] = c[i + 1] end
  if f['name'] == consumer then
    if f['idle'] < min_idle then
      return {'delete-not-idle', 0}
    end
    if dry then
      return {'consumer-deleted', 0}
    end
    local dropped = redis.call('XGROUP', 'DELCONSUMER', key, group, consumer)
    return {'consumer-deleted', dropped}
  end
end
return {'delete-gone', 0}
