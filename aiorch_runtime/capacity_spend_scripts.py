"""The capacity store's spend scripts (``aiorch_runtime.capacity_spend`` runs them): a tenant's
spend per UTC day, each operation one script, atomic across workers, with ``TIME`` (Redis's
clock) the only clock. Numbers travel as strings (``%.17g``), since Redis truncates a Lua number
in a reply to an integer.

KEYS, per tenant and UTC day: spent (USD), reservations (id -> USD), reservation expiries,
charged (id -> USD a reservation that expired unsettled was charged), settled calls (the digest
of a call's idempotency key -> USD it was settled for).
"""

from __future__ import annotations

from typing import Final

# Shared prologue, ARGV[1] = the keys' time to live in seconds: charge every reservation whose
# lease ran out in full (its call may have been made and billed; a late settlement corrects it
# from what it was charged), then read what was spent and what is reserved. ``spend(usd)``
# changes what was spent and ``keep()`` writes it back: a SET of the sum, never INCRBYFLOAT,
# whose rewrite into a longer SET breaks a script's cached arguments (redis/redis#11652):
# Redis 6.2.14 crashed on the next script.
_SPEND_PROLOGUE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[1])
local function usd(x) return string.format('%.17g', x) end
local spent = tonumber(redis.call('GET', KEYS[1])) or 0
local changed = false
local function spend(cost)
  spent = spent + cost
  changed = true
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  local held = redis.call('HGET', KEYS[2], id)
  if held then
    spend(tonumber(held))
    redis.call('HSET', KEYS[4], id, held)
  end
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
local reserved = 0
for _, held in ipairs(redis.call('HVALS', KEYS[2])) do reserved = reserved + tonumber(held) end
local function keep()
  if changed then redis.call('SET', KEYS[1], usd(spent)) end
  for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ttl) end
end
"""

# ARGV: ttl s, budget USD, worst-case cost USD, reservation id, lease ms. Returns {reserved (1),
# over the budget (0) or held by calls in flight (2), spent, reserved}: "over" when what was
# spent leaves no room for the worst case, "held" when only the reservations of calls in flight
# do (they settle, usually for less).
RESERVE_SPEND: Final = (
    _SPEND_PROLOGUE
    + """
local budget, worst, id, lease = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5])
local verdict = 1
if spent + worst > budget then
  verdict = 0
elseif spent + reserved + worst > budget then
  verdict = 2
else
  redis.call('HSET', KEYS[2], id, ARGV[3])
  redis.call('ZADD', KEYS[3], now + lease, id)
  reserved = reserved + worst
end
keep()
return {verdict, usd(spent), usd(reserved)}
"""
)

# ARGV: ttl s, reservation id ('' for none), the call's cost USD, the call's key ('' for none),
# how long a call's key is remembered (s). Ends the reservation and adds the cost (less what an
# expired reservation was already charged), once per call key: a call settled before (a
# retried settlement, an activity run again) adds nothing, and its reservation is given back.
# Returns {the day's spend, 1 when this settlement counted the call, 0 when it had been}.
SETTLE_SPEND: Final = (
    _SPEND_PROLOGUE
    + """
local id, cost, call = ARGV[2], tonumber(ARGV[3]), ARGV[4]
local counted = 1
if call ~= '' and redis.call('HEXISTS', KEYS[5], call) == 1 then
  counted = 0
  cost = 0
end
if redis.call('HDEL', KEYS[2], id) == 1 then
  redis.call('ZREM', KEYS[3], id)
else
  local charged = tonumber(redis.call('HGET', KEYS[4], id))
  if charged then
    cost = cost - charged
    redis.call('HDEL', KEYS[4], id)
  end
end
if cost ~= 0 then spend(cost) end
if call ~= '' and counted == 1 then
  redis.call('HSET', KEYS[5], call, ARGV[3])
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[5]))
end
keep()
return {usd(spent), counted}
"""
)

# ARGV: ttl s, reservation id, lease ms. Returns 1 when the reservation was still there.
RENEW_SPEND: Final = (
    _SPEND_PROLOGUE
    + """
local id, lease = ARGV[2], tonumber(ARGV[3])
keep()
if redis.call('ZSCORE', KEYS[3], id) then
  redis.call('ZADD', KEYS[3], now + lease, id)
  return 1
end
return 0
"""
)

# ARGV: ttl s. Returns {spent, reserved} once expired reservations are charged.
SPEND: Final = (
    _SPEND_PROLOGUE
    + """
keep()
return {usd(spent), usd(reserved)}
"""
)
