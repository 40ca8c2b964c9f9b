/* rl_scripts: the Lua scripts the engine runs on the nodes. Sent with
 * EVAL, or by digest with EVALSHA where a node has one cached (the scripts
 * of every cycle, see rl_evalsha.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

/* The node's own clock in ms, for the scripts that keep shared holders'
 * expiries (Redis 7 replicates a script's effects, so TIME is allowed). */
#define RL_LUA_NOW \
    "local tm = redis.call('time')\n" \
    "local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n"

/* The keys a lock keeps beside its own (<key>:holders,
 * <key>:writer-waiting), and a connection's holder details
 * (RL_CLIENT_DETAILS_TAG), are names a lock can have too, ours or another
 * Redlock client's: every script touches one only when it holds what this
 * extension writes there, and otherwise leaves it as it is (the
 * companion's job is then simply not done: no details, no marker).
 * Stored holder details start with this tag and RL_DETAILS_SEP, which
 * also separates their fields (rl_lock_holder.c); a lock's value, a
 * token, never holds that byte. */
#define RL_DETAILS_TAG "redlock1"
#define RL_DETAILS_SEP "\x1f"
/* isdetails(v): value v (of GET, MGET or a failed pcall) is holder
 * details. */
#define RL_LUA_IS_DETAILS \
    "local function isdetails(v)\n" \
    "  return type(v) == 'string' and string.sub(v, 1, 9) == '" RL_DETAILS_TAG "\\31'\n" \
    "end\n"
/* The value of the writer-waiting marker (RL_WRITER_SUFFIX): only a key
 * holding it is one. */
#define RL_WRITER_MARK "redlock-writer-waiting"

/* An exclusive holder's details (host, pid and client_name: no time, no
 * token; rl_lock_holder.c) are written once per connection to each node,
 * not with each lock: in the string key prefix + RL_CLIENT_DETAILS_TAG +
 * the id that starts each of the connection's tokens (rl_random.h: public,
 * as is the time of the acquisition that follows it in the token). So a
 * lock, or a set of names, costs no write beyond its own keys, and a
 * reader finds the details of every name from its value
 * (RL_SCRIPT_HOLDER_READ): never for a name that holds another
 * connection's token, and none for another Redlock client's token, whose
 * shape is not this one. They outlive every lock that points to them:
 * written to live longer than any lock taken behind them
 * (RL_SCRIPT_DETAILS_PUT, rl_lock_holder.c), and kept as long as any of
 * those locks when it is extended (dkeep). A release leaves them: the
 * connection's other locks point to them too. detailskey(p, t): that key
 * for token t under key prefix p, or nil. */
#define RL_CLIENT_DETAILS_TAG "redlock-client:"
#define RL_TOKEN_LEN_TEXT "60"        /* RL_TOKEN_LEN, RL_TOKEN_ID_LEN, the */
#define RL_TOKEN_ID_LEN_TEXT "16"     /* set digit's place (from 1) and */
#define RL_TOKEN_SET_AT_TEXT "17"     /* RL_TOKEN_PUBLIC_LEN (rl_random.h), */
#define RL_TOKEN_PUBLIC_LEN_TEXT "28" /* as checked in rl_lock_holder.c */
#define RL_LUA_DETAILS_KEY \
    "local function detailskey(p, t)\n" \
    "  if #t == " RL_TOKEN_LEN_TEXT " and not string.find(t, '[^0-9a-f]') then\n" \
    "    return p .. '" RL_CLIENT_DETAILS_TAG "' .. string.sub(t, 1, " RL_TOKEN_ID_LEN_TEXT ")\n" \
    "  end\n" \
    "end\n"
/* tokdetails(p, v): the details value v (a token of ours) points to under
 * key prefix p, with the time of the acquisition from the token and the
 * kind "exclusive" after them, as rl_holder_parse reads them; or false. */
#define RL_LUA_TOKEN_DETAILS \
    RL_LUA_IS_DETAILS RL_LUA_DETAILS_KEY \
    "local function tokdetails(p, v)\n" \
    "  local dk = detailskey(p, v)\n" \
    "  if not dk then return false end\n" \
    "  local dv = redis.pcall('get', dk)\n" \
    "  if not isdetails(dv) then return false end\n" \
    "  return dv .. '\\31' .. string.format('%.0f',\n" \
    "    tonumber(string.sub(v, " RL_TOKEN_SET_AT_TEXT " + 1, " RL_TOKEN_PUBLIC_LEN_TEXT "), 16))\n" \
    "    .. '\\31exclusive'\n" \
    "end\n"
/* dkeep(dk, ms): details key dk (or nil) lives at least ms more, never
 * less, when it holds details. */
#define RL_LUA_DETAILS_KEEP \
    RL_LUA_IS_DETAILS RL_LUA_DETAILS_KEY \
    "local function dkeep(dk, ms)\n" \
    "  if dk and isdetails(redis.pcall('get', dk)) then\n" \
    "    local left = redis.call('pttl', dk)\n" \
    "    if left >= 0 and left < ms then redis.call('pexpire', dk, ms) end\n" \
    "  end\n" \
    "end\n"

/* ourz(k): sorted set k is a shared lock of this extension, marked by its
 * member '' with a score of -1 or less (RL_LUA_SHARED_TIDY). A sorted set
 * without that mark (a leaderboard, a job queue, an index) is another
 * program's key under a lock's name: every script leaves it as it is. */
#define RL_LUA_OURS_ZSET \
    "local function ourz(k)\n" \
    "  local s = redis.call('zscore',k,'')\n" \
    "  return s and tonumber(s) <= -1\n" \
    "end\n"

/* A shared lock's key is a sorted set: member token -> expiry (ms, node
 * clock), plus the member '' whose score is -1 - max_holders (0: no
 * limit). Its holders' details (holder_info) are in the hash
 * <key>:holders, field the SHA1 of the token (so no token is
 * readable there), value the details text (rl_lock_holder.c), and the
 * field '' holding RL_DETAILS_TAG, which marks the hash as ours.
 * holders_of(k) gives that hash's name and whether it is one (such a hash,
 * or none yet: anything else, a hash lock of another client too, is left
 * alone). tidy_of(k, hk, hok, now) drops expired holders and their
 * details; deletes both keys when none is left (0), else makes both live
 * as long as the last holder (1). */
#define RL_LUA_SHARED_OF \
    "local function holders_of(k)\n" \
    "  local hk = k .. ':holders'\n" \
    "  local hkt = redis.call('type',hk).ok\n" \
    "  return hk, hkt == 'none'\n" \
    "    or (hkt == 'hash' and redis.call('hget',hk,'') == '" RL_DETAILS_TAG "')\n" \
    "end\n" \
    "local function tidy_of(k, hk, hok, now)\n" \
    "  local ex = redis.call('zrangebyscore',k,0,now)\n" \
    "  if #ex > 0 then\n" \
    "    redis.call('zremrangebyscore',k,0,now)\n" \
    "    if hok and redis.call('exists',hk) == 1 then\n" \
    "      for i = 1, #ex do redis.call('hdel',hk,redis.sha1hex(ex[i])) end\n" \
    "    end\n" \
    "  end\n" \
    "  local last = redis.call('zrange',k,-1,-1,'withscores')\n" \
    "  if not last[2] or tonumber(last[2]) <= 0 then\n" \
    "    redis.call('del',k)\n" \
    "    if hok then redis.call('del',hk) end\n" \
    "    return 0\n" \
    "  end\n" \
    "  redis.call('pexpireat',k,last[2])\n" \
    "  if hok then redis.call('pexpireat',hk,last[2]) end\n" \
    "  return 1\n" \
    "end\n"
/* The same for KEYS[1]: hk, hok and tidy(). Needs `now`. */
#define RL_LUA_SHARED_TIDY \
    RL_LUA_SHARED_OF \
    "local hk, hok = holders_of(KEYS[1])\n" \
    "local function tidy() return tidy_of(KEYS[1], hk, hok, now) end\n"

