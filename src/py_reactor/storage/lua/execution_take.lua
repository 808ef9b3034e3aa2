-- Take an execution out of the workers' hands for an operation (cancel, undo): only from one of
-- the statuses the operation accepts, and never while a runner's lease is live.
-- KEYS[1] record hash; KEYS[2] leases zset; KEYS[3] readers parked waiting for it to end;
-- KEYS[4] the correlation id it holds while paused at an interrupt ("" when none): given up if
-- it is still this execution's; KEYS[5] expiring zset (see execution_checkpoint)
-- ARGV[1] id; ARGV[2] the status to set; ARGV[3] a field marking that this operation was done
-- ("" when none): refused if the record has it, set with the take (an undo runs once);
-- ARGV[4] ms a terminal record is kept ("" for ever); ARGV[i], i >= 5: the statuses it may be
-- taken from
-- Bumps the epoch (a runner that claimed before writes nothing more), takes it out of its
-- namespace's due set and the leases; a terminal new status wakes its parked readers (and
-- starts its retention), a live one keeps it for ever again.
-- Returns {new epoch, previous status}; {0, status} when refused; {-1, ""} when unknown.
-- #include _now
-- #include _wake_parked
-- #include _retention
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return {-1, ''}
end
local allowed = false
for i = 5, #ARGV do
  if ARGV[i] == status then
    allowed = true
  end
end
local now = now_ms()
local lease = redis.call('ZSCORE', KEYS[2], ARGV[1])
local done = ARGV[3] ~= '' and redis.call('HGET', KEYS[1], ARGV[3])
if (not allowed) or done or (lease and tonumber(lease) > now) then
  return {0, status}
end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[1], ARGV[3], '1')
end
redis.call('HSET', KEYS[1], 'status', ARGV[2], 'updated_at', now, 'waiting_on', '',
  'timeout_at', '')
if KEYS[4] and KEYS[4] ~= '' and redis.call('GET', KEYS[4]) == ARGV[1] then
  redis.call('DEL', KEYS[4])
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', (queues_of(KEYS[1])), ARGV[1])
if ARGV[2] == 'cancelled' then
  wake_parked(KEYS[3], true)
end
keep(KEYS[1], KEYS[3], KEYS[5], ARGV[1], ARGV[2], ARGV[4], now)
return {epoch, status}
