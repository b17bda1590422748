-- Reading the stream entries behind a page of pending rows. XRANGE of one
-- id seeks into the stream and then walks the listpack node that holds it
-- (up to stream-node-max-entries entries) to find it, and each call costs a
-- command of its own; one XRANGE over the page's ids seeks once. A ghost's
-- entries are usually close together in the stream, but where other
-- consumers' entries lie between them a range read would mostly read those:
-- so the reader reads ranges while at least half of what a range returns
-- is on the page, and otherwise reads the rest one id at a time, as it
-- always could. Its first range is short and each dense one doubles the
-- next, so a page that turns out sparse has read few entries in vain.

-- num_le compares two decimal strings without leading zeros, as Redis
-- writes the parts of an id. They may exceed the integers a Lua number
-- holds exactly, and string order is the locale's, so a long part is
-- compared as two numbers of at most 15 digits.
local function num_le(a, b)
  if #a ~= #b then return #a < #b end
  if #a <= 15 then return tonumber(a) <= tonumber(b) end
  local hi_a, hi_b = tonumber(string.sub(a, 1, -16)), tonumber(string.sub(b, 1, -16))
  if hi_a ~= hi_b then return hi_a < hi_b end
  return tonumber(string.sub(a, -15)) <= tonumber(string.sub(b, -15))
end

-- id_le reports whether stream id a is at most stream id b, both written
-- as Redis writes ids.
local function id_le(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  if am ~= bm then return num_le(am, bm) end
  return num_le(as, bs)
end

-- one_entry returns the fields of the entry id, or false when the stream
-- no longer holds it.
local function one_entry(key, id)
  local entry = redis.call('XRANGE', key, id, id)
  if #entry == 0 then return false end
  return entry[1][2]
end

-- page_entries returns a function that, called with the index of each of
-- rows in turn (XPENDING rows, ids ascending), returns the fields of that
-- row's stream entry, or false when it is gone (a tombstone). The script
-- runs atomically and writes nothing between the page's first and last id
-- (copies and records go after the stream's last entry or to another key),
-- so an entry read ahead is the entry a read in its turn would return.
local function page_entries(key, rows)
  local n = #rows
  local last = n > 0 and rows[n][1] or nil
  local on_page = {}
  for i = 1, n do on_page[rows[i][1]] = true end
  local found, upto, complete, sparse = {}, nil, false, false
  local probe = 128
  return function(i)
    local id = rows[i][1]
    local f = found[id]
    if f then return f end
    if complete or (upto and id_le(id, upto)) then return false end
    if sparse then return one_entry(key, id) end
    -- The range starts at this row, so a row it does not return is gone.
    local want = math.min(n - i + 1, probe)
    local got = redis.call('XRANGE', key, id, last, 'COUNT', want)
    local hits = 0
    for _, e in ipairs(got) do
      found[e[1]] = e[2]
      if on_page[e[1]] then hits = hits + 1 end
    end
    complete = #got < want
    if #got > 0 then upto = got[#got][1] end
    sparse = not complete and hits * 2 < #got
    probe = probe * 2
    return found[id] or false
  end
end
