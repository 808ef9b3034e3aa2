-- _retention.lua: a library that scripts inline with an include line (see lua_source).
-- keep(record, readers, expiring, id, status, retention, now): an execution written with a
-- terminal `status` (completed, failed, halted, cancelled) expires `retention` ms from `now`,
-- with the list of readers parked on it (ZSET `expiring` remembers when, so the recovery pass
-- drops it from the index then); any other status keeps it for ever again (an undo takes a
-- completed execution back, say). `retention` "" keeps everything for ever.
local RETAINED = {completed = true, failed = true, halted = true, cancelled = true}
local function keep(record, readers, expiring, id, status, retention, now)
  if RETAINED[status] and retention ~= '' then
    local ms = tonumber(retention)
    redis.call('PEXPIRE', record, ms)
    redis.call('PEXPIRE', readers, ms)
    redis.call('ZADD', expiring, now + ms, id)
  elseif redis.call('PERSIST', record) == 1 then
    redis.call('ZREM', expiring, id)
  end
end
