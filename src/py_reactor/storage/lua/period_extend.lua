-- Push a held period claim's lease out again (called by the background extender).
--
-- KEYS[1]  claim: py_reactor:period:{<key>}:claim:<bucket id> (of the bucket claimed)
-- ARGV[1]  owner of the claim
-- ARGV[2]  lease, ms
--
-- Returns 1 if the owner still holds the claim (its lease now ends ARGV[2] ms from now),
-- else 0.
--
-- Keys touched:
--   claim  hash {owner, bucket, expire_at, count}: PEXPIRE ARGV[2] when owned.
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