/* KEYS[1] lock key; ARGV[1] token; ARGV[2], when given, a channel to tell
 * waiters on (rl_wait.h); a user who may not publish there still releases,
 * and the waiters find out at their next try. 1 when our key (a string
 * holding the token) or our live member of a shared lock was deleted, else
 * 0; a key of any other type is never touched. (An exclusive holder's
 * details stay, RL_CLIENT_DETAILS_TAG.) Cleanups after a failed attempt
 * give no channel, so waiters do not wake each other for nothing. */
#define RL_SCRIPT_RELEASE \
    "local ty = redis.call('type',KEYS[1]).ok\n" \
    "if ty == 'string' then\n" \
    "  if redis.call('get',KEYS[1]) == ARGV[1] then\n" \
    "    redis.call('del',KEYS[1])\n" \
    "    if ARGV[2] then redis.pcall('publish',ARGV[2],'') end\n" \
    "    return 1\n" \
    "  else\n" \
    "    return 0\n" \
    "  end\n" \
    "end\n" \
    "if ty ~= 'zset' or ARGV[1] == '' then return 0 end\n" \
    RL_LUA_OURS_ZSET \
    "if not ourz(KEYS[1]) then return 0 end\n" \
    RL_LUA_NOW RL_LUA_SHARED_TIDY \
    "local sc = redis.call('zscore',KEYS[1],ARGV[1])\n" \
    "if not sc then\n" \
    "  tidy()\n" \
    "  return 0\n" \
    "end\n" \
    "redis.call('zrem',KEYS[1],ARGV[1])\n" \
    "if hok then redis.call('hdel',hk,redis.sha1hex(ARGV[1])) end\n" \
    "tidy()\n" \
    "if tonumber(sc) <= now then return 0 end\n" \
    "if ARGV[2] then redis.pcall('publish',ARGV[2],'') end\n" \
    "return 1\n"

/* lengthen(k, t): key k lives at least t ms more; never less. An extend
 * only lengthens: a command sent with a token can be delivered late (a
 * partition heals, a kernel's send queue drains), after the token was
 * handed on (redlock_detach, redlock_adopt) and extended further; cutting
 * that lock back would let it expire on a quorum while its holder counts
 * on it. A key without expiry (-1, never made here) is left as it is. */
#define RL_LUA_LENGTHEN \
    "local function lengthen(k, t)\n" \
    "  local p = redis.call('pttl', k)\n" \
    "  if p >= 0 and p < t then redis.call('pexpire', k, t) end\n" \
    "end\n"

/* stretch(k, t): counter or floor k lives at least t ms (a number, or its
 * text) when it holds a number, so that the next holder's number is still
 * higher after a lock that outlives it. A key holding anything else may be
 * another client's lock (the name x:fence taken while x's counter was
 * gone, or, under another key prefix, the name of a floor): left alone,
 * as is one no fencing number can be (more than 16 digits, or 2^53 - 1
 * or more, as RL_LUA_IS_FENCE says), such as a token of digits only. */
#define RL_LUA_STRETCH_FENCE \
    "local function stretch(k, t)\n" \
    "  local v = redis.pcall('get', k)\n" \
    "  if type(v) == 'string' and #v <= 16 and string.find(v, '^%d+$')\n" \
    "      and tonumber(v) < " RL_FENCE_LIMIT_TEXT " then\n" \
    "    local p = redis.call('pttl', k)\n" \
    "    if p >= 0 and p < tonumber(t) then redis.call('pexpire', k, t) end\n" \
    "  end\n" \
    "end\n"

/* KEYS[1] lock key, KEYS[2] and KEYS[3] (optional; the engine always
 * gives them, whatever its fencing setting) the fence counter and the
 * fencing floor (rl_floor.h); ARGV[1]
 * token, ARGV[2] ttl ms, ARGV[3] the key prefix (the holder details the
 * token points to live as long: RL_LUA_DETAILS_KEEP), ARGV[4] (shared locks) the
 * max_holders the caller took it with. 1 when our key lives at least the
 * new TTL (lengthened to it, never shortened: RL_LUA_LENGTHEN); 0 when the
 * key is gone or not ours: it is never re-created. Its counter and floor
 * are made to live as long (RL_LUA_STRETCH_FENCE). On a shared lock
 * (sorted set) our live member's expiry moves to the new one on the
 * node's clock when that is later; a holder limit other than ARGV[4] is an
 * error, since the votes needed depend on it. */
#define RL_SCRIPT_EXTEND \
    "local ty = redis.call('type',KEYS[1]).ok\n" \
    "if ty == 'zset' then\n" \
    "  if ARGV[1] == '' then return 0 end\n" \
    RL_LUA_OURS_ZSET \
    "  if not ourz(KEYS[1]) then return 0 end\n" \
    RL_LUA_NOW RL_LUA_SHARED_TIDY \
    "  local sc = redis.call('zscore',KEYS[1],ARGV[1])\n" \
    "  if not sc or tonumber(sc) <= now then\n" \
    "    tidy()\n" \
    "    return 0\n" \
    "  end\n" \
    "  local lim = redis.call('zscore',KEYS[1],'')\n" \
    "  local k = lim and (-1 - tonumber(lim)) or 0\n" \
    "  if k > 0 and tostring(k) ~= ARGV[4] then\n" \
    "    return redis.error_reply('this shared lock has max_holders '\n" \
    "      .. k .. ': extend it with redlock_extend from the connection that holds it')\n" \
    "  end\n" \
    "  local at = now + tonumber(ARGV[2])\n" \
    "  if at > tonumber(sc) then redis.call('zadd',KEYS[1],at,ARGV[1]) end\n" \
    "  tidy()\n" \
    "  return 1\n" \
    "end\n" \
    "if ty ~= 'string' or redis.call('get',KEYS[1]) ~= ARGV[1] then return 0 end\n" \
    RL_LUA_LENGTHEN \
    "local t = tonumber(ARGV[2])\n" \
    "lengthen(KEYS[1], t)\n" \
    "if ARGV[3] then\n" \
    RL_LUA_DETAILS_KEEP \
    "  dkeep(detailskey(ARGV[3], ARGV[1]), t)\n" \
    "end\n" \
    RL_LUA_STRETCH_FENCE \
    "for i = 2, #KEYS do stretch(KEYS[i], ARGV[2]) end\n" \
    "return 1\n"

/* Many exclusive locks at once, each as RL_SCRIPT_EXTEND extends it.
 * KEYS[1..n] lock keys, then (optional, as there) KEYS[n+1..2n] their
 * fence counters and the rest their fencing floors, each once
 * (RL_LUA_STRETCH_FENCE; a floor to the longest TTL given to a name);
 * ARGV[1..n] the tokens, ARGV[n+1..2n] the TTLs in ms, ARGV[2n+1] (when
 * given) the key prefix, for the holder details its tokens point to (each
 * once, RL_LUA_DETAILS_KEEP).
 * Answers an array of n integers: 1 where that key held its own token and
 * lives at least its TTL (lengthened, never shortened), 0 where it is
 * gone, not ours, or not a string (a shared lock someone took on the name
 * since: no error, so the other keys are still extended); never
 * re-created. Shared holds are not extended here (RL_SCRIPT_EXTEND does,
 * one by one). */
