"""The Lua scripts: every backend operation is one of these, run atomically by the server.

Keys of one job (all hash-tagged `{prefix:namespace:job}`, so they live in one Cluster slot):

- KEYS[1] `{…}`: a hash with the job's fencing counter `seq` and its newest record
  (`slot attempt token owner status expires_at fingerprint updated_at`);
- KEYS[2] `{…}:others`: a hash slot → JSON record of older slots still running, or released for
  handover and not yet taken over, under `overlap="allow"` (empty otherwise).

Time is the server's: `TIME` is read once, at the top of each script.
"""

from __future__ import annotations

__all__ = ["ADVANCE_SCHEDULES", "CATALOGUE", "CLAIM", "CLAIM_BATCH", "DUE_SCHEDULES", "GET_SCHEDULES",
           "INSPECT", "MOVE_DUE", "PUBLISH_CATALOGUE", "PUT_SCHEDULE", "PUT_SCHEDULES", "READ_SCHEDULES",
           "RECORD_RUNS", "RECORD_RUNS_BATCH", "RELEASE", "RELEASE_BATCH", "REMOVE_SCHEDULE", "RENEW",
           "RENEW_BATCH", "SET_CONTROL", "STREAM_CLAIM"]

_NOW = r"""local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""
"""The store's clock in ms, `now`: read once, at the top of each script."""

_COMMON = "\n" + _NOW + r"""
local FIELDS = {'slot', 'attempt', 'token', 'owner', 'status', 'expires_at', 'fingerprint', 'updated_at'}

local function current()
  local v = redis.call('HMGET', KEYS[1], unpack(FIELDS))
  if not v[1] then return nil end
  return {slot = tonumber(v[1]), attempt = tonumber(v[2]), token = tonumber(v[3]), owner = v[4],
          status = v[5], expires_at = tonumber(v[6]), fingerprint = v[7] or '',
          updated_at = tonumber(v[8]), other = false}
end

local function other(slot)
  local raw = redis.call('HGET', KEYS[2], string.format('%d', slot))
  if not raw then return nil end
  local r = cjson.decode(raw)
  r.other = true
  return r
end

local function save(r)
  if r.other then
    redis.call('HSET', KEYS[2], string.format('%d', r.slot), cjson.encode({
      slot = r.slot, attempt = r.attempt, token = r.token, owner = r.owner, status = r.status,
      expires_at = r.expires_at, fingerprint = r.fingerprint, updated_at = r.updated_at}))
  else
    redis.call('HSET', KEYS[1], 'slot', string.format('%d', r.slot), 'attempt', r.attempt,
      'token', r.token, 'owner', r.owner, 'status', r.status,
      'expires_at', string.format('%d', r.expires_at), 'fingerprint', r.fingerprint,
      'updated_at', string.format('%d', r.updated_at))
  end
end

-- The record a lease refers to: the newest one for its slot, else an older one still running.
local function find(slot, token, owner)
  local r = current()
  if r and r.slot ~= slot then r = other(slot) end
  if (not r) or r.token ~= token or r.owner ~= owner then return nil end
  return r
end
"""

