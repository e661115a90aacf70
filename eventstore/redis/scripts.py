"""Every Lua script that writes a Redis store, in one place (as eventstore/pg/statements.py is
for PostgreSQL): the service changes the store only through these.

Keys of partition N share the hash tag `{pN}` (keys.py), so one script touches one slot. Each
write is fenced on the partition's head hash: it changes the log only while (epoch, owner)
still name the writer and, for appends, while the head still holds the batch's predecessor
(last_seq, last_h). A script checks everything before its first write, so it writes all or
nothing (Redis does not roll a script back), and a fenced one answers 0. Times are the
server's (`TIME`), in milliseconds; `lease_until` 0 means never taken. The `#!lua` line makes
the server refuse a script outright when it is out of memory, before any write.
"""

from __future__ import annotations

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_OURS = """
local function ours(epoch, owner)
  local h = redis.call('HMGET', KEYS[1], 'epoch', 'owner')
  if h[1] == false then error('LMSTORE no head: run init-store') end
  return h[1] == epoch and h[2] == owner
end
"""

# ---- leadership (lease.py) -------------------------------------------------------------------

# KEYS: head. ARGV: owner, ms. Only when the lease expired (or was released) by the server's
# clock; the epoch is the fencing token. Answers the new epoch, or nil.
TAKE = (
    "#!lua\n"
    + _NOW
    + """
local until_ = redis.call('HGET', KEYS[1], 'lease_until')
if until_ == false then return redis.error_reply('LMSTORE no head: run init-store') end
if tonumber(until_) >= now then return nil end
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease_until', now + tonumber(ARGV[2]))
return epoch
"""
)

# KEYS: head. ARGV: epoch, owner, ms. Answers 1 (renewed) or 0 (not ours).
RENEW = (
    "#!lua\n"
    + _NOW
    + _OURS
    + """
if not ours(ARGV[1], ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', now + tonumber(ARGV[3]))
return 1
"""
)

# A released lease is expired at once, so another replica can take it without waiting.
RELEASE = (
    "#!lua\n"
    + _NOW
    + _OURS
    + """
if not ours(ARGV[1], ARGV[2]) then return 0 end
redis.call('HSET', KEYS[1], 'lease_until', now - 1)
return 1
"""
)

# ---- appends (sink.py) -----------------------------------------------------------------------

# KEYS: head, log, roots, cp, cpidx.
# ARGV: epoch, owner, ms, first_seq, prev, last_h, count, sealed_segment, sealed_root, cp_size,
#       cp_text, then `count` lines. The four segment arguments are empty but for a segment.open
#       after the first: the sealed segment's root (a takeover rebuilds the Merkle state from
#       these) and the checkpoint embedded in the open go in with it, all or nothing.
# Each line becomes stream entry `<seq>-1`; the head moves and the lease is renewed. Answers 1
# (committed) or 0 (the head is not the batch's predecessor under our epoch: nothing written).
APPEND = (
    "#!lua\n"
    + _NOW
    + """
local h = redis.call('HMGET', KEYS[1], 'last_seq', 'last_h', 'epoch', 'owner', 'lease_until')
if h[1] == false then return redis.error_reply('LMSTORE no head: run init-store') end
local first = tonumber(ARGV[4])
if tonumber(h[1]) ~= first - 1 or h[2] ~= ARGV[5] or h[3] ~= ARGV[1] or h[4] ~= ARGV[2] then
  return 0
end
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if top[1] ~= nil and tonumber(string.match(top[1][1], '^(%d+)-')) >= first then
  return redis.error_reply('LMCORRUPT the stream holds seq ' .. top[1][1] .. ' past the head')
end
local count = tonumber(ARGV[7])
for i = 1, count do
  redis.call('XADD', KEYS[2], (first + i - 1) .. '-1', 'l', ARGV[11 + i])
end
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[8], ARGV[9])
  if redis.call('HSETNX', KEYS[4], ARGV[10], ARGV[11]) == 1 then
    redis.call('ZADD', KEYS[5], ARGV[10], ARGV[10])
  end
end
local until_ = math.max(tonumber(h[5]), now + tonumber(ARGV[3]))
redis.call('HSET', KEYS[1], 'last_seq', first + count - 1, 'last_h', ARGV[6],
           'lease_until', until_)
return 1
"""
)

# KEYS: head, cp, cpidx. ARGV: epoch, owner, size, text. A signed checkpoint, only under our
# epoch and only for records the head holds. Answers 1 (stored, or there already), 2 (ours but
# beyond the head: nothing stored), 0 (not ours).
CHECKPOINT = (
    "#!lua\n"
    + _OURS
    + """
if not ours(ARGV[1], ARGV[2]) then return 0 end
local size = tonumber(ARGV[3])
if tonumber(redis.call('HGET', KEYS[1], 'last_seq')) < size - 1 then return 2 end
if redis.call('HSETNX', KEYS[2], ARGV[3], ARGV[4]) == 1 then
  redis.call('ZADD', KEYS[3], size, ARGV[3])
end
return 1
"""
)

# ---- redaction (sink.py) ---------------------------------------------------------------------

# KEYS: head, log, erased. ARGV: epoch, owner, then pairs (seq, redacted line). A stream entry
# cannot be rewritten in place: the target's entry is deleted and its redacted line kept in the
# `erased` hash, where every read looks for a seq the stream lacks. Idempotent. Answers 1 or 0.
REDACT = (
    "#!lua\n"
    + _OURS
    + """
if not ours(ARGV[1], ARGV[2]) then return 0 end
for i = 3, #ARGV, 2 do
  redis.call('XDEL', KEYS[2], ARGV[i] .. '-1')
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
return 1
"""
)

# ---- replicas (lease.py) ---------------------------------------------------------------------

# KEYS: replicas (id -> url), seen (id scored by the server's ms). ARGV: id, url.
HEARTBEAT = (
    "#!lua\n"
    + _NOW
    + """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now, ARGV[1])
return now
"""
)

# KEYS: replicas, seen. ARGV: ms. Rows of replicas not seen for that long are deleted.
PRUNE = (
    "#!lua\n"
    + _NOW
    + """
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - tonumber(ARGV[1]))
for _, id in ipairs(old) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
end
return #old
"""
)

# ---- init-store (schema.py) ------------------------------------------------------------------

# KEYS: store, then each partition's head. ARGV: origin, partitions, seg_bits, then per
# partition its vkey and genesis hash. Answers 0 when a store exists already (nothing changed).
INIT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local p = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'origin', ARGV[1], 'partitions', ARGV[2], 'seg_bits', ARGV[3])
for n = 0, p - 1 do
  redis.call('HSET', KEYS[1], 'vkey:' .. n, ARGV[4 + 2 * n])
  redis.call('HSET', KEYS[2 + n], 'last_seq', -1, 'last_h', ARGV[5 + 2 * n], 'epoch', 0,
             'owner', '', 'lease_until', 0)
end
return 1
"""