#define RL_SCRIPT_EXTEND_MANY \
    RL_LUA_DETAILS_KEEP RL_LUA_STRETCH_FENCE RL_LUA_LENGTHEN \
    "local n = math.floor(#ARGV / 2)\n" \
    "local f = #KEYS > n\n" \
    "local pre = ARGV[2 * n + 1]\n" \
    "local out, keep = {}, {}\n" \
    "for i = 1, n do\n" \
    "  local t = tonumber(ARGV[n + i])\n" \
    "  if redis.call('type',KEYS[i]).ok == 'string'\n" \
    "      and redis.call('get',KEYS[i]) == ARGV[i] then\n" \
    "    lengthen(KEYS[i], t)\n" \
    "    out[i] = 1\n" \
    "    local dk = pre and detailskey(pre, ARGV[i])\n" \
    "    if dk and (keep[dk] or 0) < t then keep[dk] = t end\n" \
    "    if f then stretch(KEYS[n + i], t) end\n" \
    "  else\n" \
    "    out[i] = 0\n" \
    "  end\n" \
    "end\n" \
    "if f then\n" \
    "  local top = 0\n" \
    "  for i = 1, n do\n" \
    "    if out[i] == 1 then top = math.max(top, tonumber(ARGV[n + i])) end\n" \
    "  end\n" \
    "  for i = 2 * n + 1, #KEYS do stretch(KEYS[i], top) end\n" \
    "end\n" \
    "for dk, t in pairs(keep) do dkeep(dk, t) end\n" \
    "return out\n"

/* Is the lock still ours, and for how long; reads only (the lock is
 * neither lengthened nor shortened).
 * KEYS[1] lock key; ARGV[1] token.
 * Answers: for a string holding the token, its PTTL (-1 for a key without
 * expiry, which this extension never makes); for a shared lock of ours,
 * the ms the token's live holder has left on the node's clock plus
 * (max_holders + 1) * 2^32, so the caller learns the kind and the limit
 * (rl_lock.c, CHECK_KIND_SHIFT); else 0, also for a limit no call here
 * writes (a fraction, above RL_SHARED_MAX_HOLDERS). Both times are capped
 * below 2^31, so that neither kind's answer reads as the other's. */
#define RL_SCRIPT_CHECK \
    "local ty = redis.call('type',KEYS[1]).ok\n" \
    "if ty == 'zset' then\n" \
    "  if ARGV[1] == '' then return 0 end\n" \
    RL_LUA_OURS_ZSET \
    "  if not ourz(KEYS[1]) then return 0 end\n" \
    RL_LUA_NOW \
    "  local sc = redis.call('zscore',KEYS[1],ARGV[1])\n" \
    "  if not sc or tonumber(sc) <= now then return 0 end\n" \
    "  local lim = redis.call('zscore',KEYS[1],'')\n" \
    "  local k = lim and (-1 - tonumber(lim)) or 0\n" \
    "  if k < 0 or k > 1000000 or k ~= math.floor(k) then return 0 end\n" \
    "  local t = math.floor(tonumber(sc) - now)\n" \
    "  if t < 1 then return 0 end\n" \
    "  if t > 2147483647 then t = 2147483647 end\n" \
    "  return t + (k + 1) * 4294967296\n" \
    "end\n" \
    "if ty ~= 'string' or redis.call('get',KEYS[1]) ~= ARGV[1] then return 0 end\n" \
    "local t = redis.call('pttl',KEYS[1])\n" \
    "if t > 2147483647 then t = 2147483647 end\n" \
    "return t\n"

/* Adds a shared holder, expiring ttl ms from now on the node's clock.
 * KEYS[1] lock key, KEYS[2] the writer-waiting marker; ARGV[1] token,
 * ARGV[2] ttl ms, ARGV[3] max_holders (0: no limit), ARGV[4]
 * (holder_info) the holder's details, kept in KEYS[1]..':holders' under
 * the SHA1 of the token.
 * Answers 1; 0 when the key is held exclusively (any other type), when
 * max_holders live holders are in, or when an exclusive acquirer waits
 * (the marker holds RL_WRITER_MARK); an error for a max_holders other
 * than the current holders'. */
#define RL_SCRIPT_ACQUIRE_SHARED \
    "local ty = redis.call('type',KEYS[1]).ok\n" \
    "if ty ~= 'zset' and ty ~= 'none' then return 0 end\n" \
    RL_LUA_OURS_ZSET \
    "if ty == 'zset' and not ourz(KEYS[1]) then return 0 end\n" \
    RL_LUA_NOW RL_LUA_SHARED_TIDY \
    "local k = tonumber(ARGV[3])\n" \
    "local n = 0\n" \
    "if ty == 'zset' and tidy() == 1 then\n" \
    "  local lim = redis.call('zscore',KEYS[1],'')\n" \
    "  local have = lim and (-1 - tonumber(lim)) or 0\n" \
    "  if have ~= k then\n" \
    "    return redis.error_reply('max_holders ' .. k .. ' differs from the ' .. have ..\n" \
    "      ' its current shared holders use (0: no limit); use the same max_holders for every shared holder of a name')\n" \
    "  end\n" \
    "  n = redis.call('zcount',KEYS[1],'(0','+inf')\n" \
    "end\n" \
    "if redis.pcall('get',KEYS[2]) == '" RL_WRITER_MARK "' then return 0 end\n" \
    "if k > 0 and n >= k then return 0 end\n" \
    "redis.call('zadd',KEYS[1],-1 - k,'')\n" \
    "redis.call('zadd',KEYS[1],now + tonumber(ARGV[2]),ARGV[1])\n" \
    "if ARGV[4] and hok then\n" \
    "  redis.call('hset',hk,redis.sha1hex(ARGV[1]),ARGV[4],'','" RL_DETAILS_TAG "')\n" \
    "end\n" \
    "tidy()\n" \
    "return 1\n"

/* Set by an exclusive acquirer that is going to wait while shared holders
 * have the key, so that no new shared holder comes in meanwhile.
 * KEYS[1] lock key, KEYS[2] the writer-waiting marker; ARGV[1] ms.
 * Answers 1. A marker key that holds anything else is another lock, left
 * as it is. */
#define RL_SCRIPT_WRITER_WAITING \
    RL_LUA_OURS_ZSET \
    "if redis.call('type',KEYS[1]).ok == 'zset' and ourz(KEYS[1]) then\n" \
    "  local m = redis.pcall('get',KEYS[2])\n" \
    "  if m == false or m == '" RL_WRITER_MARK "' then\n" \
    "    redis.call('set',KEYS[2],'" RL_WRITER_MARK "','PX',ARGV[1])\n" \
    "  end\n" \
    "end\n" \
    "return 1\n"

/* RL_SCRIPT_WRITER_WAITING for several names: every name of the set held
 * shared gets its marker, so shared holders cannot come back on one name
 * while the waiter is kept out by another.
 * KEYS[1..n] lock keys; ARGV[1] ms, ARGV[2] the marker's suffix
 * (RL_WRITER_SUFFIX). Answers 1. */
#define RL_SCRIPT_WRITER_WAITING_MANY \
    RL_LUA_OURS_ZSET \
    "for i = 1, #KEYS do\n" \
    "  if redis.call('type', KEYS[i]).ok == 'zset' and ourz(KEYS[i]) then\n" \
    "    local mk = KEYS[i] .. ARGV[2]\n" \
    "    local m = redis.pcall('get', mk)\n" \
    "    if m == false or m == '" RL_WRITER_MARK "' then\n" \
    "      redis.call('set', mk, '" RL_WRITER_MARK "', 'PX', ARGV[1])\n" \
    "    end\n" \
    "  end\n" \
    "end\n" \
    "return 1\n"

/* A waiter that got in takes its markers away: each marker that holds
 * RL_WRITER_MARK is deleted (another writer still waiting sets it again
 * at its next try, should a reader have come back meanwhile); a marker key
 * holding anything else is another lock, left as it is.
 * KEYS[1..n] lock keys; ARGV[1] the marker's suffix (RL_WRITER_SUFFIX).
 * Answers 1. */
#define RL_SCRIPT_WRITER_DONE \
    "for i = 1, #KEYS do\n" \
    "  local mk = KEYS[i] .. ARGV[1]\n" \
    "  if redis.pcall('get', mk) == '" RL_WRITER_MARK "' then redis.call('del', mk) end\n" \
    "end\n" \
    "return 1\n"

