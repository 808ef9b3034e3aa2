-- Check or claim the current bucket of a period: the work runs once per bucket.
--
-- KEYS[1]  marker prefix: py_reactor:period:{<key>}:done (the marker is <prefix>:<bucket id>)
-- KEYS[2]  claim prefix: py_reactor:period:{<key>}:claim (the claim is <prefix>:<bucket id>, so
--          a claim still held on the last bucket never holds up the current one)
-- KEYS[3]  waiters: py_reactor:period:{<key>}:waiters
-- The bucket comes from the server clock, so the marker and claim names are built here from
-- the prefixes; they share the prefixes' hash tag (the period's key), so all is one slot.
-- ARGV[1]  mode: 'check' (read only) or 'claim'
-- ARGV[2]  every: 'minute', 'hour', 'day', 'week', 'month', 'year' or a number of seconds
-- ARGV[3]  owner of the claim                                   (claim mode only)
-- ARGV[4]  claim lease, ms                                      (claim mode only)
-- ARGV[5]  waiter id to queue if the claim is busy, '' for none (claim mode only)
-- ARGV[6]  how long that waiter stays queued, ms                (claim mode only)
--
-- The bucket comes from the server clock (UTC): 'minute' -> 2024-05-01T13:45,
-- 'hour' -> 2024-05-01T13, 'day' -> 2024-05-01, 'week' -> 2024-W18 (ISO week, from Monday),
-- 'month' -> 2024-05, 'year' -> 2024, N seconds -> <N>s-<floor(now / N)>.
--
-- Returns {status, bucket id, marker expire-at (unix seconds), n}:
--   check mode: status 1 if the bucket is marked done, else 0; n is 0.
--   claim mode: status 0  the bucket is already marked done; nothing is held.
--               status 1  the caller holds the claim (taken now, or again by the same owner:
--                         then the bucket is the one recorded when it was taken); n = nesting.
--               status 2  another owner holds the claim; n = its remaining lease, ms. The
--                         waiter (if any) is queued to be woken by the release.
--
-- Keys touched:
--   <prefix>:<bucket id>  string (the owner that marked it): the bucket's work is done;
--                         expires 60 s after the bucket ends (written by period_release).
--   <claim prefix>:<bucket id>  hash {owner, bucket, expire_at, count}: who is running this
--                         bucket's work; expires after the lease unless extended.
--   waiters               sorted set of waiter ids, scored by the server time (ms) until
--                         which each waits; expires with the last of them.
local MARKER_GRACE = 60

local function days_from_civil(y, m, d)
  if m <= 2 then
    y = y - 1
  end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m > 2) and (m - 3) or (m + 9)
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor(
    (doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = (mp < 10) and (mp + 3) or (mp - 9)
  local y = yoe + era * 400
  if m <= 2 then
    y = y + 1
  end
  return y, m, d
end

-- The bucket id holding `now` and the unix second at which that bucket ends.
local function bucket_of(every, now)
  local seconds = tonumber(every)
  if seconds then
    local index = math.floor(now / seconds)
    return string.format('%ds-%d', seconds, index), (index + 1) * seconds
  end
  local day = math.floor(now / 86400)
  local y, m, d = civil_from_days(day)
  local date = string.format('%04d-%02d-%02d', y, m, d)
  local into_day = now - day * 86400
  local hour = math.floor(into_day / 3600)
  if every == 'minute' then
    local minute = math.floor((into_day % 3600) / 60)
    return string.format('%sT%02d:%02d', date, hour, minute), math.floor(now / 60) * 60 + 60
  elseif every == 'hour' then
    return string.format('%sT%02d', date, hour), math.floor(now / 3600) * 3600 + 3600
  elseif every == 'day' then
    return date, (day + 1) * 86400
  elseif every == 'week' then
    local monday = day - (day + 3) % 7 -- 1970-01-01 was a Thursday
    local week_year = civil_from_days(monday + 3) -- the ISO year is the Thursday's year
    local week = math.floor((monday + 3 - days_from_civil(week_year, 1, 1)) / 7) + 1
    return string.format('%04d-W%02d', week_year, week), (monday + 7) * 86400
  elseif every == 'month' then
    local next_y, next_m = y, m + 1
    if next_m == 13 then
      next_y, next_m = y + 1, 1
    end
    return string.format('%04d-%02d', y, m), days_from_civil(next_y, next_m, 1) * 86400
  elseif every == 'year' then
    return string.format('%04d', y), days_from_civil(y + 1, 1, 1) * 86400
  end
  error('period: unknown every ' .. tostring(every))
end

local time = redis.call('TIME')
local now = tonumber(time[1])
local bucket, ends_at = bucket_of(ARGV[2], now)
local expire_at = ends_at + MARKER_GRACE
local done = redis.call('EXISTS', KEYS[1] .. ':' .. bucket)

if ARGV[1] == 'check' then
  return {done, bucket, expire_at, 0}
end

local waiter = ARGV[5]
if done == 1 then
  if waiter ~= '' then
    redis.call('ZREM', KEYS[3], waiter)
  end
  return {0, bucket, expire_at, 0}
end

local claim = KEYS[2] .. ':' .. bucket
local owner = ARGV[3]
local holder = redis.call('HGET', claim, 'owner')
if not holder then
  redis.call('HSET', claim, 'owner', owner, 'bucket', bucket, 'expire_at', expire_at,
    'count', 1)
  redis.call('PEXPIRE', claim, ARGV[4])
  if waiter ~= '' then
    redis.call('ZREM', KEYS[3], waiter)
  end
  return {1, bucket, expire_at, 1}
end
if holder == owner then
  local count = redis.call('HINCRBY', claim, 'count', 1)
  redis.call('PEXPIRE', claim, ARGV[4])
  if waiter ~= '' then
    redis.call('ZREM', KEYS[3], waiter)
  end
  local held = redis.call('HMGET', claim, 'bucket', 'expire_at')
  return {1, held[1], tonumber(held[2]), count}
end

if waiter ~= '' then
  local now_ms = now * 1000 + math.floor(tonumber(time[2]) / 1000)
  local stay_ms = tonumber(ARGV[6])
  redis.call('ZADD', KEYS[3], now_ms + stay_ms, waiter)
  if redis.call('PTTL', KEYS[3]) < stay_ms then
    redis.call('PEXPIRE', KEYS[3], stay_ms)
  end
end
return {2, bucket, expire_at, redis.call('PTTL', claim)}
