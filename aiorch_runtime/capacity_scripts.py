"""The capacity store's rate-limit scripts (``aiorch_runtime.capacity`` runs them; a tenant's
spend has its own, ``aiorch_runtime.capacity_spend_scripts``): each operation is one script, so
it is atomic across workers without locks, and ``TIME`` (Redis's clock) is the only clock.
Numbers travel as strings (``%.17g``), since Redis truncates a Lua number in a reply to an
integer.

Rate limits, per scope (an endpoint and a model), KEYS: bucket, holds (id -> tokens), hold
expiries, queue (member -> its virtual finish tag: the fair-share order), queue demand (member ->
expected tokens), queue expiries, queue due times (member -> when its turn comes), queued members'
tenant, priority and enqueue time (``"TENANT PRIORITY MS"``), and per tenant its last virtual
finish tag (field ``TENANT``) and how many of its members are queued (field ``#TENANT``).
"""

from __future__ import annotations

from typing import Final

# Shared prologue: refill the buckets at the effective rate (min of configured and provider-
# reported limits; 0 = not limited), give back expired holds and drop expired queue entries.
_RATE_PROLOGUE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tpm_c, rpm_c = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 'tok', 'req', 'ts', 'pause', 'ratio', 'ptpm', 'prpm')
local function eff(conf, prov)
  prov = tonumber(prov)
  if conf == 0 then return 0 end
  if prov and prov > 0 and prov < conf then return prov end
  return conf
end
local tpm, rpm = eff(tpm_c, b[6]), eff(rpm_c, b[7])
local tok = tonumber(b[1]) or tpm
local req = tonumber(b[2]) or rpm
local ts = tonumber(b[3]) or now
local pause = tonumber(b[4]) or 0
local ratio = tonumber(b[5]) or 1
local elapsed = math.max(0, now - ts)
tok = math.min(tpm, tok + elapsed * tpm / 60000)
req = math.min(rpm, req + elapsed * rpm / 60000)
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do
  local held = tonumber(redis.call('HGET', KEYS[2], id)) or 0
  tok = math.min(tpm, tok + held)
  req = math.min(rpm, req + 1)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
local vt = tonumber(redis.call('HGET', KEYS[1], 'vt')) or 0
local function tag(x) return string.format('%.17g', x) end
-- A queued member's demand counts at most one bucket.
local function counted(expected)
  if tpm > 0 then return math.min(expected, tpm) end
  return expected
end
local function demand_of(m) return counted(tonumber(redis.call('HGET', KEYS[5], m)) or 0) end
-- How far a member's turn moves when another's demand joins or leaves the queue ahead of it.
local function turn_of(expected)
  local turn = 0
  if tpm > 0 then turn = counted(expected) * 60000 / tpm end
  if rpm > 0 then turn = math.max(turn, 60000 / rpm) end
  return turn
end
local function queued_as(m)
  local info = redis.call('HGET', KEYS[8], m)
  if not info then return nil end
  local tenant, prio, enq = string.match(info, '^(%S+) (%S+) (%S+)$')
  return tenant, tonumber(prio), tonumber(enq)
end
local function unqueue(m)
  local tenant = queued_as(m)
  -- A tenant with nothing queued starts at the virtual time anyway: forget it, so made-up
  -- tenant names leave nothing behind.
  if tenant and redis.call('HINCRBY', KEYS[9], '#' .. tenant, -1) <= 0 then
    redis.call('HDEL', KEYS[9], tenant, '#' .. tenant)
  end
  redis.call('ZREM', KEYS[4], m)
  redis.call('HDEL', KEYS[5], m)
  redis.call('ZREM', KEYS[6], m)
  redis.call('HDEL', KEYS[7], m)
  redis.call('HDEL', KEYS[8], m)
end
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now)) do unqueue(m) end
local function save()
  redis.call('HSET', KEYS[1], 'tok', tostring(tok), 'req', tostring(req), 'ts', now,
    'pause', pause, 'ratio', tostring(ratio), 'vt', string.format('%.17g', vt))
  redis.call('PEXPIRE', KEYS[1], 3600000)
  if redis.call('EXISTS', KEYS[9]) == 1 then redis.call('PEXPIRE', KEYS[9], 3600000) end