_CLAIM_HEAD = r"""
-- Once per script call: the claim of one job is `claim()`, on the job's keys K1 K2 and its arguments,
-- which are set before each call (no closure, table or argument copy is made per job).
""" + _NOW + r"""local fmt = string.format
local now_s = fmt('%d', now)
local K1, K2
-- ARGV per job: slot owner lease_ms max_attempts overlap fingerprint max_skew_ms stale_after ('' for none)
-- (lease_ms and max_attempts stay strings until a path needs them: tonumber is a strtod each.)
local slot, owner, lease_ms, max_attempts, overlap, fp, max_skew, stale_after
-- The strings slot, max_skew and stale_after were read from: Lua strings are interned, so an equal
-- string is the same number without parsing it again (the same skew and staleness run through a batch).
local slot_s, skew_s, stale_s
-- The job's hash: the newest record's fields that most claims answer with, then seq (read here so a
-- win writes it in one HSET rather than a HINCRBY and an HSET). Each numeric field read costs a few
-- percent of a claim, so token and updated_at are read only on the rare paths that need them.
local v

-- Older records that ended are forgotten; running ones stay so they can renew or be taken over.
local function forget_ended()
  local others = redis.call('HGETALL', K2)
  for i = 1, #others, 2 do
    if cjson.decode(others[i + 1]).status ~= 'running' then redis.call('HDEL', K2, others[i]) end
  end
end

-- Reply: outcome holder attempt expires_at now previous_status fingerprint record_slot token
local function win_new(prev_fp, prev_slot)
  local seq = (tonumber(v[7]) or 0) + 1
  forget_ended()
  local expires_at = now + tonumber(lease_ms)
  redis.call('HSET', K1, 'slot', fmt('%d', slot), 'attempt', 1, 'token', seq, 'owner', owner,
    'status', 'running', 'expires_at', fmt('%d', expires_at), 'fingerprint', fp, 'updated_at', now_s,
    'seq', fmt('%d', seq))
  return {'won', owner, 1, expires_at, now, false, prev_fp or false, prev_slot or false, seq}
end

-- A record of the claimed slot: the newest (`other` false; its token is read when needed) or an older
-- one still kept (its JSON).
local function same_slot(rs, attempt, token, holder, status, expires_at, rfp, other)
  if status == 'running' and expires_at > now then
    -- Held by the claimer already (a claim whose answer was lost): its own lease again, nothing written.
    if holder == owner then
      if not other then token = redis.call('HGET', K1, 'token') end
      return {'reissued', holder or false, attempt or 0, expires_at, now, false, rfp or false, rs,
              tonumber(token) or false}
    end
    return {'taken', holder or false, attempt or 0, expires_at, now, false, rfp or false, rs, false}
  end
  if status == 'done' or status == 'failed' then
    return {'done', holder or false, attempt or 0, false, now, false, rfp or false, rs, false}
  end
  -- Released, or running with an expired lease (expiry is inclusive): a takeover, if attempts remain.
  if attempt >= tonumber(max_attempts) then
    return {'exhausted', holder or false, attempt or 0, false, now, status or false, rfp or false, rs, false}
  end
  attempt = attempt + 1
  local expires = now + tonumber(lease_ms)
  local seq
  if other then
    seq = redis.call('HINCRBY', K1, 'seq', 1)
    redis.call('HSET', K2, fmt('%d', rs), cjson.encode({
      slot = rs, attempt = attempt, token = seq, owner = owner, status = 'running',
      expires_at = expires, fingerprint = fp, updated_at = now}))
  else
    seq = (tonumber(v[7]) or 0) + 1
    redis.call('HSET', K1, 'slot', fmt('%d', rs), 'attempt', attempt, 'token', seq, 'owner', owner,
      'status', 'running', 'expires_at', fmt('%d', expires), 'fingerprint', fp, 'updated_at', now_s,
      'seq', fmt('%d', seq))
  end
  return {'won', owner, attempt, expires, now, status or false, rfp or false, rs, seq}
end

local function claim()
  if slot > now + max_skew then
    return {'early', false, 0, false, now, false, false, false, false}
  end
  v = redis.call('HMGET', K1, 'slot', 'attempt', 'owner', 'status', 'expires_at', 'fingerprint', 'seq')
  local cs = v[1]
  if cs == slot_s then cs = slot elseif cs then cs = tonumber(cs) end
  if stale_after and now > stale_after then
    -- Delivered too late to be worth running: it never revives a past slot.
    if not cs then return {'stale', false, 0, false, now, false, false, false, false} end
    return {'stale', v[3] or false, tonumber(v[2]) or 0, false, now, false, v[6] or '', cs, false}
  end
  if not cs then return win_new(nil, nil) end
  if slot == cs then
    return same_slot(cs, tonumber(v[2]), nil, v[3], v[4], tonumber(v[5]), v[6] or '', false)
  end
  if slot < cs then
    if overlap == 'allow' then
      local raw = redis.call('HGET', K2, fmt('%d', slot))
      if raw then
        local o = cjson.decode(raw)
        return same_slot(o.slot, o.attempt, o.token, o.owner, o.status, o.expires_at, o.fingerprint, true)
      end
    end
    return {'stale', v[3] or false, tonumber(v[2]) or 0, false, now, false, v[6] or '', cs, false}
  end
  -- A newer slot than the record's.
  local expires_at = tonumber(v[5])
  if v[4] == 'running' and expires_at > now then
    if overlap == 'skip' or overlap == 'buffer_one' then
      return {'skipped', v[3] or false, tonumber(v[2]) or 0, expires_at, now, false, v[6] or '', cs, false}
    end
    if overlap == 'allow' then
      local more = redis.call('HMGET', K1, 'token', 'updated_at')
      redis.call('HSET', K2, fmt('%d', cs), cjson.encode({
        slot = cs, attempt = tonumber(v[2]), token = tonumber(more[1]), owner = v[3], status = v[4],
        expires_at = expires_at, fingerprint = v[6] or '', updated_at = tonumber(more[2])}))
    end
  end
  return win_new(v[6] or '', cs)
end

local function args(o)
  slot_s = ARGV[o + 1]
  slot = tonumber(slot_s)
  owner = ARGV[o + 2]
  lease_ms = ARGV[o + 3]
  max_attempts = ARGV[o + 4]
  overlap = ARGV[o + 5]
  fp = ARGV[o + 6]
  local s = ARGV[o + 7]
  if s ~= skew_s then skew_s, max_skew = s, tonumber(s) end
  s = ARGV[o + 8]
  if s ~= stale_s then stale_s, stale_after = s, tonumber(s) end
end
"""
CLAIM = _CLAIM_HEAD + r"""
K1, K2 = KEYS[1], KEYS[2]
args(0)
return claim()
"""

