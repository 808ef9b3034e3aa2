-- Claim an execution for one runner: bump its epoch (the fencing number every checkpoint
-- compares) and give it a liveness lease.
-- KEYS[1] record hash; KEYS[2] leases zset id -> lease end ms (the due set is its namespace's)
-- ARGV[1] id; ARGV[2] worker name; ARGV[3] lease ms; ARGV[4] "1": only if it is due (popped
-- from the ready list or the due set by this caller); ARGV[5] the epoch the job was sent at,
-- or "" (a job, e.g. a Celery message, claims only if nobody claimed since it was sent: a
-- redelivered or duplicated message finds the epoch moved and runs nothing)
-- Returns the new epoch, 0 when another runner holds a live lease or it is not due,
-- -1 when unknown, -2 when it already ended (or is paused at an interrupt whose timeout has
-- not come: a resume, not a worker, takes it on; once its timeout_at has passed a worker
-- claims it, to fail the interrupt step).
-- #include _now
-- #include _layout
local due_set = queues_of(KEYS[1])
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return -1
end
if status == 'paused' then
  local timeout_at = tonumber(redis.call('HGET', KEYS[1], 'timeout_at') or '')
  if (not timeout_at) or timeout_at > now_ms() then
    return -2
  end
elseif status == 'completed' or status == 'failed' or status == 'halted'
    or status == 'cancelled' or status == 'aborted' then
  redis.call('ZREM', due_set, ARGV[1])
  return -2
end
if ARGV[5] and ARGV[5] ~= '' and tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
    ~= tonumber(ARGV[5]) then
  return 0
end
local now = now_ms()
local lease = redis.call('ZSCORE', KEYS[2], ARGV[1])
if lease and tonumber(lease) > now then
  return 0
end
if ARGV[4] == '1' then
  local due = redis.call('ZSCORE', due_set, ARGV[1])
  if (not due) or tonumber(due) > now then
    return 0
  end
end
redis.call('ZREM', due_set, ARGV[1])
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[2], 'updated_at', now,
  'sends', 0, 'timeout_at', '',  -- the sends of execution_send since the last claim
  'unimportable_since', '')  -- a worker that can import it: the next one gets a whole grace
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
return epoch