end
"""

# ARGV: tpm, rpm, lease ms, hold id, queue member, tokens to reserve, min wait ms, longest wait
# told ms, the caller's tenant, its weight, the call's priority (1 most urgent to 5). Returns
# {granted (1), refused (0) or never (-1), wait ms (never: the token limit), tokens left,
# requests left, ms the member had been queued (granted after queueing; else 0)}.
#
# A reservation larger than the token bucket can never be granted: it is answered "never" and
# not queued. A queued member's demand counts at most one bucket. A refused member is told to
# come back when its turn comes, or after the longest wait told if that is sooner; its place
# lasts until one lease after it was due back, so a member that never comes back (its run was
# cancelled or terminated) leaves the queue within the longest wait plus a lease. Back before its
# turn, it is told the rest of its wait again.
#
# Fair share (start-time fair queueing over tokens): the queue is ordered by each member's
# virtual finish tag, its start (the later of the scope's virtual time and its tenant's last
# finish) plus its expected tokens divided by its tenant's weight. The virtual time is the start
# of the last queued member granted, so a tenant that was idle starts at it: its share went to
# the others meanwhile, and it gets no credit for it. A member joining ahead of members already
# told their turn pushes their turn back by its own demand. Within a tenant, a more urgent
# member takes the slot of the tenant's first less urgent one, which moves back with the rest,
# so priority orders a tenant's calls but never grows its share. With one tenant the order is
# first come, first served.
RESERVE: Final = (
    _RATE_PROLOGUE
    + """
local lease, id, member = tonumber(ARGV[3]), ARGV[4], ARGV[5]
local need, min_wait, max_told = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
local tenant, weight, prio = ARGV[9], tonumber(ARGV[10]), tonumber(ARGV[11])
if tpm > 0 and need > tpm then
  save()
  return {-1, tpm, tostring(tok), tostring(req), 0}
end
local function told(wait)
  wait = math.ceil(math.max(min_wait, math.min(wait, max_told)))
  redis.call('ZADD', KEYS[6], now + wait + lease, member)
  for i = 4, 9 do redis.call('PEXPIRE', KEYS[i], 3600000) end
  save()
  return {0, wait, tostring(tok), tostring(req), 0}
end
local function ahead_of(score)
  local members
  if score then
    members = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. score)
  else
    members = redis.call('ZRANGE', KEYS[4], 0, -1)
  end
  local demand = 0
  for _, m in ipairs(members) do demand = demand + demand_of(m) end
  return demand, #members
end
local score = redis.call('ZSCORE', KEYS[4], member)
local due = score and tonumber(redis.call('HGET', KEYS[7], member))
if due and now < due then return told(due - now) end
local demand, count = ahead_of(score)
local tok_ok, req_ok
if score then
  tok_ok = tok >= need
  req_ok = req >= 1
else
  tok_ok = tok - demand >= need
  req_ok = req - count >= 1
end
if now >= pause and (tpm == 0 or tok_ok) and (rpm == 0 or req_ok) then
  if tpm > 0 then tok = tok - need end
  if rpm > 0 then req = req - 1 end
  redis.call('HSET', KEYS[2], id, need)
  redis.call('ZADD', KEYS[3], now + lease, id)
  redis.call('PEXPIRE', KEYS[2], 3600000)
  redis.call('PEXPIRE', KEYS[3], 3600000)
  local queued_ms = 0
  if score then
    local _, _, enqueued = queued_as(member)
    if enqueued then queued_ms = now - enqueued end
    vt = math.max(vt, tonumber(score) - demand_of(member) / weight)
    unqueue(member)
  end
  save()
  return {1, 0, tostring(tok), tostring(req), queued_ms}
end
if not score then
  local expected = need * ratio
  local size = counted(expected) / weight
  local start, last = vt, vt
  local moved = false
  if (tonumber(redis.call('HGET', KEYS[9], '#' .. tenant)) or 0) > 0 then
    last = math.max(vt, tonumber(redis.call('HGET', KEYS[9], tenant)) or 0)
    start = last
    local queue = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
    for i = 1, #queue, 2 do
      local m = queue[i]
      local t, p = queued_as(m)
      if t == tenant and p > prio then
        if not moved then start = tonumber(queue[i + 1]) - demand_of(m) / weight end
        moved = true
        redis.call('ZINCRBY', KEYS[4], tag(size), m)
      end
    end
  end
  local finish = start + size
  redis.call('HSET', KEYS[9], tenant, tag(moved and last + size or finish))
  redis.call('HINCRBY', KEYS[9], '#' .. tenant, 1)
  local push = turn_of(expected)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. tag(finish), '+inf')) do
    local later = tonumber(redis.call('HGET', KEYS[7], m))
    if later then redis.call('HSET', KEYS[7], m, math.ceil(later + push)) end
  end
  score = tag(finish)
  redis.call('ZADD', KEYS[4], score, member)
  redis.call('HSET', KEYS[5], member, tostring(expected))
  redis.call('HSET', KEYS[8], member, tenant .. ' ' .. prio .. ' ' .. now)
  demand, count = ahead_of(score)
