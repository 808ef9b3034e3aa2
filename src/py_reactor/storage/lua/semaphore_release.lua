-- Release one level of an owner's slot; at zero, hand the slot to the oldest live waiter.
-- KEYS[1] holders zset owner -> lease expiry; KEYS[2] counts hash owner -> nesting count
-- KEYS[3] queue zset of waiters "<waiter>|<owner>|<lease_ms>"; KEYS[4] deadlines hash
-- ARGV[1] owner; ARGV[2] wake-key prefix ("py_reactor:wake:")
-- Writes on handoff: the new holder's lease and count, LIST <prefix><waiter> = "1" (a waiter
-- whose owner already holds a slot re-enters it, and the freed slot goes on to the next)
-- Returns the remaining count (> 0: still held), 0 when released, -1 when not held
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return -1
end
local count = redis.call('HINCRBY', KEYS[2], ARGV[1], -1)
if count > 0 then
  return count
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local now_ms = nil
while true do
  local head = redis.call('ZRANGE', KEYS[3], 0, 0)
  if #head == 0 then
    return 0
  end
  if not now_ms then  -- the clock is read only when someone waits
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local member = head[1]
  local deadline = tonumber(redis.call('HGET', KEYS[4], member) or '0')
  redis.call('ZREM', KEYS[3], member)
  redis.call('HDEL', KEYS[4], member)
  if deadline > now_ms then
    local waiter, owner, lease = string.match(member, '^([^|]+)|(.*)|(%d+)$')
    -- An owner that already holds a slot re-enters it without taking the freed one.
    local had_slot = redis.call('ZSCORE', KEYS[1], owner)
    redis.call('ZADD', KEYS[1], now_ms + tonumber(lease), owner)
    redis.call('HINCRBY', KEYS[2], owner, 1)
    if redis.call('PTTL', KEYS[1]) < tonumber(lease) then
      redis.call('PEXPIRE', KEYS[1], lease)
      redis.call('PEXPIRE', KEYS[2], lease)
    end
    local wake = ARGV[2] .. waiter
    redis.call('RPUSH', wake, '1')
    -- Outlive the handed slot's lease: a waiter that reads it late must still learn it holds.
    redis.call('PEXPIRE', wake, deadline - now_ms + tonumber(lease) + 1000)
    if not had_slot then
      return 0  -- the freed slot is taken; otherwise hand it on to the next waiter
    end
  end
end