_RENEW = r"""
-- ARGV: slot token owner lease_ms. Reply: the new expires_at, or false when the lease is lost.
local r = find(tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3])
-- Lost once expired (inclusive), even when nobody took over: a late renewal revives nothing.
if (not r) or r.status ~= 'running' or r.expires_at <= now then return false end
r.expires_at = now + tonumber(ARGV[4])
r.updated_at = now
save(r)
return r.expires_at
"""
RENEW = _COMMON + _RENEW

_RELEASE = r"""
-- ARGV: slot token owner status channel job. Reply: 1 when released, 0 when ignored.
local slot = tonumber(ARGV[1])
local r = find(slot, tonumber(ARGV[2]), ARGV[3])
if (not r) or r.status ~= 'running' then return 0 end
if r.other and ARGV[4] ~= 'released' then
  -- An older slot kept under overlap=allow that is over: forget it. One handed over stays
  -- (released) for a backup to take over, until a newer slot starts (win_new drops it).
  redis.call('HDEL', KEYS[2], string.format('%d', slot))
else
  r.status = ARGV[4]
  r.updated_at = now
  save(r)
end
-- Only a handover wakes the backups: after done or failed there is nothing left to claim.
if ARGV[4] == 'released' then
  redis.call('PUBLISH', ARGV[5], string.format('%d', slot) .. ':' .. ARGV[6])
end
return 1
"""
RELEASE = _COMMON + _RELEASE


def _batch(body: str, argc: int) -> str:
    """`body` run once per job in one script: KEYS in pairs, `argc` ARGV per job; replies in order.

    For a server that holds every job's keys (not a Cluster, whose slots differ per job): one script
    call answers a whole batch, so the client packs one command and parses one reply.
    """
    common = _COMMON.replace("KEYS[1]", "K1").replace("KEYS[2]", "K2")
    return (
        "local K1, K2, A\n" + common
        + "local function one()\n" + body.replace("ARGV[", "A[") + "\nend\n"
        + f"""local out = {{}}
for i = 0, #KEYS / 2 - 1 do
  K1, K2 = KEYS[2 * i + 1], KEYS[2 * i + 2]
  A = {{unpack(ARGV, {argc} * i + 1, {argc} * i + {argc})}}
  out[i + 1] = one()
end
return out
"""
    )


