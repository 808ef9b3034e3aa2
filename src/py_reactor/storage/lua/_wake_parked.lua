-- _wake_parked.lua: a library that scripts inline with an include line (see lua_source).
-- wake_parked(parked, all): a released key is handed on to the executions parked on it (the
-- releaser does the hand-off; the parked timer is only the backstop). Pops the oldest id from
-- LIST `parked` (all of them when `all`), and for each that is still parked (a member of its
-- namespace's due set) makes it due now and pushes it to that namespace's ready list, which
-- its dispatchers block on: a key is shared by every application on the store, each parked
-- execution goes back to its own. Returns how many executions were woken. Costs one LPOP when
-- nobody is parked.
-- #include _layout
local function wake_parked(parked, all)
  local woken = 0
  while true do
    local id = redis.call('LPOP', parked)
    if not id then
      return woken
    end
    local due, ready = queues_of(EXECUTION_PREFIX .. id)
    if redis.call('ZSCORE', due, id) then
      local t = redis.call('TIME')
      redis.call('ZADD', due, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), id)
      redis.call('RPUSH', ready, id)
      redis.call('LTRIM', ready, -10000, -1)  -- a wake signal, not the truth: keep it bounded
      woken = woken + 1
      if not all then
        return woken
      end
    end
  end
end