/* Fencing numbers stay below 2^53 - 1 (RL_FENCE_LIMIT_TEXT): Lua's
 * numbers are doubles, exact up to 2^53. isfence(v): counter or floor text
 * v is one to draw from: digits only (Lua's tonumber also takes "inf",
 * "-1", "0x10" and " 7 ") and below that bound. A number drawn that would
 * reach it is refused before it is stored in a floor, so one name whose
 * numbers ran out (or whose counter was set by hand) never stops the other
 * names of its floor. The errors about such a key end in words, not
 * digits, which the masking of a token in an error text could take for
 * part of one. */
#define RL_FENCE_LIMIT_TEXT "9007199254740991"
#define RL_LUA_IS_FENCE \
    "local function isfence(v)\n" \
    "  return #v <= 16 and string.find(v, '^%d+$') ~= nil\n" \
    "    and tonumber(v) < " RL_FENCE_LIMIT_TEXT "\n" \
    "end\n" \
    "local function notfence(what, k)\n" \
    "  return redis.error_reply(what .. ' ' .. k ..\n" \
    "    ' holds no number a fencing number can still be drawn from (digits only, below 2^53 - 1)')\n" \
    "end\n"

/* keep(k, t, had): counter or floor k, just written (with KEEPTTL when it
 * existed: had), lives at least t ms more (t: the digits of the setting,
 * given to PEXPIRE as they are), or for ever when t is 0; a
 * longer expiry, or none, that another client gave it is kept, since
 * clients may differ in fence_ttl_ms and a floor is shared by names.
 * Compared here rather than with PEXPIRE GT, which Redis before 7.0 does
 * not know. */
#define RL_LUA_KEEP_FENCE \
    "local function keep(k, t, had)\n" \
    "  if tonumber(t) == 0 then\n" \
    "    redis.call('persist', k)\n" \
    "    return\n" \
    "  end\n" \
    "  local p = had and redis.call('pttl', k) or -2\n" \
    "  if p ~= -1 and p < tonumber(t) then redis.call('pexpire', k, t) end\n" \
    "end\n"

/* ofvalue(e): the error e of a GET or INCR of a counter or floor is about
 * the key's value (another type, not an integer, no room left), which
 * makes it no key to draw from. failed(e, cmd, k): any other error (the
 * user may not run the command or reach the key, OOM) goes back as it
 * came, naming the command and key, after the lock key KEYS[1] is
 * deleted again. */
#define RL_LUA_FENCE_FAILED \
    "local function ofvalue(e)\n" \
    "  return string.find(e.err, '^WRONGTYPE')\n" \
    "    or string.find(e.err, 'not an integer') or string.find(e.err, 'overflow')\n" \
    "end\n" \
    "local function failed(e, cmd, k)\n" \
    "  redis.call('del',KEYS[1])\n" \
    "  return redis.error_reply(e.err .. ' (' .. cmd .. k .. ')')\n" \
    "end\n"

/* The fencing number of a single acquisition, once its lock key KEYS[1] is
 * set: the name's counter ck + 1 or, when larger, its fencing floor fk + 1
 * (rl_floor.h), left in the counter, kept as RL_LUA_KEEP_FENCE says with
 * fttl; in f. A floor or counter that is not one to draw from
 * (RL_LUA_IS_FENCE; a key of another type too) is an error, and the lock
 * key is deleted again first; so is any other error of their GET or INCR,
 * which goes back as the node gave it (RL_LUA_FENCE_FAILED). */
#define RL_LUA_DRAW_FENCE(ck, fk, fttl) \
    RL_LUA_IS_FENCE RL_LUA_KEEP_FENCE RL_LUA_FENCE_FAILED \
    "local fl = redis.pcall('get'," fk ")\n" \
    "if type(fl) == 'table' and not ofvalue(fl) then return failed(fl, 'GET ', " fk ") end\n" \
    "if type(fl) == 'table' or (fl and not isfence(fl)) then\n" \
    "  redis.call('del',KEYS[1])\n" \
    "  return notfence('fencing floor', " fk ")\n" \
    "end\n" \
    "local f = redis.pcall('incr'," ck ")\n" \
    "if type(f) == 'table' and not ofvalue(f) then return failed(f, 'INCR ', " ck ") end\n" \
    "if type(f) == 'table' or f < 1 or f >= " RL_FENCE_LIMIT_TEXT " then\n" \
    "  redis.call('del',KEYS[1])\n" \
    "  return notfence('fence counter', " ck ")\n" \
    "end\n" \
    "local had = f ~= 1\n" \
    "if fl and tonumber(fl) >= f then\n" \
    "  f = tonumber(fl) + 1\n" \
    "  if f >= " RL_FENCE_LIMIT_TEXT " then\n" \
    "    redis.call('del',KEYS[1])\n" \
    "    return notfence('fencing floor', " fk ")\n" \
    "  end\n" \
    "  redis.call('set'," ck ",string.format('%.0f', f),'KEEPTTL')\n" \
    "end\n" \
    "keep(" ck ", " fttl ", had)\n"

/* A fenced acquire. KEYS[1] lock key, KEYS[2] fence counter, KEYS[3]
 * fencing floor; ARGV[1] token, ARGV[2] ttl ms, ARGV[3] counter ttl ms
 * (0: never expires). Answers the new fencing number when the lock was
 * set, nil when the key exists already. */
#define RL_SCRIPT_ACQUIRE_FENCED \
    "if not redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then return false end\n" \
    RL_LUA_DRAW_FENCE("KEYS[2]", "KEYS[3]", "ARGV[3]") \
    "return f\n"

/* The fencing write-back, run only on the nodes that answered yes with a
 * lower number (rl_fence.h): raises every key below the quorum's number to
 * it and keeps each as RL_LUA_KEEP_FENCE says.
 * KEYS[1..m] fence keys: one lock's counter, or the fencing floors of a
 * set (rl_floor.h); ARGV[1] their ttl ms (0: never expire), ARGV[2] the
 * quorum's number.
 * Answers 1; an error for a key that holds no number (another type, or
 * another client's lock under that name), which is left alone. */
#define RL_SCRIPT_FENCE_WRITEBACK \
    RL_LUA_KEEP_FENCE \
    "local g = tonumber(ARGV[2])\n" \
    "for i = 1, #KEYS do\n" \
    "  local v = redis.pcall('get', KEYS[i])\n" \
    "  if type(v) == 'table' then return v end\n" \
    "  if v and not string.find(v, '^%d+$') then\n" \
    "    return redis.error_reply('fence key ' .. KEYS[i] ..\n" \
    "      ' holds no number; it was left as it is')\n" \
    "  end\n" \
    "  if (tonumber(v or '0') or 0) < g then\n" \
    "    if v then\n" \
    "      redis.call('set', KEYS[i], ARGV[2], 'KEEPTTL')\n" \
    "    else\n" \
    "      redis.call('set', KEYS[i], ARGV[2])\n" \
    "    end\n" \
    "  end\n" \
    "  keep(KEYS[i], ARGV[1], v)\n" \
    "end\n" \
    "return 1\n"

/* Several names at once, all or none.
 * KEYS[1..n] lock keys, then (with fencing) KEYS[n+1..2n] their fence
 * counters and the rest their fencing floors, each once (rl_floor.h);
 * ARGV[1] token, ARGV[2] ttl ms, ARGV[3] floor ttl ms (0: never expire),
 * ARGV[4] n (the holder details the token points to are the
 * connection's: RL_CLIENT_DETAILS_TAG).
 * Answers {0, i} when any key exists (whatever its value, our own token
 * from an earlier attempt too), i the first such key, nothing written;
 * else every key is set to the token: {1}, with fencing {1, f}, f one
 * more than the highest of its counters and floors, stored in every floor
 * (expiries as RL_LUA_KEEP_FENCE says) and in no counter. A counter or
 * floor that is not one to draw from (RL_LUA_IS_FENCE; a floor of another
 * type too) is an error before anything is written, though a name taken
 * elsewhere is the answer first.
 * Keys go 1,000 to a call (MGET, MSET), as each call from a script costs
 * more than its work and unpack takes a few thousand values at most; up
 * to 1,000 names one MSETNX (after the counters are read) both looks and
 * sets, more are looked at first with EXISTS. PEXPIREAT at the node's
 * TIME plus the TTL, since Redis rewrites a PEXPIRE into one for
 * replication (an allocation per key). Numbers are written with
 * string.format: Lua's own conversion may give an exponent on Redis 7.2
 * and later, which INCR would refuse. */
