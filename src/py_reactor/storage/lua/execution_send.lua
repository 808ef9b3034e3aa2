-- A dispatcher is about to send jobs for these executions (a Celery message each): take the
-- ones still due now, push their due time out so no other dispatcher (or its next pass) sends
-- them again, and return their epochs, which the jobs carry.
-- KEYS[i] the record of ARGV[i + 1] (py_reactor:exec:<id>); each is due in its namespace's set
-- ARGV[1] ms after which the recovery loop may send a job again if this one never ran (doubled
-- for each send in a row that no claim followed, up to 32 times: a job that waits in a long
-- backlog is not copied again every ARGV[1] ms);
-- ARGV[i] (i >= 2) execution ids
-- Returns {id, epoch, queue, namespace, id, ...} for the ids taken (those not due now are left
-- alone); queue is the one the execution was first sent to ("" when none was recorded).
-- #include _now
-- #include _layout
local now = now_ms()
local taken = {}
for i = 1, #KEYS do
  local id = ARGV[i + 1]
  local due_set = queues_of(KEYS[i])  -- a record that is gone has none: nothing to send
  local due = redis.call('EXISTS', KEYS[i]) == 1 and redis.call('ZSCORE', due_set, id)
  if due and tonumber(due) <= now then
    local unclaimed = redis.call('HINCRBY', KEYS[i], 'sends', 1) - 1
    redis.call('ZADD', due_set, now + tonumber(ARGV[1]) * 2 ^ math.min(unclaimed, 5), id)
    taken[#taken + 1] = id
    local record = redis.call('HMGET', KEYS[i], 'epoch', 'queue', 'namespace')
    taken[#taken + 1] = record[1] or '0'
    taken[#taken + 1] = record[2] or ''
    taken[#taken + 1] = record[3] or ''
  end
end
return taken