CLAIM_BATCH = _CLAIM_HEAD + r"""
-- ARGV: the wins channel ('' for none) and the length of the job keys' prefix '{prefix:namespace:'
-- (for the announcement below), then runs of jobs that share their arguments: each run is its number
-- of jobs and the 8 ARGV of `args`, and takes that many key pairs from KEYS, in order. A batch of jobs
-- due together shares slot, owner, lease, overlap and schedule, so a run is most of a batch: the
-- client packs, and the script parses, a few arguments per job rather than eight. Replies in order.
local out = {}
local channel = ARGV[1]
local announce = channel ~= ''
local first_owner = ARGV[5]
local won = {}
local cut = tonumber(ARGV[2])
local n = #KEYS / 2
local i, o = 0, 2
while i < n do
  local last = i + tonumber(ARGV[o + 1])
  args(o + 1)
  o = o + 9
  while i < last do
    K1, K2 = KEYS[2 * i + 1], KEYS[2 * i + 2]
    local r = claim()
    i = i + 1
    out[i] = r
    -- One PUBLISH for the batch: "owner\nslot\tjob\nslot\tjob…", the first attempts and takeovers
    -- won by the first run's owner (job names hold no control characters).
    if announce and r[1] == 'won' and owner == first_owner then
      won[#won + 1] = slot_s .. '\t' .. string.sub(K1, cut + 1, -2)
    end
  end
end
if #won > 0 then redis.call('PUBLISH', channel, first_owner .. '\n' .. table.concat(won, '\n')) end
return out
"""
RELEASE_BATCH = _batch(_RELEASE, 6)
RENEW_BATCH = _batch(_RENEW, 4)

INSPECT = _COMMON + r"""
-- Reply: now, then the newest record's fields (or nothing when there is none).
local r = current()
if not r then return {now} end
return {now, r.slot, r.attempt, r.token, r.owner, r.status, r.expires_at, r.fingerprint, r.updated_at}
"""

STREAM_CLAIM = r"""
-- KEYS[1]: the job's stream. ARGV: slot owner maxlen. Reply: {1, owner} when won, {0, holder|false}.
local id = ARGV[1] .. '-1'
local found = redis.call('XRANGE', KEYS[1], id, id)
if #found > 0 then
  local f = found[1][2]
  for i = 1, #f, 2 do
    if f[i] == 'owner' then return {0, f[i + 1]} end
  end
  return {0, false}
end
-- The stream refuses IDs at or below its top: an older slot nobody claimed stays unclaimed.
local added = redis.pcall('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], id, 'owner', ARGV[2])
if type(added) == 'table' and added.err then
  if string.find(added.err, 'equal or smaller', 1, true) then return {0, false} end
  return redis.error_reply(added.err)
end
return {1, ARGV[2]}
"""


SET_CONTROL = r"""
-- KEYS[1]: the namespace's controls hash; ARGV: job, paused ('' to leave it, '0', '1'), trigger ('0', '1'),
-- the namespace's release channel (the change is pushed there as slot -1, CONTROLS_CHANGED).
""" + _NOW + r"""local paused, trigger = 0, 0
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if raw then
  local sep = string.find(raw, ':', 1, true)
  paused = tonumber(string.sub(raw, 1, sep - 1))
  trigger = tonumber(string.sub(raw, sep + 1))
end
if ARGV[2] ~= '' then paused = tonumber(ARGV[2]) end
if ARGV[3] == '1' then trigger = math.max(now, trigger + 1) end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d:%d', paused, trigger))
redis.call('PUBLISH', ARGV[4], '-1:' .. ARGV[1])
return {paused, trigger}
"""

RECORD_RUNS = r"""
-- KEYS[1]: the job's history, a sorted set of JSON runs scored slot * 1000 + attempt.
-- ARGV: keep, then (score, run) pairs. A run recorded again for its (slot, attempt) replaces the first.
for i = 2, #ARGV, 2 do
  redis.call('ZREMRANGEBYSCORE', KEYS[1], ARGV[i], ARGV[i])
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[1]) + 1))
return 1
"""

