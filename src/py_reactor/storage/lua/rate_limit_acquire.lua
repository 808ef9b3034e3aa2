-- Admit one call under every window of a rate limit, or none: check all, then count all.
--
-- KEYS[i]  counter prefix of window i: py_reactor:rate_limit:{<key>}:<window seconds>; the
--          counter of the current window is built here (it comes from the server clock) and
--          shares the prefix's hash tag (the rate limit's key)
-- ARGV[2i-1]  window i length (whole seconds)
-- ARGV[2i]    window i limit (calls admitted per window)
--
-- Returns 0 when admitted (every window counted once), else
-- {retry_after_ms, full window seconds, ...}: nothing is counted, and retry_after_ms is the
-- time until the end of the full window that ends last (server clock).
--
-- Keys touched:
--   <prefix>:<floor(now / window)>  string, the count of calls admitted in that window;
--                                   expires (EXPIREAT) when the window ends.
local time = redis.call('TIME')
local now = tonumber(time[1])
local now_ms = now * 1000 + math.floor(tonumber(time[2]) / 1000)
local counters = {}
local ends = {}
local refused = nil
local retry_ms = 0
for i = 1, #KEYS do
  local window = tonumber(ARGV[2 * i - 1])
  local bucket = math.floor(now / window)
  local counter = KEYS[i] .. ':' .. string.format('%d', bucket)
  local ends_at = (bucket + 1) * window
  local used = tonumber(redis.call('GET', counter) or '0')
  if used >= tonumber(ARGV[2 * i]) then
    refused = refused or {0}
    refused[#refused + 1] = window
    local left_ms = ends_at * 1000 - now_ms
    if left_ms > retry_ms then
      retry_ms = left_ms
    end
  end
  counters[i] = counter
  ends[i] = ends_at
end
if refused then
  refused[1] = retry_ms
  return refused
end
for i = 1, #counters do
  if redis.call('INCR', counters[i]) == 1 then
    redis.call('EXPIREAT', counters[i], ends[i])
  end
end
return 0