#define RL_SCRIPT_ACQUIRE_MANY \
    "local n = tonumber(ARGV[4])\n" \
    "local function taken(a, b)\n" \
    "  for i = a, b do\n" \
    "    if redis.call('exists', KEYS[i]) == 1 then return {0, i} end\n" \
    "  end\n" \
    "end\n" \
    "if n > 1000 then\n" \
    "  for a = 1, n, 1000 do\n" \
    "    local b = math.min(a + 999, n)\n" \
    "    if redis.call('exists', unpack(KEYS, a, b)) > 0 then return taken(a, b) end\n" \
    "  end\n" \
    "end\n" \
    RL_LUA_IS_FENCE RL_LUA_KEEP_FENCE \
    "local fenced, top, topk, had = #KEYS > n, 0, nil, {}\n" \
    "local function refuse(what, k)\n" \
    "  local held = n <= 1000 and taken(1, n)\n" \
    "  return held or notfence(what, k)\n" \
    "end\n" \
    "if fenced then\n" \
    "  for i = 2 * n + 1, #KEYS do\n" \
    "    local ty = redis.call('type', KEYS[i]).ok\n" \
    "    if ty ~= 'none' and ty ~= 'string' then return refuse('fencing floor', KEYS[i]) end\n" \
    "    had[i] = ty == 'string'\n" \
    "  end\n" \
    "  for a = n + 1, #KEYS, 1000 do\n" \
    "    local b = math.min(a + 999, #KEYS)\n" \
    "    local v = redis.call('mget', unpack(KEYS, a, b))\n" \
    "    for j = 1, #v do\n" \
    "      local t = v[j]\n" \
    "      if t then\n" \
    "        if not isfence(t) then\n" \
    "          return refuse(a + j - 1 > 2 * n and 'fencing floor' or 'fence counter',\n" \
    "            KEYS[a + j - 1])\n" \
    "        end\n" \
    "        local c = tonumber(t)\n" \
    "        if c > top then top, topk = c, a + j - 1 end\n" \
    "      end\n" \
    "    end\n" \
    "  end\n" \
    "  top = top + 1\n" \
    "  if top >= " RL_FENCE_LIMIT_TEXT " then\n" \
    "    return refuse(topk > 2 * n and 'fencing floor' or 'fence counter', KEYS[topk])\n" \
    "  end\n" \
    "end\n" \
    RL_LUA_NOW \
    "local call, tok, kv = redis.call, ARGV[1], {}\n" \
    "for a = 1, n, 1000 do\n" \
    "  local b, m = math.min(a + 999, n), 0\n" \
    "  for i = a, b do\n" \
    "    kv[m + 1] = KEYS[i]\n" \
    "    kv[m + 2] = tok\n" \
    "    m = m + 2\n" \
    "  end\n" \
    "  if n > 1000 then\n" \
    "    call('mset', unpack(kv, 1, m))\n" \
    "  elseif call('msetnx', unpack(kv, 1, m)) == 0 then\n" \
    "    return taken(1, n)\n" \
    "  end\n" \
    "end\n" \
    "local at = string.format('%.0f', now + tonumber(ARGV[2]))\n" \
    "for i = 1, n do call('pexpireat', KEYS[i], at) end\n" \
    "if fenced then\n" \
    "  local g = string.format('%.0f', top)\n" \
    "  for i = 2 * n + 1, #KEYS do\n" \
    "    if had[i] then\n" \
    "      call('set', KEYS[i], g, 'KEEPTTL')\n" \
    "    else\n" \
    "      call('set', KEYS[i], g)\n" \
    "    end\n" \
    "    keep(KEYS[i], ARGV[3], had[i])\n" \
    "  end\n" \
    "  return {1, top}\n" \
    "end\n" \
    "return {1}\n"

/* Releases several names. KEYS[1..n] lock keys; ARGV[1..n] the token each
 * must hold (or ARGV[1] alone: one token for all). Deletes each key that
 * still holds its token (the holder details its token points to stay,
 * RL_CLIENT_DETAILS_TAG), takes each token's member out of each name that
 * is a shared lock of ours (RL_LUA_OURS_ZSET; the key goes with its last
 * holder, as RL_SCRIPT_RELEASE does), then tells the waiters on
 * <key>:released (rl_wait.h) of the names that have any (of every name,
 * where the user may not run PUBSUB NUMSUB). Telling is last and may fail
 * (a user without rights on the channel): the deletions stand.
 * Answers a string of n characters: '1' where the key was deleted (or a
 * live shared hold taken out), '0' where it was not ours. Batched as
 * RL_SCRIPT_ACQUIRE_MANY. RL_LUA_RELEASE_MANY is its body, which tells
 * nobody on the channels of the names in the table quiet (key -> true). */
#define RL_SCRIPT_RELEASE_MANY \
    "local quiet = {}\n" \
    RL_LUA_RELEASE_MANY
#define RL_LUA_RELEASE_MANY \
    RL_LUA_OURS_ZSET RL_LUA_SHARED_OF \
    "local out, del, zs = {}, {}, {}\n" \
    "for a = 1, #KEYS, 1000 do\n" \
    "  local v = redis.call('mget', unpack(KEYS, a, math.min(a + 999, #KEYS)))\n" \
    "  for j = 1, #v do\n" \
    "    local i = a + j - 1\n" \
    "    local t = ARGV[i] or ARGV[1]\n" \
    "    if v[j] == t then\n" \
    "      out[i] = '1'\n" \
    "      del[#del + 1] = KEYS[i]\n" \
    "    else\n" \
    "      out[i] = '0'\n" \
    "      if v[j] == false and t ~= '' then zs[#zs + 1] = i end\n" \
    "    end\n" \
    "  end\n" \
    "end\n" \
    "local zch, now = {}, nil\n" \
    "for _, i in ipairs(zs) do\n" \
    "  local k, t = KEYS[i], ARGV[i] or ARGV[1]\n" \
    "  if redis.call('type', k).ok == 'zset' and ourz(k) then\n" \
    "    if not now then\n" \
    "      local tm = redis.call('time')\n" \
    "      now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n" \
    "    end\n" \
    "    local zk, zok = holders_of(k)\n" \
    "    local sc = redis.call('zscore', k, t)\n" \
    "    if sc then\n" \
    "      redis.call('zrem', k, t)\n" \
    "      if zok then redis.call('hdel', zk, redis.sha1hex(t)) end\n" \
    "    end\n" \
    "    tidy_of(k, zk, zok, now)\n" \
    "    if sc and tonumber(sc) > now then\n" \
    "      out[i] = '1'\n" \
    "      if not quiet[k] then zch[#zch + 1] = k .. ':released' end\n" \
    "    end\n" \
    "  end\n" \
    "end\n" \
    "local ch = zch\n" \
    "for i = 1, #del do\n" \
    "  if not quiet[del[i]] then ch[#ch + 1] = del[i] .. ':released' end\n" \
    "end\n" \
    "for a = 1, #del, 1000 do redis.call('del', unpack(del, a, math.min(a + 999, #del))) end\n" \
    "for a = 1, #ch, 1000 do\n" \
    "  local b = math.min(a + 999, #ch)\n" \
    "  local s = redis.pcall('pubsub', 'numsub', unpack(ch, a, b))\n" \
    "  if s.err then\n" \
    "    for j = a, b do redis.pcall('publish', ch[j], '') end\n" \
    "  else\n" \
    "    for j = 2, #s, 2 do\n" \
    "      if s[j] > 0 then redis.pcall('publish', s[j - 1], '') end\n" \
    "    end\n" \
    "  end\n" \
    "end\n" \
    "return table.concat(out)\n"