end
local wait = math.max(min_wait, pause - now)
if tpm > 0 then wait = math.max(wait, (demand + need - tok) * 60000 / tpm) end
if rpm > 0 then wait = math.max(wait, (count + 1 - req) * 60000 / rpm) end
wait = math.ceil(wait)
redis.call('HSET', KEYS[7], member, now + wait)
return told(wait)
"""
)

# ARGV: tpm, rpm, queue member, its tenant's weight. Returns 1 when the member was queued and
# has left, 0 when it was not queued (never, or granted, lapsed or gone already): leaving twice
# is harmless.
#
# A member that goes elsewhere (a call spilled over to the batch lane) leaves as if it had never
# joined, as far as that holds without moving anyone back: every place behind it has its turn
# pulled forward by what the member's demand pushed it (RESERVE's push, undone), and every
# other place keeps its tag, so the queue keeps its order, the tenant's own later places
# included. Shifting those down by the member's size, as they would stand had it never joined,
# would move them ahead of other tenants' places already told their turns and push those turns
# back: a tenant whose calls spill would gain on the tenants that wait. So they stay charged for
# it until the tenant's queue drains (its next call then starts at the virtual time). The
# tenant's last finish tag goes back by the member's size when the member was its last place,
# so a newcomer starts where the member started, never ahead of the tenant's earlier places; the
# virtual time, the start of the last member granted, stays: nothing was granted.
LEAVE: Final = (
    _RATE_PROLOGUE
    + """
local member, weight = ARGV[3], tonumber(ARGV[4])
local score = tonumber(redis.call('ZSCORE', KEYS[4], member))
if not score then
  save()
  return 0
end
local tenant = queued_as(member)
local pull = turn_of(tonumber(redis.call('HGET', KEYS[5], member)) or 0)
local size = demand_of(member) / weight
local last, before = true, 0
local queue = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
for i = 1, #queue, 2 do
  local m, s = queue[i], tonumber(queue[i + 1])
  if m ~= member then
    local due = tonumber(redis.call('HGET', KEYS[7], m))
    if s > score and due and due > now then
      redis.call('HSET', KEYS[7], m, math.max(now, math.floor(due - pull)))
    end
    if tenant and queued_as(m) == tenant then
      if s > score then last = false else before = math.max(before, s) end
    end
  end
end
local finish = tenant and tonumber(redis.call('HGET', KEYS[9], tenant))
if last and finish then
  redis.call('HSET', KEYS[9], tenant, tag(math.max(finish - size, before)))
end
unqueue(member)
save()
return 1
"""
)

# ARGV: tpm, rpm, hold id, tokens used, whether a call reached the provider (0/1), the
# caller's tenant, how long the day's usage is kept (s); KEYS[10]: the day's usage (tenant ->
# tokens used), what each tenant's share of the scope is measured by.
SETTLE: Final = (
    _RATE_PROLOGUE
    + """
local id, used, called = ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1'
if used > 0 then
  redis.call('HINCRBY', KEYS[10], ARGV[6], math.floor(used))
  redis.call('EXPIRE', KEYS[10], tonumber(ARGV[7]))
end
local held = tonumber(redis.call('HGET', KEYS[2], id))
if held then
  if tpm > 0 then tok = math.min(tpm, tok + held - used) end
  if rpm > 0 and not called then req = math.min(rpm, req + 1) end
  if called and used > 0 and held > 0 then
    ratio = 0.8 * ratio + 0.2 * math.min(1, used / held)
  end
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
elseif tpm > 0 then
  tok = tok - used
end
save()
return 1
"""
)

# ARGV: tpm, rpm, hold id, lease ms. Returns 1 when the hold was still there.
RENEW: Final = (
    _RATE_PROLOGUE
    + """
local id, lease = ARGV[3], tonumber(ARGV[4])
save()
if redis.call('ZSCORE', KEYS[3], id) then
  redis.call('ZADD', KEYS[3], now + lease, id)
  return 1
end
return 0
"""
)

# ARGV: tpm, rpm. Returns {tokens, requests, queued members...} after refilling, giving back
# expired holds and dropping expired queue entries.
LEVELS: Final = (
    _RATE_PROLOGUE
    + """
save()
local reply = {tostring(tok), tostring(req)}
for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do table.insert(reply, m) end
return reply
"""
)

# ARGV: tpm, rpm, remaining tokens, remaining requests, limit tokens, limit requests,
# retry-after ms (each -1 when absent).
FEEDBACK: Final = (
    _RATE_PROLOGUE
    + """
local rt, rr, lt, lr, ra = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]),
  tonumber(ARGV[6]), tonumber(ARGV[7])
if lt > 0 then redis.call('HSET', KEYS[1], 'ptpm', lt); tpm = eff(tpm_c, lt) end
if lr > 0 then redis.call('HSET', KEYS[1], 'prpm', lr); rpm = eff(rpm_c, lr) end
if rt >= 0 then tok = math.min(tok, rt) end
if rr >= 0 then req = math.min(req, rr) end
if ra >= 0 then
  tok = math.min(tok, 0)
  req = math.min(req, 0)
  pause = math.max(pause, now + ra)
end
save()
return 1
"""
)
