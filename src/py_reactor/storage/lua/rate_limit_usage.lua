-- Read how many calls each window of a rate limit has admitted so far (read-only).
--
-- KEYS[i]  counter prefix of window i: py_reactor:rate_limit:{<key>}:<window seconds> (the
--          current window's counter, built here, shares its hash tag)
-- ARGV[i]  window i length (whole seconds)
--
-- Returns {count of window 1, count of window 2, ...} for the windows current on the server
-- clock (0 for a window nothing was admitted in).
--
-- Keys touched (read only):
--   <prefix>:<floor(now / window)>  string, the count of calls admitted in that window.
local now = tonumber(redis.call('TIME')[1])
local counts = {}
for i = 1, #KEYS do
  local window = tonumber(ARGV[i])
  local counter = KEYS[i] .. ':' .. string.format('%d', math.floor(now / window))
  counts[i] = tonumber(redis.call('GET', counter) or '0')
end
return counts