/* The cleanup after a failed attempt at several names: KEYS[1..n] lock
 * keys, ARGV[1] token. Deletes each key that still holds the token, tells
 * nobody, and answers how many keys it deleted. */
#define RL_SCRIPT_CLEANUP_MANY \
    "local del = {}\n" \
    "for a = 1, #KEYS, 1000 do\n" \
    "  local v = redis.call('mget', unpack(KEYS, a, math.min(a + 999, #KEYS)))\n" \
    "  for j = 1, #v do\n" \
    "    if v[j] == ARGV[1] then del[#del + 1] = KEYS[a + j - 1] end\n" \
    "  end\n" \
    "end\n" \
    "for a = 1, #del, 1000 do redis.call('del', unpack(del, a, math.min(a + 999, #del))) end\n" \
    "return #del\n"

/* A connection's holder details (RL_CLIENT_DETAILS_TAG, rl_lock_holder.c):
 * KEYS[1] its details key, ARGV[1] the details, ARGV[2] ms. They are set
 * to live at least ARGV[2] ms, or as long as they did when that is longer
 * (an extension may have made them live as long as a lock), unless the key
 * holds anything but details (another program's lock under that name):
 * then it is left as it is and the answer is 0; else 1. */
#define RL_SCRIPT_DETAILS_PUT \
    RL_LUA_IS_DETAILS \
    "local v = redis.pcall('get', KEYS[1])\n" \
    "if v and not isdetails(v) then return 0 end\n" \
    "local t = tonumber(ARGV[2])\n" \
    "local p = redis.call('pttl', KEYS[1])\n" \
    "if p > t then t = p end\n" \
    "redis.call('set', KEYS[1], ARGV[1], 'PX', t)\n" \
    "return 1\n"

/* Who holds a name: KEYS[1] lock key; ARGV[1] the most shared holders to
 * list, ARGV[2] the key prefix. Returns {pttl of the lock key, an identity
 * of its value that is no token (the SHA1 of a string, else the key's
 * type, zset-other for a sorted set that is no shared lock of ours:
 * RL_LUA_OURS_ZSET), the details or false (for a string, those its token
 * points to (RL_CLIENT_DETAILS_TAG) with the time of the acquisition from
 * the token and the kind, "exclusive", as fields 5 and 6); for a shared
 * lock (a sorted set) its number of live holders instead, then a list: for
 * each of the first ARGV[1] live shared holders that has details, the SHA1
 * of its token, the ms it has left on the node's clock and its details}. */
#define RL_SCRIPT_HOLDER_READ \
    RL_LUA_OURS_ZSET \
    "local t = redis.call('type',KEYS[1]).ok\n" \
    "local id = t\n" \
    "local d = false\n" \
    "local l = {}\n" \
    "if t == 'zset' and not ourz(KEYS[1]) then id = 'zset-other' end\n" \
    "if t == 'string' then\n" \
    "  local v = redis.call('get',KEYS[1])\n" \
    "  id = redis.sha1hex(v)\n" \
    RL_LUA_TOKEN_DETAILS \
    "  d = tokdetails(ARGV[2], v)\n" \
    "elseif t == 'zset' and ourz(KEYS[1]) then\n" \
    RL_LUA_NOW \
    "  d = tostring(redis.call('zcount',KEYS[1],'(' .. now,'+inf'))\n" \
    "  local hk = KEYS[1] .. ':holders'\n" \
    "  if redis.call('type',hk).ok == 'hash' then\n" \
    "    local m = redis.call('zrangebyscore',KEYS[1],'(' .. now,'+inf',\n" \
    "      'withscores','limit',0,tonumber(ARGV[1]))\n" \
    "    for i = 1, #m, 2 do\n" \
    "      local f = redis.sha1hex(m[i])\n" \
    "      local v = redis.call('hget',hk,f)\n" \
    "      if v then\n" \
    "        l[#l + 1] = f\n" \
    "        l[#l + 1] = tonumber(m[i + 1]) - now\n" \
    "        l[#l + 1] = v\n" \
    "      end\n" \
    "    end\n" \
    "  end\n" \
    "end\n" \
    "return {redis.call('pttl',KEYS[1]), id, d, l}\n"

/* One step of the fleet read (rl_fleet.h), changing nothing: ARGV[1] the
 * SCAN cursor, ARGV[2] its MATCH pattern (the key prefix, escaped, then
 * '*'), ARGV[3] its COUNT, ARGV[4] the key prefix, ARGV[5] the most shared
 * holders to list per name, ARGV[6] the writer marker's suffix
 * (RL_WRITER_SUFFIX), ARGV[7] the release channel's (RL_RELEASED_SUFFIX).
 * Returns {next cursor, how many keys SCAN returned, entries...}. Each key
 * SCAN returned that is one of these gives an entry (every other key, a
 * companion key or another program's, gives none, and so does a key
 * longer than any lock's, RL_RESOURCE_MAX and a suffix, which keeps a
 * step's answer far below RL_REPLY_MAX_BYTES):
 * - a string with an expiry holding a token (a string of more than 64
 *   bytes is not read): {key, 'x' (a token of this extension's, 60 lowercase
 *   hex digits, or 32 as node-redlock and redis-py write them) or 'f' (24
 *   characters of base64 ending '==', as redsync writes them, or a UUID),
 *   its PTTL, the SHA1 of the value (never the value), the holder details
 *   its token points to (RL_LUA_TOKEN_DETAILS) or false, 1 when the token
 *   says it is a set's (its set digit, rl_random.h), else 0};
 * - a writer-waiting marker (a string holding RL_WRITER_MARK under a name
 *   with the suffix): {key, 'w', its PTTL};
 * - a shared lock of ours (RL_LUA_OURS_ZSET): {key, 'z', its PTTL, its live
 *   holders, its max_holders, a list: for each of its first ARGV[5] live
 *   holders by expiry, the SHA1 of its token, the ms it has left on the
 *   node's clock and its details or false (from <key>:holders when that is
 *   the extension's hash)};
 * - a fair queue of ours (<key>:queue and <key>:queue-lease, both with
 *   RL_QUEUE_MARK, see the fair queues below): {the lock key, 'q', its
 *   live entries (lease above the node's TIME), a list: for each of its
 *   first ARGV[5] live entries in queue order, the entry and the wall-clock
 *   ms its wait began}; at most 4 * ARGV[5] entries are looked at, so dead
 *   ones ahead (which every turn drops) can shorten the list, never the
 *   count. A sorted set of another program under such a name gives none.
 * Then, for each name of those entries whose release channel has
 * subscribers (waiters, rl_wait.h), {the lock key, 's', how many}: one
 * PUBSUB NUMSUB for the step, which counts without a scan of the clients
 * (a user who may not run it gets no such entry). Every call a key costs
 * is one of a few, so a step's time grows with COUNT and ARGV[5] only. */
