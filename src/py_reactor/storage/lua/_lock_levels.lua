-- _lock_levels.lua: a library that scripts inline with an include line (see lua_source).
-- Needs _now.
-- Every level of a lock's hold (its first acquisition, and each re-entry by the same owner) is
-- a field "level:<n>" of the hold hash = the server ms it lapses at unless extended: levels
-- lapse one by one. So a runner presumed dead keeps its level until that level's own ttl runs
-- out while a recovered run of the same execution (same owner) re-enters beside it, and a
-- release or an extend touches the caller's own level only. "seq" numbers the levels of one
-- hold from 1 (a fresh hold, under a new token, starts again); "count" is the number of level
-- fields present (live, or lapsed and not yet dropped). The hash expires with its latest level.
-- A hash without an owner has no level fields.

-- add_level(hold, n, now, ttl_ms): level n lapses ttl_ms from now; the hash lives as long.
local function add_level(hold, n, now, ttl_ms)
  redis.call('HSET', hold, 'level:' .. n, now + ttl_ms)
  if redis.call('PTTL', hold) < ttl_ms then
    redis.call('PEXPIRE', hold, ttl_ms)
  end
end

-- live_levels(hold, now, prune): how many levels are live, and the ms the latest lapses at;
-- with prune, the lapsed ones are dropped (the caller then sets "count").
local function live_levels(hold, now, prune)
  local fields = redis.call('HGETALL', hold)
  local live, latest = 0, 0
  for i = 1, #fields, 2 do
    if string.sub(fields[i], 1, 6) == 'level:' then
      local lapses = tonumber(fields[i + 1])
      if lapses > now then
        live = live + 1
        latest = math.max(latest, lapses)
      elseif prune then
        redis.call('HDEL', hold, fields[i])
      end
    end
  end
  return live, latest
end
