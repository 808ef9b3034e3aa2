-- A dispatcher is about to send jobs for these executions (a Celery message each): take the
-- ones still due now, push their due time out so no other dispatcher (or its next pass) sends
-- them again, and return their epochs, which the jobs carry.
-- KEYS[1] due zset id -> due ms; KEYS[i] (i >= 2) the record of ARGV[i] (py_reactor:exec:<id>)
-- ARGV[1] ms after which the recovery loop may send a job again if this one never ran (doubled
-- for each send in a row that no claim followed, up to 32 times: a job that waits in a long
-- backlog is not copied again every ARGV[1] ms);
-- ARGV[i] (i >= 2) execution ids
-- Returns {id, epoch, queue, id, epoch, queue, ...} for the ids taken (those not due now are
-- left alone); queue is the one the execution was first sent to ("" when none was recorded).
-- #include _now
local now = now_ms()
local taken = {}
for i = 2, #ARGV do
  local due = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if due and redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('ZREM', KEYS[1], ARGV[i])  -- its record is gone: nothing to send
  elseif due and tonumber(due) <= now then
    local unclaimed = redis.call('HINCRBY', KEYS[i], 'sends', 1) - 1
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]) * 2 ^ math.min(unclaimed, 5), ARGV[i])
    taken[#taken + 1] = ARGV[i]
    local record = redis.call('HMGET', KEYS[i], 'epoch', 'queue')
    taken[#taken + 1] = record[1] or '0'
    taken[#taken + 1] = record[2] or ''
  end
end
return taken