#define RL_SCRIPT_FLEET_SCAN \
    RL_LUA_TOKEN_DETAILS \
    "local pre, most, wsuf, rsuf = ARGV[4], tonumber(ARGV[5]), ARGV[6], ARGV[7]\n" \
    "local h4 = string.rep('%x', 4)\n" \
    "local uuid = '^' .. h4 .. h4 .. '%-' .. h4 .. '%-' .. h4 .. '%-' .. h4 .. '%-'\n" \
    "  .. h4 .. h4 .. h4 .. '$'\n" \
    "local b64 = '^' .. string.rep('[A-Za-z0-9+/]', 22) .. '==$'\n" \
    "local qs, qm = '" RL_QUEUE_SUFFIX "', '" RL_QUEUE_MARK "'\n" \
    "local r = redis.call('scan', ARGV[1], 'match', ARGV[2], 'count', ARGV[3])\n" \
    "local out, now, ch, seen = {r[1], #r[2]}, nil, {}, {}\n" \
    "local function watch(k)\n" \
    "  if not seen[k] then\n" \
    "    seen[k] = true\n" \
    "    ch[#ch + 1] = k .. rsuf\n" \
    "  end\n" \
    "end\n" \
    "for _, k in ipairs(r[2]) do\n" \
    "  local t = #k <= 65600 and redis.call('type', k).ok\n" \
    "  if t == 'string' then\n" \
    "    local p = redis.call('pttl', k)\n" \
    "    local v = p > 0 and redis.call('getrange', k, 0, 64) or ''\n" \
    "    if #v == 0 or #v > 64 then\n" \
    "    elseif v == '" RL_WRITER_MARK "' and #k > #wsuf and string.sub(k, -#wsuf) == wsuf then\n" \
    "      out[#out + 1] = {k, 'w', p}\n" \
    "      watch(string.sub(k, 1, #k - #wsuf))\n" \
    "    else\n" \
    "      local c = false\n" \
    "      if (#v == 32 or #v == " RL_TOKEN_LEN_TEXT ") and not string.find(v, '[^0-9a-f]') then\n" \
    "        c = 'x'\n" \
    "      elseif (#v == 24 and string.find(v, b64))\n" \
    "          or (#v == 36 and string.find(v, uuid)) then\n" \
    "        c = 'f'\n" \
    "      end\n" \
    "      if c then\n" \
    "        local id, d, s = redis.sha1hex(v), false, 0\n" \
    "        if c == 'x' then\n" \
    "          d = tokdetails(pre, v)\n" \
    "          if #v == " RL_TOKEN_LEN_TEXT " and string.sub(v, " RL_TOKEN_SET_AT_TEXT ", " \
    RL_TOKEN_SET_AT_TEXT ") == '1' then\n" \
    "            s = 1\n" \
    "          end\n" \
    "        end\n" \
    "        out[#out + 1] = {k, c, p, id, d, s}\n" \
    "        watch(k)\n" \
    "      end\n" \
    "    end\n" \
    "  elseif t == 'zset' then\n" \
    "    local lim = redis.call('zscore', k, '')\n" \
    "    if lim and tonumber(lim) <= -1 then\n" \
    "      if not now then\n" \
    "        local tm = redis.call('time')\n" \
    "        now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n" \
    "      end\n" \
    "      local hk = k .. ':holders'\n" \
    "      local hok = redis.pcall('hget', hk, '') == '" RL_DETAILS_TAG "'\n" \
    "      local m = redis.call('zrangebyscore', k, '(' .. now, '+inf',\n" \
    "        'withscores', 'limit', 0, most)\n" \
    "      local l = {}\n" \
    "      for i = 1, #m, 2 do\n" \
    "        local f = redis.sha1hex(m[i])\n" \
    "        l[#l + 1] = f\n" \
    "        l[#l + 1] = math.floor(tonumber(m[i + 1]) - now)\n" \
    "        l[#l + 1] = hok and redis.call('hget', hk, f) or false\n" \
    "      end\n" \
    "      out[#out + 1] = {k, 'z', redis.call('pttl', k),\n" \
    "        redis.call('zcount', k, '(' .. now, '+inf'), -1 - tonumber(lim), l}\n" \
    "      watch(k)\n" \
    "    elseif #k > #qs and string.sub(k, -#qs) == qs and redis.call('zscore', k, qm) then\n" \
    "      local b = string.sub(k, 1, #k - #qs)\n" \
    "      local l = b .. '" RL_QUEUE_LEASE_SUFFIX "'\n" \
    "      if redis.call('type', l).ok == 'zset' and redis.call('zscore', l, qm) then\n" \
    "        if not now then\n" \
    "          local tm = redis.call('time')\n" \
    "          now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)\n" \
    "        end\n" \
    "        local m, q = redis.call('zrange', k, 1, 4 * most, 'withscores'), {}\n" \
    "        for i = 1, #m, 2 do\n" \
    "          if #q < 2 * most then\n" \
    "            local e = redis.call('zscore', l, m[i])\n" \
    "            if e and tonumber(e) > now then\n" \
    "              q[#q + 1] = m[i]\n" \
    "              q[#q + 1] = tonumber(m[i + 1])\n" \
    "            end\n" \
    "          end\n" \
    "        end\n" \
    "        out[#out + 1] = {b, 'q', redis.call('zcount', l, '(' .. now, '+inf'), q}\n" \
    "        watch(b)\n" \
    "      end\n" \
    "    end\n" \
    "  end\n" \
    "end\n" \
    "for a = 1, #ch, 1000 do\n" \
    "  local s = redis.pcall('pubsub', 'numsub', unpack(ch, a, math.min(a + 999, #ch)))\n" \
    "  if type(s) == 'table' and not s.err then\n" \
    "    for j = 2, #s, 2 do\n" \
    "      if s[j] > 0 then\n" \
    "        out[#out + 1] = {string.sub(s[j - 1], 1, #s[j - 1] - #rsuf), 's', s[j]}\n" \
    "      end\n" \
    "    end\n" \
    "  end\n" \
    "end\n" \
    "return out\n"

/* ---- fair queues (rl_queue.h) ----
 * A name's waiters in fair mode are queued on each node in two sorted sets
 * beside the lock: <key>:queue (RL_QUEUE_SUFFIX), member the waiter's
 * entry, score the wall-clock ms at which it began to wait (the waiter's
 * own clock, so the order is the same on every node that holds the
 * entries; equal scores go by member, a random id), and
 * <key>:queue-lease (RL_QUEUE_LEASE_SUFFIX), the same members scored with
 * the node-clock ms at which each entry's lease ends. An entry is
 * RL_QUEUE_ID_HEX random hex digits, ':' and its kind, 'x' (exclusive) or
 * 's' (shared); its waiter hears on the channel <key>:queue:<entry> that
 * its turn may have come. Both sets hold the member RL_QUEUE_MARK with the
 * score -1, which marks them as ours: a sorted set without it (a shared
 * lock named x:queue, a leaderboard) or a key of any other type under
 * those names is another program's, and no script touches it; the name
 * then has no queue on that node. An entry whose lease has ended is dead:
 * every turn and fair release drops those first. Both keys expire
 * with the last lease, so a queue whose waiters all died goes by itself.
 * The scripts only say who may try: the lock itself is taken by the plain
 * acquire scripts, on a quorum, as without a queue. */
#define RL_QUEUE_SUFFIX ":queue"
#define RL_QUEUE_LEASE_SUFFIX ":queue-lease"
#define RL_QUEUE_MARK "redlock-queue"
#define RL_QUEUE_ID_HEX 16
/* ourq(k): 1 when k is a queue set of ours, 0 when it does not exist, -1
 * when it is another program's key (one call when it is ours: a ZSCORE,
 * which fails on a key of another type). qprune(q, l, now): drops the entries
 * whose lease has ended (up to 1,000 a call). qwake(k, q, l, now): tells
 * the waiters at the head of lock key k's queue that their turn may have
 * come: the head when it is exclusive and k is free; when it is shared,
 * the shared entries before the first exclusive one (up to 100) unless k
 * is held exclusively; with no queue, or an empty one, it publishes on
 * <key>:released as a plain release does, for the waiters that do not
 * queue. */
