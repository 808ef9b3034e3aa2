-- Take a re-entrant lock, or queue up to be handed it on release.
-- KEYS[1] hold      hash {owner, count, token, waiting, by, seq, level:<n>}; owner absent =
--                   free. Expires with its latest level (see _lock_levels); kept (without owner)
--                   after a release, so the token survives.
-- KEYS[2] queue     zset of waiters, member "<waiter>|<by>|<owner>|<ttl_ms>|<wait_ms>", score =
--                   enqueue time (server us); see _queue
-- KEYS[3] wake      the waiter's list a release pushes the token to: passed only when retrying
--                   after a sleep (only then can we be queued or handed the lock)
-- ARGV[1] owner; ARGV[2] ttl_ms; ARGV[3] queue member, when the caller will wait ('' if not);
-- ARGV[4] by: the execution and step the hold is for, written with a fresh hold ('' for none)
-- A caller that will wait passes its member on the first call too: a free lock is simply taken
-- (nothing is queued), a busy one queues it, so contention costs no extra round trip.
-- Every key shares KEYS[1]'s hash tag (the lock's key). So do the waiters' wake lists, which a
-- handoff names from the queue's name: "<queue without :queue>:wake:<waiter>".
-- Returns {1, count, token, level} when held (count > 1: re-entered; level: the caller's own,
-- which it releases and extends), {0, holder pttl_ms, 0, 0} when busy.
-- The fencing token is the previous one + 1 while the hash keeps it, else the server time in us
-- (ahead of every earlier token, which grew by one per acquisition, at most one per us):
-- strictly increasing per key without a counter that would have to live forever.
-- A re-entry adds a level of its own beside the owner's live ones (see _lock_levels); an owner
-- whose levels all lapsed takes the lock afresh, under a new token.
-- A free lock with live waiters queued (its holder died, so no release handed it on) goes to
-- the oldest of them, not to whoever asks first.
-- #include _now
-- #include _queue
-- #include _lock_handoff
-- #include _lock_levels
local member = ARGV[3] or ''
local me = string.match(member, '^[^|]*')  -- our waiter id ('' when we will not wait)
local retry = KEYS[3] ~= nil
local queue = KEYS[2]
local ttl = tonumber(ARGV[2])
if retry then
  -- A release may have handed us the lock after our last sleep ended: that is our hold.
  local handed = redis.call('LPOP', KEYS[3])
  if handed then
    return {1, 1, tonumber(handed), 1}
  end
end
local function leave_queue()
  if retry then  -- only a retry can have been queued
    redis.call('ZREM', queue, member)
  end
end
-- Re-enter our owner's hold with a level of our own; nil when every level of it lapsed.
local function reenter(token)
  local now = now_ms()
  local live = live_levels(KEYS[1], now, true)
  if live == 0 then
    return nil
  end
  leave_queue()
  local level = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  redis.call('HSET', KEYS[1], 'count', live + 1)
  add_level(KEYS[1], level, now, ttl)
  return {1, live + 1, tonumber(token), level}
end
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'waiting')
if h[1] == ARGV[1] then
  local held = reenter(h[2])
  if held then
    return held
  end
  redis.call('DEL', KEYS[1])  -- our levels all lapsed this very ms: the hold is gone
  h = {false, false, false}
end
if not h[1] then
  local prev = tonumber(h[2] or '0')
  -- Waiters queue only behind a live holder, whose release hands the lock on; only a hold
  -- that expired (its hash is gone) can have left live waiters behind.
  if not h[2] and redis.call('EXISTS', queue) == 1 then
    local handed = hand_off(KEYS[1], queue, prev, redis.call('TIME'))
    if handed and handed == me then
      return {1, 1, tonumber(redis.call('LPOP', KEYS[3])), 1}  -- we were the oldest live waiter
    end
    if handed then
      h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'waiting')
      if h[1] == ARGV[1] then  -- handed to our own owner: we share its hold
        local held = reenter(h[2])
        if held then
          return held
        end
      end
      -- busy now: fall through to queue up behind the new holder
    end
  end
  if not h[1] then
    leave_queue()
    local token = prev + 1  -- the hash kept the last token: counting on from it is enough
    local t = redis.call('TIME')
    if not h[2] then  -- expired (or new): start from the clock, past every earlier token
      token = math.max(tonumber(t[1]) * 1000000 + tonumber(t[2]), prev + 1)
    end
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'count', 1, 'token', token, 'seq', 1,
      'level:1', now + ttl)
    if (ARGV[4] or '') ~= '' then
      redis.call('HSET', KEYS[1], 'by', ARGV[4])
    end
    redis.call('PEXPIRE', KEYS[1], ttl)
    return {1, 1, token, 1}
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if member ~= '' then
  local t = redis.call('TIME')
  join_queue(queue, member, tonumber(t[1]) * 1000000 + tonumber(t[2]), ttl)
  if not h[3] then
    redis.call('HSET', KEYS[1], 'waiting', 1)  -- tells the holder's release to look at the queue
  end
end
return {0, pttl, 0, 0}
