-- Write an execution's progress, if the caller still owns it (compare-and-set on the epoch).
-- KEYS[1] record hash; KEYS[2] leases zset; KEYS[3] parked list of the key waited on
-- (py_reactor:<primitive>:{<key>}:parked, "" when none); KEYS[4] the list of those parked
-- waiting for this execution to end (readers of an async unit's result); KEYS[5] the record of
-- the execution this one parks waiting for ("" when none); KEYS[6] what tells whether the key
-- parked on is free now ("" when nothing: see ARGV[10]); KEYS[7] expiring zset
-- (see _retention). Its due set and ready list are its namespace's (see _layout).
-- The record and the global sets are not in one hash slot (nor is the key's parked list): this
-- script is cross-slot, as execution records are until the due set is sharded.
-- ARGV[1] id; ARGV[2] epoch; ARGV[3] context JSON; ARGV[4] status; ARGV[5] lease ms (running),
-- ARGV[6] waiting_on JSON ("" when none); ARGV[7] outcome JSON ("" when none);
-- ARGV[8] due in ms (parked: when the timer backstop dispatches it again), "" when not parked;
-- ARGV[9] "1" to count one more park; ARGV[10] how to read KEYS[8]: "lock" (the lock's hold
-- hash: free without an owner), "period" (the claim hash of the bucket it met busy: free
-- without an owner), "semaphore:<limit>" (its holders zset: free with fewer live leases than
-- limit) or "ordered:<epoch>:<number>" (the ordered lock's state hash: free once every earlier
-- position is done, or once that epoch has ended), "" for none; ARGV[11] ms a terminal record
-- is kept ("" for ever, see _retention)
-- A terminal status wakes everything parked waiting for this execution (KEYS[4]). A park on
-- an execution that has ended already is due at once (it ended between look and park), and so
-- is a park on a lock, semaphore, period claim or ordered turn that is free by now: it was
-- released (or the turn passed on) between
-- the busy answer and this write, when nobody was in its parked list to be woken.
-- Returns 1 when written, 0 when the epoch moved on (a newer runner owns it: nothing written).
-- #include _now
-- #include _wake_parked
-- #include _retention
if tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1') ~= tonumber(ARGV[2]) then
  return 0
end
local terminal = {completed = true, failed = true, halted = true, aborted = true,
  cancelled = true}
local now = now_ms()
redis.call('HSET', KEYS[1], 'context', ARGV[3], 'status', ARGV[4], 'updated_at', now,
  'waiting_on', ARGV[6], 'outcome', ARGV[7])
if ARGV[9] == '1' then
  redis.call('HINCRBY', KEYS[1], 'parks', 1)
end
if ARGV[4] == 'running' then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
if ARGV[8] ~= '' then
  local awaited = KEYS[5] ~= '' and redis.call('HGET', KEYS[5], 'status')
  local free = false
  if KEYS[6] ~= '' and (ARGV[10] == 'lock' or ARGV[10] == 'period') then
    free = not redis.call('HGET', KEYS[6], 'owner')
  elseif KEYS[6] ~= '' and string.sub(ARGV[10], 1, 10) == 'semaphore:' then
    free = redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf') < tonumber(string.sub(ARGV[10], 11))
  elseif KEYS[6] ~= '' and string.sub(ARGV[10], 1, 8) == 'ordered:' then
    local epoch, number = string.match(ARGV[10], '^ordered:(%d+):(%d+)$')
    local state = redis.call('HMGET', KEYS[6], 'epoch', 'done')
    free = state[1] ~= epoch or tonumber(state[2] or '0') + 1 >= tonumber(number)
  end
  local due, ready = queues_of(KEYS[1])
  if free or (awaited and terminal[awaited]) then
    redis.call('ZADD', due, now, ARGV[1])
    redis.call('RPUSH', ready, ARGV[1])
  else
    redis.call('ZADD', due, now + tonumber(ARGV[8]), ARGV[1])
    if KEYS[3] ~= '' then
      redis.call('RPUSH', KEYS[3], ARGV[1])
    end
  end
end
if terminal[ARGV[4]] then
  wake_parked(KEYS[4], true)
end
keep(KEYS[1], KEYS[4], KEYS[7], ARGV[1], ARGV[4], ARGV[11], now)
return 1