#define RL_LUA_QUEUE \
    "local function ourq(k)\n" \
    "  local m = redis.pcall('zscore', k, '" RL_QUEUE_MARK "')\n" \
    "  if type(m) == 'table' then return -1 end\n" \
    "  if m then return 1 end\n" \
    "  return redis.call('exists', k) == 0 and 0 or -1\n" \
    "end\n" \
    "local function qprune(q, l, now)\n" \
    "  local ex = redis.call('zrangebyscore', l, 0, now, 'limit', 0, 1000)\n" \
    "  if #ex > 0 then\n" \
    "    redis.call('zrem', l, unpack(ex))\n" \
    "    redis.call('zrem', q, unpack(ex))\n" \
    "  end\n" \
    "end\n" \
    "local function qwake(k, q, l, now)\n" \
    "  if ourq(q) ~= 1 or ourq(l) ~= 1 then\n" \
    "    redis.pcall('publish', k .. ':released', '')\n" \
    "    return\n" \
    "  end\n" \
    "  qprune(q, l, now)\n" \
    "  local h = redis.call('zrange', q, 1, 1)\n" \
    "  if #h == 0 then\n" \
    "    redis.call('del', q, l)\n" \
    "    redis.pcall('publish', k .. ':released', '')\n" \
    "    return\n" \
    "  end\n" \
    "  local ty = redis.call('type', k).ok\n" \
    "  if string.sub(h[1], -1) == 'x' then\n" \
    "    if ty == 'none' then redis.pcall('publish', q .. ':' .. h[1], '') end\n" \
    "    return\n" \
    "  end\n" \
    "  if ty == 'string' then return end\n" \
    "  h = redis.call('zrange', q, 1, 100)\n" \
    "  for i = 1, #h do\n" \
    "    if string.sub(h[i], -1) == 'x' then return end\n" \
    "    redis.pcall('publish', q .. ':' .. h[i], '')\n" \
    "  end\n" \
    "end\n"

/* A fair waiter's turn: KEYS[1] the queue, KEYS[2] its leases; ARGV[1]
 * the entry, ARGV[2] the wall-clock ms its wait began (digits), ARGV[3]
 * the lease in ms. Drops dead entries, adds the entry (again, at the same
 * place, when its lease had ended: a waiter that was stopped comes back
 * where it was) or renews its lease, and answers how many entries ahead
 * of it keep it from trying: for an exclusive entry every one ahead, for
 * a shared one the exclusive ones ahead (0: it may try); -1 when either
 * key is another program's (nothing written). A queue found with only one
 * of its two keys (someone deleted the other) starts again empty. */
#define RL_SCRIPT_QUEUE_TURN \
    RL_LUA_QUEUE RL_LUA_NOW \
    "local q, l, me = KEYS[1], KEYS[2], ARGV[1]\n" \
    "if not string.find(ARGV[2], '^%d+$') then\n" \
    "  return redis.error_reply('queue time must be digits')\n" \
    "end\n" \
    "local oq, ol = ourq(q), ourq(l)\n" \
    "if oq < 0 or ol < 0 then return -1 end\n" \
    "if oq ~= ol then\n" \
    "  redis.call('del', q, l)\n" \
    "  oq = 0\n" \
    "end\n" \
    "if oq == 1 then\n" \
    "  qprune(q, l, now)\n" \
    "else\n" \
    "  redis.call('zadd', q, -1, '" RL_QUEUE_MARK "')\n" \
    "  redis.call('zadd', l, -1, '" RL_QUEUE_MARK "')\n" \
    "end\n" \
    "redis.call('zadd', q, ARGV[2], me)\n" \
    "redis.call('zadd', l, now + tonumber(ARGV[3]), me)\n" \
    "local top = redis.call('zrange', l, -1, -1, 'withscores')[2]\n" \
    "redis.call('pexpireat', q, top)\n" \
    "redis.call('pexpireat', l, top)\n" \
    "local r = redis.call('zcount', q, '(-1', '(' .. ARGV[2])\n" \
    "local tie = redis.call('zrangebyscore', q, ARGV[2], ARGV[2])\n" \
    "for i = 1, #tie do\n" \
    "  if tie[i] == me then\n" \
    "    r = r + i - 1\n" \
    "    break\n" \
    "  end\n" \
    "end\n" \
    "if string.sub(me, -1) == 'x' or r == 0 then return r end\n" \
    "local a = redis.call('zrange', q, 1, math.min(r, 1000))\n" \
    "local w = r > 1000 and 1 or 0\n" \
    "for i = 1, #a do\n" \
    "  if string.sub(a[i], -1) == 'x' then w = w + 1 end\n" \
    "end\n" \
    "return w\n"

/* A waiter leaves the queue: KEYS[1] the queue, KEYS[2] its leases,
 * KEYS[3] the lock key; ARGV[1] the entry, ARGV[2] '1' when it leaves
 * without the lock (it gave up, or stopped): when it was at the head, the
 * waiters now at the head are told (RL_LUA_QUEUE's qwake), so a turn
 * given to it is not lost (under pcall, as a fair release tells them).
 * The last entry takes both keys with it. Always 1; other programs' keys
 * are left alone. */
#define RL_SCRIPT_QUEUE_LEAVE \
    RL_LUA_QUEUE \
    "local q, l = KEYS[1], KEYS[2]\n" \
    "if ourq(q) ~= 1 or ourq(l) ~= 1 then return 1 end\n" \
    "local was = redis.call('zrange', q, 1, 1)[1] == ARGV[1]\n" \
    "if redis.call('zrem', q, ARGV[1]) == 0 then return 1 end\n" \
    "redis.call('zrem', l, ARGV[1])\n" \
    "if #redis.call('zrange', q, 1, 1) == 0 then\n" \
    "  redis.call('del', q, l)\n" \
    "  return 1\n" \
    "end\n" \
    "if was and ARGV[2] == '1' then\n" \
    RL_LUA_NOW \
    "  pcall(qwake, KEYS[3], q, l, now)\n" \
    "end\n" \
    "return 1\n"

/* The release of a connection in fair mode: RL_SCRIPT_RELEASE, run with
 * KEYS[1] and ARGV[1] as there and without a channel, then, when it
 * gave the lock back, the next waiters of the name's queue are told
 * (RL_LUA_QUEUE's qwake: on their own channels, or on <key>:released
 * when the name has no queue). Telling is last and under pcall (a user
 * without rights on the queue's keys): the deletion stands. Answers as
 * RL_SCRIPT_RELEASE. */
#define RL_SCRIPT_RELEASE_FAIR \
    RL_LUA_QUEUE \
    "local function release()\n" \
    RL_SCRIPT_RELEASE \
    "end\n" \
    "local done = release()\n" \
    "if done == 1 then\n" \
    "  local tq = redis.call('time')\n" \
    "  local k = KEYS[1]\n" \
    "  pcall(qwake, k, k .. '" RL_QUEUE_SUFFIX "', k .. '" RL_QUEUE_LEASE_SUFFIX "',\n" \
    "    tonumber(tq[1]) * 1000 + math.floor(tonumber(tq[2]) / 1000))\n" \
    "end\n" \
    "return done\n"

/* The release of several names by a connection in fair mode: the names
 * with a fair queue of ours are found first, then RL_LUA_RELEASE_MANY
 * runs with them quiet (no message on their <key>:released, which would
 * wake the waiters that do not queue beside the head), and for each of
 * them it gave back, the next waiters of its queue are told as
 * RL_SCRIPT_RELEASE_FAIR tells them (qwake, under pcall); the names
 * without one are told on <key>:released by the release itself. Answers
 * as RL_SCRIPT_RELEASE_MANY. */
#define RL_SCRIPT_RELEASE_MANY_FAIR \
    RL_LUA_QUEUE \
    "local quiet = {}\n" \
    "for i = 1, #KEYS do\n" \
    "  if ourq(KEYS[i] .. '" RL_QUEUE_SUFFIX "') == 1 then quiet[KEYS[i]] = true end\n" \
    "end\n" \
    "local function release_many()\n" \
    RL_LUA_RELEASE_MANY \
    "end\n" \
    "local out, now = release_many(), nil\n" \
    "for i = 1, #KEYS do\n" \
    "  local k = KEYS[i]\n" \
    "  if string.sub(out, i, i) == '1' and quiet[k] then\n" \
    "    if not now then\n" \
    "      local tq = redis.call('time')\n" \
    "      now = tonumber(tq[1]) * 1000 + math.floor(tonumber(tq[2]) / 1000)\n" \
    "    end\n" \
    "    pcall(qwake, k, k .. '" RL_QUEUE_SUFFIX "', k .. '" RL_QUEUE_LEASE_SUFFIX "', now)\n" \
    "  end\n" \
    "end\n" \
    "return out\n"

#endif
