-- A dispatcher is about to send jobs for these executions (a Celery message each): take the
-- ones still due now, push their due time out so no other dispatcher (or its next pass) sends
-- them again, and return their epochs, which the jobs carry.
-- KEYS[1] due zset id -> due ms; KEYS[i] (i >= 2) the record of ARGV[i] (py_reactor:exec:<id>)
-- ARGV[1] ms after which the recovery loop may send a job again if this one never ran;
-- ARGV[i] (i >= 2) execution ids
-- Returns {id, epoch, queue, id, epoch, queue, ...} for the ids taken (those not due now are
-- left alone); queue is the one the execution was first sent to ("" when none was recorded).
-- #include _now
local now = now_ms()
local taken = {}
for i = 2, #ARGV do
  local due = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if due and tonumber(due) <= now then
    redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i])
    taken[#taken + 1] = ARGV[i]
    local record = redis.call('HMGET', KEYS[i], 'epoch', 'queue')
    taken[#taken + 1] = record[1] or '0'
    taken[#taken + 1] = record[2] or ''
  end
end
return taken