RECORD_RUNS_BATCH = r"""
-- RECORD_RUNS for several jobs in one call (not on a Cluster, whose slots differ per job).
-- KEYS: one history per job. ARGV: keep, then per job the number of its runs and its (score, run) pairs.
local keep = tonumber(ARGV[1])
local a = 2
for k = 1, #KEYS do
  local n = tonumber(ARGV[a])
  a = a + 1
  for _ = 1, n do
    redis.call('ZREMRANGEBYSCORE', KEYS[k], ARGV[a], ARGV[a])
    redis.call('ZADD', KEYS[k], ARGV[a], ARGV[a + 1])
    a = a + 2
  end
  redis.call('ZREMRANGEBYRANK', KEYS[k], 0, -(keep + 1))
end
return #KEYS
"""

PUBLISH_CATALOGUE = r"""
-- KEYS[1]: the namespace's catalogue hash: JSON [job, instance] -> 'expires_at|seen_at|' .. JSON entry.
-- ARGV: ttl_ms, then (field, entry) pairs. Expired entries are dropped; the hash lives as long as its
-- longest-lived entry.
""" + _NOW + r"""local ttl = tonumber(ARGV[1])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local expires = tonumber(string.match(all[i + 1], '^(%d+)|'))
  if expires == nil or expires <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
local stamp = string.format('%d|%d|', now + ttl, now)
for i = 2, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], stamp .. ARGV[i + 1])
end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return now
"""

CATALOGUE = r"""
-- KEYS[1]: the namespace's catalogue hash. Returns {now, HGETALL}: the caller keeps the live entries.
""" + _NOW + r"""return {now, redis.call('HGETALL', KEYS[1])}
"""


# -- schedules as data ----------------------------------------------------------------------------
#
# A namespace's schedules live in the keys of one hash slot (`Keys.schedules`), always given in this
# order as KEYS[1..9]:
# - meta: a hash, id -> "version created_at updated_at due_key task" (the version is the change
#   counter's value at the write; store times in epoch ms; the due key, or '-' when there is no next
#   due; the task last, as it may hold spaces);
# - body: a hash, id -> the JSON text [spec, args, options, paused] the client wrote;
# - due (3) and taskdue (7): the previous release's due index, members due_key .. id and task .. NUL ..
#   due_key .. id. Nothing adds to them any more: a write takes its schedule out of them, MOVE_DUE moves
#   the rest, and a read of the due index waits until they are gone;
# - ids and tasks: sorted sets of score 0, members id and task .. NUL .. id, for lists by id;
# - version: the change counter;
# - pdue (8): the due index, a sorted set of score 0 whose members are part .. due_key .. id, where part
#   is the id's partition (`schedule_partition`, which the client computes: Lua has no MD5) as 2 hex
#   digits and due_key is next_due + 2^63 as 16 hex digits: ZRANGEBYLEX reads one partition in
#   (next_due, id) order, ids byte-wise (UTF-8, so code point order), from any cursor, a page at a time;
# - ptaskdue (9): the due index by task, members task .. NUL .. part .. due_key .. id.

_SCHEDULE_COMMON = _NOW + r"""local PARSE = '^(%d+) (%d+) (%d+) (%S+) (.*)$'

-- HMGET the schedules of `ids`: {ids, metas, bodies}. (`unpack` has a limit: HMGET in chunks.)
local function records(ids)
  local metas, bodies = {}, {}
  for i = 1, #ids, 500 do
    local chunk = {unpack(ids, i, math.min(i + 499, #ids))}
    local m = redis.call('HMGET', KEYS[1], unpack(chunk))
    local b = redis.call('HMGET', KEYS[2], unpack(chunk))
    for j = 1, #chunk do
      metas[#metas + 1] = m[j] or false
      bodies[#bodies + 1] = b[j] or false
    end
  end
  return {ids, metas, bodies}
end

-- Take a schedule out of the due indexes, or put it in (its due key, or '-' for none; its partition).
local OLD = redis.call('EXISTS', KEYS[3], KEYS[7]) > 0
local function unindex(id, task, key, part)
  if key ~= '-' then
    redis.call('ZREM', KEYS[8], part .. key .. id)
    redis.call('ZREM', KEYS[9], task .. '\0' .. part .. key .. id)
    if OLD then
      redis.call('ZREM', KEYS[3], key .. id)
      redis.call('ZREM', KEYS[7], task .. '\0' .. key .. id)
    end
  end
end
local function index(id, task, key, part)
  if key ~= '-' then
    redis.call('ZADD', KEYS[8], 0, part .. key .. id)
    redis.call('ZADD', KEYS[9], 0, task .. '\0' .. part .. key .. id)
  end
end
"""

