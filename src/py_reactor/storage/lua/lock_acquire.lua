-- Take a re-entrant lock, or queue up to be handed it on release.
-- KEYS[1] hold      hash {owner, count, token, waiting}; owner absent = free. Expires after the
--                   holder's ttl; kept (without owner) after a release, so the token survives.
-- KEYS[2] queue     zset of waiters, member "<waiter>|<owner>|<ttl_ms>", score = enqueue time (us)
-- KEYS[3] deadlines hash member -> server ms after which the waiter has given up
-- KEYS[4] wake      the waiter's list a release pushes the token to (only when waiting)
-- ARGV[1] owner; ARGV[2] ttl_ms; ARGV[3] wake-list prefix of this lock's waiters
-- ("py_reactor:lock:{<key>}:wake:"; a handoff pushes to <prefix><waiter>); ARGV[4] queue member;
-- ARGV[5] wait_ms; ARGV[6] "1" when retrying after a sleep (only then can we be queued or
-- handed the lock).
-- A caller that will not wait passes only KEYS[1..3] and ARGV[1..3] (the common, cheap call).
-- Every key shares KEYS[1]'s hash tag (the lock's key), wake lists included.
-- Returns {1, count, token} when held (count > 1: re-entered), {0, holder pttl_ms, 0} when busy.
-- The fencing token is max(server time in us, previous token + 1): strictly increasing per key
-- without a counter that would have to live forever.
-- A free lock with live waiters queued (its holder died, so no release handed it on) goes to
-- the oldest of them, not to whoever asks first.
-- #include _lock_handoff
local member = ARGV[4] or ''
local retry = ARGV[6] == '1'
local queue, deadlines = KEYS[2], KEYS[3]
if retry then
  -- A release may have handed us the lock after our last sleep ended: that is our hold.
  local handed = redis.call('LPOP', KEYS[4])
  if handed then
    return {1, 1, tonumber(handed)}
  end
end
local function leave_queue()
  if member ~= '' then
    redis.call('ZREM', queue, member)
    redis.call('HDEL', deadlines, member)
  end
end
local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if not h[1] then
  local t = redis.call('TIME')
  local prev = tonumber(h[2] or '0')
  if redis.call('EXISTS', queue) == 1 then
    local handed = hand_off(KEYS[1], queue, deadlines, ARGV[3], prev, t)
    if handed == member then  -- we were the oldest live waiter
      return {1, 1, tonumber(redis.call('LPOP', KEYS[4]))}
    end
    if handed then
      if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then  -- handed to our own owner
        leave_queue()
        local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
        return {1, count, tonumber(redis.call('HGET', KEYS[1], 'token'))}
      end
      h[1] = handed  -- busy now: fall through to queue up behind the new holder
    end
  end
  if not h[1] then
    leave_queue()
    local token = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), prev + 1)
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'token', token)
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, 1, token}
  end
elseif h[1] == ARGV[1] then
  leave_queue()  -- another waiter of this owner was handed the lock: we share its hold
  local count = redis.call('HINCRBY', KEYS[1], 'count', 1)
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return {1, count, tonumber(h[2])}
end
local pttl = redis.call('PTTL', KEYS[1])
if member ~= '' then
  local t = redis.call('TIME')
  local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if redis.call('ZADD', queue, 'NX', now_us, member) == 1 then
    redis.call('HSET', deadlines, member, math.floor(now_us / 1000) + tonumber(ARGV[5]))
  end
  redis.call('HSET', KEYS[1], 'waiting', 1)  -- tells the holder's release to look at the queue
  local keep = tonumber(ARGV[5]) + tonumber(ARGV[2])
  if redis.call('PTTL', queue) < keep then
    redis.call('PEXPIRE', queue, keep)
    redis.call('PEXPIRE', deadlines, keep)
  end
end
return {0, pttl, 0}
