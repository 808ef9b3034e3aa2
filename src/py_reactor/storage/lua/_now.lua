-- _now.lua: a library that scripts inline with an include line (see lua_source).
-- now_ms(): the server's clock in milliseconds (every process agrees on it).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
