-- A waiter gives up: leave the queue, unless a release already handed it the key (lock or slot).
-- KEYS[1] queue zset of waiters; KEYS[2] the waiter's wake list
-- ARGV[1] queue member "<waiter>|<owner>|<ttl_ms>|<wait_ms>"
-- (used by lock and semaphore: a handoff pushes the token, or "1" for a semaphore slot)
-- Returns 0 when it left the queue (not holding), else the token it was handed (now holding)
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  return 0
end
local token = redis.call('LPOP', KEYS[2])
if token then
  return tonumber(token)
end
return 0
