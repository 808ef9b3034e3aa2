-- _queue.lua: a library that scripts inline with an include line (see lua_source).
-- The FIFO queue of a lock's or a semaphore's waiters is one zset: member
-- "<waiter>|<by>|<owner>|<ttl_ms>|<wait_ms>", score = the server time it queued at (us). A
-- waiter gives up wait_ms after it queued, so its deadline needs no second structure. <by>
-- (no "|"; may be empty) names the execution and step the hold is for: a handoff records it.
-- wake_prefix(queue): the prefix of the wake lists of the queue's waiters (same hash tag).
local function wake_prefix(queue)
  return string.sub(queue, 1, -7) .. ':wake:'  -- "<base>:queue" -> "<base>:wake:"
end
-- pop_live(queue, now_ms): pop waiters oldest first, dropping the ones that gave up (and any
-- member that does not parse); returns waiter, owner, ttl_ms, deadline (server ms) and by of
-- the first live one, or nil when none is left.
local function pop_live(queue, now_ms)
  while true do
    local head = redis.call('ZPOPMIN', queue)
    if #head == 0 then
      return nil
    end
    local waiter, by, owner, ttl, wait =
      string.match(head[1], '^([^|]+)|([^|]*)|(.*)|(%d+)|(%d+)$')
    if waiter then
      local deadline = math.floor(tonumber(head[2]) / 1000) + tonumber(wait)
      if deadline > now_ms then
        return waiter, owner, tonumber(ttl), deadline, by
      end
    end
  end
end
-- join_queue(queue, member, now_us, ttl_ms): queue `member` at `now_us` unless it is queued
-- already (a retry keeps its place and its deadline); the queue outlives its wait plus ttl_ms.
local function join_queue(queue, member, now_us, ttl_ms)
  if redis.call('ZADD', queue, 'NX', now_us, member) == 1 then
    local keep_ms = tonumber(string.match(member, '|(%d+)$')) + ttl_ms
    if redis.call('PTTL', queue) < keep_ms then
      redis.call('PEXPIRE', queue, 2 * keep_ms)  -- twice: the next waiters need not renew it
    end
  end
end
