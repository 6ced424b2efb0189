"""The Lua scripts ``RedisStore`` runs: ``algorithms``' rules, written again
for Redis, operation for operation as ``memory.MemoryStore`` does them.

Each script is one round trip and runs atomically. ``ACQUIRE`` checks every
check of a request and charges them only when all pass. Times: ``ARGV[1]``
is ``now`` (seconds since ``EPOCH``) or ``""``, then the script reads the
server's ``TIME`` (one clock for every instance). Numbers cross into Redis as
``%.17g`` strings (Lua's own conversion keeps 14 digits) and back the same
way (Redis truncates a Lua number reply to an integer). Keys outlive their
state by ``KEY_SLACK_MS``: the state alone says when it is spent.

No I/O; text only.
"""

from __future__ import annotations

import hashlib
from typing import Final

from flatgate.proxy.limits.algorithms import (
    CONCURRENT_RETRY,
    DAY_KEY_SECONDS,
    EPOCH,
    KEY_SLACK_MS,
    PERIOD,
    TOLERANCE,
)

__all__ = [
    "ACQUIRE",
    "BACKEND_ACQUIRE",
    "BACKEND_COUNTS",
    "BLOB_DELETE",
    "BLOB_PUT",
    "COOLDOWN",
    "RENEW",
    "SETTLE",
    "Script",
]