_SCHEDULE_PUSH = r"""
-- Pushed on the namespace's release channel as slot -2, SCHEDULES_CHANGED.
redis.call('PUBLISH', channel, '-2:' .. id)
"""

_PUT = r"""
-- Write schedule `id` by `expect` ('absent', 'any' or a version); `body`: its JSON text, `key`: its due
-- key, `part`: its partition. Reply: {1, meta, body} written; {0, meta, body} refused by the current
-- schedule; {0} refused, none.
local function put(id, task, body, key, part, expect)
  local cur = redis.call('HGET', KEYS[1], id)
  local version, created, old_key, old_task
  if cur then
    local v, c, u, k, t = string.match(cur, PARSE)
    version, created, old_key, old_task = tonumber(v), c, k, t
  end
  if (expect == 'absent' and cur) or (expect ~= 'absent' and expect ~= 'any'
                                      and (not cur or version ~= tonumber(expect))) then
    if not cur then return {0} end
    return {0, cur, redis.call('HGET', KEYS[2], id)}
  end
  if cur then
    unindex(id, old_task, old_key, part)
    redis.call('ZREM', KEYS[5], old_task .. '\0' .. id)
  else
    created = string.format('%d', now)
    redis.call('ZADD', KEYS[4], 0, id)
  end
  -- The record's version is the change counter's new value.
  local meta = string.format('%d', redis.call('INCR', KEYS[6])) .. ' ' .. created .. ' '
    .. string.format('%d', now) .. ' ' .. key .. ' ' .. task
  redis.call('HSET', KEYS[1], id, meta)
  redis.call('HSET', KEYS[2], id, body)
  index(id, task, key, part)
  redis.call('ZADD', KEYS[5], 0, task .. '\0' .. id)
  return {1, meta, body}
end
"""

PUT_SCHEDULE = _SCHEDULE_COMMON + _PUT + r"""
-- ARGV: id task body due_key partition expect ('absent', 'any' or a version) channel. Reply as `put`'s.
local id, channel = ARGV[1], ARGV[7]
local reply = put(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if reply[1] == 1 then
""" + _SCHEDULE_PUSH + r"""
end
return reply
"""

PUT_SCHEDULES = _SCHEDULE_COMMON + _PUT + r"""
-- ARGV: expect ('absent' or 'any'), channel, then id task body due_key partition per schedule. Reply:
-- `put`'s reply per schedule, in order; one push for the batch, naming its first schedule written.
local expect, channel = ARGV[1], ARGV[2]
local out, id = {}, nil
for i = 3, #ARGV, 5 do
  local reply = put(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], expect)
  if reply[1] == 1 and not id then id = ARGV[i] end
  out[#out + 1] = reply
end
if id then
""" + _SCHEDULE_PUSH + r"""
end
return out
"""

REMOVE_SCHEDULE = _SCHEDULE_COMMON + r"""
-- ARGV: id partition expect (a version, or '' for any) channel. Reply as PUT_SCHEDULE's (the removed
-- schedule).
local id, part, expect, channel = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local cur = redis.call('HGET', KEYS[1], id)
if not cur then return {0} end
local v, c, u, key, task = string.match(cur, PARSE)
local body = redis.call('HGET', KEYS[2], id)
if expect ~= '' and tonumber(v) ~= tonumber(expect) then return {0, cur, body} end
redis.call('HDEL', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
unindex(id, task, key, part)
redis.call('ZREM', KEYS[4], id)
redis.call('ZREM', KEYS[5], task .. '\0' .. id)
redis.call('INCR', KEYS[6])
""" + _SCHEDULE_PUSH + r"""
return {1, cur, body}
"""

GET_SCHEDULES = _SCHEDULE_COMMON + r"""
-- ARGV: ids. Reply: {ids, metas, bodies} (false where there is none).
return records(ARGV)
"""

