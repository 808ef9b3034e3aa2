-- Release one level of a re-entrant lock; at zero, hand it to the oldest live waiter.
-- KEYS[1] hold      hash {owner, count, token, waiting}
-- KEYS[2] queue     zset of waiters, member "<waiter>|<owner>|<ttl_ms>", score = enqueue time
-- KEYS[3] deadlines hash member -> server ms after which the waiter has given up
-- ARGV[1] owner; ARGV[2] wake-key prefix ("py_reactor:wake:")
-- Writes on handoff: the hold (new owner, count 1, new token) and LIST <prefix><waiter> = token
-- Returns the remaining count (> 0: still held by ARGV[1]), 0 when released, -1 when not held
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token', 'waiting')
if h[1] ~= ARGV[1] then
  return -1
end
if tonumber(h[2]) > 1 then
  return redis.call('HINCRBY', KEYS[1], 'count', -1)
end
redis.call('HDEL', KEYS[1], 'owner', 'count', 'waiting')  -- the token stays until the key expires
if not h[4] then
  return 0  -- nobody queued while we held it
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
while true do
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #head == 0 then
    return 0
  end
  local member = head[1]
  local deadline = tonumber(redis.call('HGET', KEYS[3], member) or '0')
  redis.call('ZREM', KEYS[2], member)
  redis.call('HDEL', KEYS[3], member)
  if deadline > now_ms then
    local waiter, owner, ttl = string.match(member, '^([^|]+)|(.*)|(%d+)$')
    local token = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), tonumber(h[3]) + 1)
    redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'token', token)
    if redis.call('ZCARD', KEYS[2]) > 0 then
      redis.call('HSET', KEYS[1], 'waiting', 1)
    end
    redis.call('PEXPIRE', KEYS[1], ttl)
    local wake = ARGV[2] .. waiter
    redis.call('RPUSH', wake, token)
    redis.call('PEXPIRE', wake, deadline - now_ms + 1000)
    return 0
  end
end