class Script:
    """A script's text and its SHA-1 (what EVALSHA names it by)."""

    __slots__ = ("sha", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.sha = hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()


_PRELUDE: Final = f"""
local PERIOD = {PERIOD!r}
local WINDOW = PERIOD + {TOLERANCE!r}
local SLACK = {KEY_SLACK_MS}
local CONC_RETRY = {CONCURRENT_RETRY!r}
local function num(x) return string.format('%.17g', x) end
local function ms(x) return string.format('%d', math.ceil(x * 1000) + SLACK) end
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = (tonumber(t[1]) - {EPOCH}) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[1])
end
local function lease_expiry(key)
  local top = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if top[2] then redis.call('PEXPIRE', key, ms(tonumber(top[2]) - now)) end
end
"""

# KEYS[i]: check i's key (a day key with its date).
# ARGV: now, lease id, lease ttl, estimate, then per check i three:
#   ARGV[2 + 3 * i] code ('r', 't', 'c', 'd': ``algorithms.KIND_CODES``),
#   ARGV[3 + 3 * i] amount (the limit),
#   ARGV[4 + 3 * i] wait: the seconds a refusal by check i waits, read only
#     for a code whose state does not say ('d': ``algorithms.GIVEN_WAIT``).
# Returns one string: "<refused check (1-based, 0: none)> <retry> <level of each check>...".
ACQUIRE: Final = Script(
    _PRELUDE
    + f"""
local lease = ARGV[2]
local ttl = tonumber(ARGV[3])
local estimate = tonumber(ARGV[4])
local refused = 0
local retry = 0
local levels = {{}}
local charge = {{}}
for i = 1, #KEYS do
  local code = ARGV[2 + 3 * i]
  local limit = tonumber(ARGV[3 + 3 * i])
  local key = KEYS[i]
  if code == 'r' or code == 't' then
    local cost = 1
    if code == 't' then cost = math.min(estimate, limit) end
    local tat = tonumber(redis.call('GET', key)) or now
    if tat < now then tat = now end
    local new = tat + cost * (PERIOD / limit)
    if new - now > WINDOW then
      local wait = new - now - PERIOD
      if refused == 0 or wait > retry then refused = i; retry = wait end
      levels[i] = num(tat - now)
    else
      levels[i] = num(new - now)
      charge[i] = new
    end
  elseif code == 'c' then
    redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
    local held = redis.call('ZCARD', key)
    if held >= limit then
      if refused == 0 or retry < CONC_RETRY then refused = i; retry = CONC_RETRY end
      levels[i] = num(held)
    else
      levels[i] = num(held + 1)
      charge[i] = now + ttl
    end
  else
    local cost = math.min(estimate, limit)
    local used = tonumber(redis.call('GET', key)) or 0
    if used >= limit or used + cost > limit then
      local wait = tonumber(ARGV[4 + 3 * i])
      if refused == 0 or wait > retry then refused = i; retry = wait end
      levels[i] = num(used)
    else
      levels[i] = num(used + cost)
      charge[i] = cost
    end
  end
end
if refused == 0 then
  for i = 1, #KEYS do
    local code = ARGV[2 + 3 * i]
    local key = KEYS[i]
    local value = charge[i]
    if code == 'r' or code == 't' then
      redis.call('SET', key, num(value), 'PX', ms(value - now))
    elseif code == 'c' then
      redis.call('ZADD', key, num(value), lease)
      lease_expiry(key)
    else
      redis.call('INCRBY', key, string.format('%d', value))
      redis.call('EXPIRE', key, {DAY_KEY_SECONDS}, 'NX')
    end
  end
end
local out = {{refused, num(retry)}}
if refused ~= 0 then  -- a refusal charges nothing: the levels as they stand
  for i = 1, #KEYS do
    local code = ARGV[2 + 3 * i]
    local key = KEYS[i]
    if code == 'r' or code == 't' then
      local tat = tonumber(redis.call('GET', key)) or now
      if tat > now then levels[i] = num(tat - now) else levels[i] = num(0) end
    elseif code == 'c' then
      levels[i] = num(redis.call('ZCARD', key))
    else
      levels[i] = num(tonumber(redis.call('GET', key)) or 0)
    end
  end
end
for i = 1, #KEYS do out[i + 2] = levels[i] end
-- One bulk string, the numbers space-separated: one reply to parse.
return table.concat(out, ' ')
"""
)

# KEYS[i]: a settled key. ARGV: now, lease id, then per key: code ('t': a
# token rate, 'd': a day counter, 'c': a concurrency set), amount, token delta.
SETTLE: Final = Script(
    _PRELUDE
    + f"""
local lease = ARGV[2]
for i = 1, #KEYS do
  local code = ARGV[3 * i]
  local key = KEYS[i]
  if code == 't' then
    local limit = tonumber(ARGV[3 * i + 1])
    local delta = tonumber(ARGV[3 * i + 2])
    local tat = tonumber(redis.call('GET', key))
    if tat or delta > 0 then
      if not tat or tat < now then tat = now end
      local new = tat + delta * (PERIOD / limit)
      if new - now <= 0 then
        redis.call('DEL', key)
      else
        redis.call('SET', key, num(new), 'PX', ms(new - now))
      end
    end
  elseif code == 'd' then
    redis.call('INCRBY', key, ARGV[3 * i + 2])
    redis.call('EXPIRE', key, {DAY_KEY_SECONDS}, 'NX')
  else
    redis.call('ZREM', key, lease)
  end
end
return 1
"""
)

# KEYS: a lease's concurrency sets. ARGV: now, lease id, ttl.
# Returns 1, or 0 when the lease was gone from any of them.
RENEW: Final = Script(
    _PRELUDE
    + """
local lease = ARGV[2]
local found = 1
for i = 1, #KEYS do
  local expiry = tonumber(redis.call('ZSCORE', KEYS[i], lease))
  if expiry and expiry > now then
    redis.call('ZADD', KEYS[i], num(now + tonumber(ARGV[3])), lease)
    lease_expiry(KEYS[i])
  else
    found = 0
  end
end
return found
"""
)

# KEYS[1]: a backend's outstanding set. ARGV: now, lease id, ttl, limit (0: none).
# Returns the count after, or -1 at the limit.
BACKEND_ACQUIRE: Final = Script(
    _PRELUDE
    + """
local key = KEYS[1]
redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now))
local held = redis.call('ZCARD', key)
local limit = tonumber(ARGV[4])
if limit > 0 and held >= limit then return -1 end
redis.call('ZADD', key, num(now + tonumber(ARGV[3])), ARGV[2])
lease_expiry(key)
return held + 1
"""
)

# KEYS: backends' outstanding sets. ARGV: now. Returns each one's count.
BACKEND_COUNTS: Final = Script(
    _PRELUDE
    + """
local out = {}
for i = 1, #KEYS do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', num(now))
  out[i] = redis.call('ZCARD', KEYS[i])
end
return out
"""
)

# KEYS[1]: the cooldowns hash. ARGV: Unix now, backend, Unix until.
# Drops the cooldowns that have ended; keeps the later of two.
COOLDOWN: Final = Script(
    """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  if tonumber(all[i + 1]) <= now then redis.call('HDEL', key, all[i]) end
end
local until_ = tonumber(ARGV[3])
local current = tonumber(redis.call('HGET', key, ARGV[2]))
if not current or current < until_ then
  redis.call('HSET', key, ARGV[2], string.format('%.17g', until_))
end
return 1
"""
)

# KEYS[1]: one UTC day's usage hash. ARGV: the hash's time to live (seconds),
# then field and amount pairs. Adds each amount to its field.
USAGE: Final = Script(
    """
local key = KEYS[1]
for i = 2, #ARGV, 2 do
  redis.call('HINCRBY', key, ARGV[i], ARGV[i + 1])
end
redis.call('EXPIRE', key, ARGV[1])
return 1
"""
)


# A group's blobs (a tenant's stored responses), bounded per group: KEYS[1]
# the blob, KEYS[2] the group's index (a sorted set: each blob's key by the
# server's milliseconds when it was put), KEYS[3] its sizes (a hash: each
# blob's key to its bytes, and '' to their sum); all in one slot (the
# group's name in braces). ``_BLOB_DROP``: a blob let go, and its counts.
_BLOB_DROP: Final = """
local function drop(index, sizes, key)
  local size = redis.call('HGET', sizes, key)
  if size then
    redis.call('HDEL', sizes, key)
    redis.call('HINCRBY', sizes, '', -tonumber(size))
  end
  redis.call('ZREM', index, key)
  return redis.call('DEL', key)
end
"""

# ARGV: the bytes, their TTL in ms, the group's bounds (blobs, bytes). The
# expired go first, then the group's oldest while it is past a bound (never
# the blob just put: a blob larger than the group may hold is refused).
# Returns -1 when refused, else how many went to make room.
BLOB_PUT: Final = Script(
    _BLOB_DROP
    + """
local blob, index, sizes = KEYS[1], KEYS[2], KEYS[3]
local px, max_count, max_bytes = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local size = string.len(ARGV[1])
if size > max_bytes or max_count < 1 then return -1 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, key in ipairs(redis.call('ZRANGEBYSCORE', index, '-inf', now - px)) do
  drop(index, sizes, key)
end
drop(index, sizes, blob)
redis.call('SET', blob, ARGV[1], 'PX', px)
redis.call('ZADD', index, now, blob)
redis.call('HSET', sizes, blob, size)
local total = redis.call('HINCRBY', sizes, '', size)
local evicted = 0
while redis.call('ZCARD', index) > max_count or total > max_bytes do
  local oldest = redis.call('ZRANGE', index, 0, 0)[1]
  if oldest == blob then break end
  drop(index, sizes, oldest)
  total = tonumber(redis.call('HGET', sizes, ''))
  evicted = evicted + 1
end
redis.call('PEXPIRE', index, px)
redis.call('PEXPIRE', sizes, px)
return evicted
"""
)

# KEYS as BLOB_PUT's; returns whether the blob was there.
BLOB_DELETE: Final = Script(_BLOB_DROP + "\nreturn drop(KEYS[2], KEYS[3], KEYS[1])\n")