READ_SCHEDULES = _SCHEDULE_COMMON + r"""
-- ARGV: which index (4: ids, 5: tasks), its lex range min and max, the page's limit, and how many bytes
-- before each member's id (the task and its NUL). Reply as GET_SCHEDULES'.
local members = redis.call('ZRANGEBYLEX', KEYS[tonumber(ARGV[1])], ARGV[2], ARGV[3], 'LIMIT', 0, ARGV[4])
local skip = tonumber(ARGV[5])
local ids = {}
for i = 1, #members do ids[i] = string.sub(members[i], skip + 1) end
return records(ids)
"""

DUE_SCHEDULES = _SCHEDULE_COMMON + r"""
-- ARGV: which index (8: pdue, 9: ptaskdue), the page's limit, the cursor (due_key .. id; '' for the
-- start), the due key above `until` ('' for none), then the ranges to read, each named by what its
-- members begin with: a partition, or a task .. NUL .. partition.
-- Each range is read from the cursor a few members at a time, as the merge of all of them in
-- (due_key, id) order (a heap) takes its members, so a page reads about `limit` members however many
-- ranges there are. A member that its schedule's meta contradicts (left by a writer of the previous
-- release, which knows only `due` and `taskdue`) is dropped and skipped.
-- Reply: {0} while the previous release's index holds entries (MOVE_DUE them first); else
-- {1, ids, metas, bodies}.
if OLD then return {0} end
local index, limit, after, above = KEYS[tonumber(ARGV[1])], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local chunk = math.max(4, math.ceil(limit / math.max(#ARGV - 4, 1)) + 1)

-- Byte-wise order of ids (Lua's own string order is the server's locale's).
local function before(a, b)
  local i = 1
  while string.sub(a, i, i + 7) == string.sub(b, i, i + 7) and i <= #a do i = i + 8 end
  for j = i, math.min(#a, #b) do
    local x, y = string.byte(a, j), string.byte(b, j)
    if x ~= y then return x < y end
  end
  return #a < #b
end
-- Range r's next member: r.member, its due key as two numbers r.k1 r.k2, and r.id; false at the end.
local function step(r)
  if r.at > #r.members then
    if not r.more then return false end
    r.members = redis.call('ZRANGEBYLEX', index, r.low, r.high, 'LIMIT', 0, chunk)
    r.more, r.at = #r.members == chunk, 1
    if #r.members == 0 then return false end
    r.low = '(' .. r.members[#r.members]
  end
  local m = r.members[r.at]
  r.at = r.at + 1
  r.member = m
  r.k1 = tonumber(string.sub(m, r.skip + 1, r.skip + 8), 16)
  r.k2 = tonumber(string.sub(m, r.skip + 9, r.skip + 16), 16)
  r.id = string.sub(m, r.skip + 17)
  return true
end
local function less(a, b)
  if a.k1 ~= b.k1 then return a.k1 < b.k1 end
  if a.k2 ~= b.k2 then return a.k2 < b.k2 end
  return before(a.id, b.id)
end
local heap = {}
local function down(i)
  local n = #heap
  while true do
    local l, least = 2 * i, i
    if l <= n and less(heap[l], heap[least]) then least = l end
    if l + 1 <= n and less(heap[l + 1], heap[least]) then least = l + 1 end
    if least == i then return end
    heap[i], heap[least] = heap[least], heap[i]
    i = least
  end
end

local by_task = ARGV[1] == '9'
for p = 5, #ARGV do
  local base = ARGV[p]
  local r = {skip = #base, members = {}, at = 1, more = true,
             low = after == '' and '[' .. base or '(' .. base .. after,
             high = '(' .. base .. (above == '' and '\255' or above),
             task = by_task and string.sub(base, 1, #base - 3) or nil}
  if step(r) then heap[#heap + 1] = r end
end
for i = math.floor(#heap / 2), 1, -1 do down(i) end

local ids, metas, bodies = {}, {}, {}
while #ids < limit and #heap > 0 do
  local taken = {}
  while #ids + #taken < limit and #heap > 0 do
    local r = heap[1]
    taken[#taken + 1] = {r.member, r.id, string.sub(r.member, r.skip + 1, r.skip + 16), r.task}
    if not step(r) then
      heap[1] = heap[#heap]
      heap[#heap] = nil
    end
    down(1)
  end
  local want = {}
  for i = 1, #taken do want[i] = taken[i][2] end
  local found = records(want)
  for i = 1, #taken do
    local meta, ok = found[2][i], false
    if meta then
      local v, c, u, key, task = string.match(meta, PARSE)
      ok = key == taken[i][3] and (not taken[i][4] or task == taken[i][4])
    end
    if ok then
      ids[#ids + 1], metas[#metas + 1], bodies[#bodies + 1] = taken[i][2], meta, found[3][i]
    else
      redis.call('ZREM', index, taken[i][1])
    end
  end
end
return {1, ids, metas, bodies}
"""

MOVE_DUE = _SCHEDULE_COMMON + r"""
-- ARGV: (member of the previous release's `due`, its id's partition) per entry. Each schedule is put in
-- the due indexes (by its meta, the truth) and its `due` member taken out. Once `due` is empty,
-- `taskdue` (the same schedules by task, which nothing reads any more) goes at once, freed by the
-- server in the background. Reply: the entries left in `due`.
-- (Every command takes the whole chunk's members at once: a few commands, not a few per schedule.)
local function bulk(command, key, args, width)
  for i = 1, #args, 1000 * width do
    redis.call(command, key, unpack(args, i, math.min(i + 1000 * width - 1, #args)))
  end
end
local gone, ids, parts = {}, {}, {}
for i = 1, #ARGV, 2 do
  gone[#gone + 1], parts[#parts + 1] = ARGV[i], ARGV[i + 1]
  ids[#ids + 1] = string.sub(ARGV[i], 17)
end
local pdue, ptaskdue = {}, {}
for i = 1, #ids, 1000 do
  local metas = redis.call('HMGET', KEYS[1], unpack(ids, i, math.min(i + 999, #ids)))
  for j = 1, #metas do
    if metas[j] then
      local id, part = ids[i + j - 1], parts[i + j - 1]
      local v, c, u, key, task = string.match(metas[j], PARSE)
      if key ~= '-' then
        local n = #pdue
        pdue[n + 1], pdue[n + 2] = 0, part .. key .. id
        ptaskdue[n + 1], ptaskdue[n + 2] = 0, task .. '\0' .. part .. key .. id
      end
    end
  end
end
bulk('ZREM', KEYS[3], gone, 1)
bulk('ZADD', KEYS[8], pdue, 2)
bulk('ZADD', KEYS[9], ptaskdue, 2)
local left = redis.call('ZCARD', KEYS[3])
if left == 0 then redis.call('UNLINK', KEYS[7]) end
return left
"""

ADVANCE_SCHEDULES = _SCHEDULE_COMMON + r"""
-- ARGV: (id, version, due_key or '-', partition) per move. Each moves only while the schedule has that
-- version, and only forward: '-' (no slot left) replaces any due key; a due key only a smaller one.
-- (Due keys are compared as two numbers of 8 hex digits: Lua's string order is the server's locale's.)
local function later(a, b)
  local a1, b1 = tonumber(string.sub(a, 1, 8), 16), tonumber(string.sub(b, 1, 8), 16)
  if a1 ~= b1 then return a1 > b1 end
  return tonumber(string.sub(a, 9, 16), 16) > tonumber(string.sub(b, 9, 16), 16)
end
for i = 1, #ARGV, 4 do
  local id, new, part = ARGV[i], ARGV[i + 2], ARGV[i + 3]
  local cur = redis.call('HGET', KEYS[1], id)
  if cur then
    local v, c, u, key, task = string.match(cur, PARSE)
    if tonumber(v) == tonumber(ARGV[i + 1]) and key ~= '-' and (new == '-' or later(new, key)) then
      unindex(id, task, key, part)
      index(id, task, new, part)
      redis.call('HSET', KEYS[1], id, v .. ' ' .. c .. ' ' .. u .. ' ' .. new .. ' ' .. task)
    end
  end
end
return 1
"""
