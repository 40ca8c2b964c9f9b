/* rl_scripts: the Lua scripts sent with EVAL. EVAL (not EVALSHA) means a
 * node that lost its script cache (restart, SCRIPT FLUSH) never answers
 * NOSCRIPT; Redis hashes and caches the body itself.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

/* KEYS[1] lock key; ARGV[1] token; ARGV[2], when given, a channel to tell
 * waiters on (rl_wait.h). 1 when our key was deleted, else 0. Cleanups
 * after a failed attempt give no channel, so waiters do not wake each
 * other for nothing. */
#define RL_SCRIPT_RELEASE \
    "if redis.call('get',KEYS[1]) == ARGV[1] then redis.call('del',KEYS[1]) " \
    "if ARGV[2] then redis.call('publish',ARGV[2],'') end return 1 else return 0 end"

/* KEYS[1] lock key, KEYS[2] (with fencing) the fence counter; ARGV[1]
 * token, ARGV[2] ttl ms. 1 when our key got the new TTL; 0 when the key is
 * gone or not ours: it is never re-created. A counter that would expire
 * before the lock is made to live as long, so the next holder's number is
 * still higher. */
#define RL_SCRIPT_EXTEND \
    "if redis.call('get',KEYS[1]) ~= ARGV[1] then return 0 end " \
    "local r = redis.call('pexpire',KEYS[1],ARGV[2]) " \
    "if KEYS[2] then local t = redis.call('pttl',KEYS[2]) " \
    "if t >= 0 and t < tonumber(ARGV[2]) then redis.call('pexpire',KEYS[2],ARGV[2]) end end " \
    "return r"

/* KEYS[1] lock key; ARGV[1] token. The key's PTTL in ms when it holds the
 * token, else 0. Reads only: the lock is neither lengthened nor shortened.
 * A key without expiry answers -1 (never made by this extension). */
#define RL_SCRIPT_CHECK \
    "if redis.call('get',KEYS[1]) ~= ARGV[1] then return 0 end " \
    "return redis.call('pttl',KEYS[1])"

/* KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] token, ARGV[2] ttl ms,
 * ARGV[3] counter ttl ms (0: never expires). The new fence number when the
 * lock was set, nil when the key exists already. */
#define RL_SCRIPT_ACQUIRE_FENCED \
    "if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then " \
    "local f = redis.call('incr',KEYS[2]) " \
    "if tonumber(ARGV[3]) > 0 then redis.call('pexpire',KEYS[2],ARGV[3]) else redis.call('persist',KEYS[2]) end " \
    "return f end return false"

/* KEYS[1] fence counter; ARGV[1] the quorum's highest number, ARGV[2]
 * counter ttl ms (0: never expires). Raises a lagging counter to ARGV[1]. */
#define RL_SCRIPT_FENCE_WRITEBACK \
    "local c = tonumber(redis.call('get',KEYS[1]) or '0') " \
    "if c < tonumber(ARGV[1]) then redis.call('set',KEYS[1],ARGV[1]) end " \
    "if tonumber(ARGV[2]) > 0 then redis.call('pexpire',KEYS[1],ARGV[2]) else redis.call('persist',KEYS[1]) end return 1"

/* Several names at once. KEYS[1..n] lock keys, then (with fencing)
 * KEYS[n+1..2n] their fence counters; ARGV[1] token, ARGV[2] ttl ms, ARGV[3]
 * counter ttl ms (0: never expires), ARGV[4] n. Sets every key or none: when
 * any key exists (whatever its value, our own token from an earlier attempt
 * included) nothing is written and the answer is {0, i}, i the first such
 * key; else every key is set to the token and the answer is {1} followed,
 * with fencing, by each name's new fence number (its counter + 1, as INCR
 * would make it; a counter that is not a number is an error before anything
 * is written). Keys are looked at 1,000 to a call (EXISTS, MGET): each call
 * from a script costs more than the work it does, and Lua's unpack takes a
 * few thousand values at most. */
#define RL_SCRIPT_ACQUIRE_MANY \
    "local n = tonumber(ARGV[4]) " \
    "for a = 1, n, 1000 do local b = math.min(a + 999, n) " \
    "if redis.call('exists', unpack(KEYS, a, b)) > 0 then " \
    "for i = a, b do if redis.call('exists', KEYS[i]) == 1 then return {0, i} end end end end " \
    "local out = {1} " \
    "if #KEYS > n then for a = n + 1, 2 * n, 1000 do local b = math.min(a + 999, 2 * n) " \
    "local v = redis.call('mget', unpack(KEYS, a, b)) " \
    "for j = 1, #v do local c = tonumber(v[j] or '0') " \
    "if not c then return redis.error_reply('fence counter ' .. KEYS[a + j - 1] .. ' is not a number') end " \
    "out[a - n + j] = c + 1 end end end " \
    "for i = 1, n do redis.call('set', KEYS[i], ARGV[1], 'PX', ARGV[2]) end " \
    "for i = 1, #out - 1 do local c = string.format('%.0f', out[i + 1]) " \
    "if tonumber(ARGV[3]) > 0 then redis.call('set', KEYS[n + i], c, 'PX', ARGV[3]) " \
    "else redis.call('set', KEYS[n + i], c) end end " \
    "return out"

/* KEYS[1..n] lock keys; ARGV[1..n] the token each must hold (or ARGV[1]
 * alone: one token for all). Deletes each key that still holds its token
 * and tells waiters on <key>:released (rl_wait.h). Answers a string of n
 * characters, '1' where the key was deleted, '0' where it was not ours. */
#define RL_SCRIPT_RELEASE_MANY \
    "local out, del = {}, {} " \
    "for a = 1, #KEYS, 1000 do local v = redis.call('mget', unpack(KEYS, a, math.min(a + 999, #KEYS))) " \
    "for j = 1, #v do local i = a + j - 1 " \
    "if v[j] == (ARGV[i] or ARGV[1]) then out[i] = '1' del[#del + 1] = KEYS[i] else out[i] = '0' end end end " \
    "for a = 1, #del, 1000 do redis.call('del', unpack(del, a, math.min(a + 999, #del))) end " \
    "for i = 1, #del do redis.call('publish', del[i] .. ':released', '') end " \
    "return table.concat(out)"

/* The cleanup after a failed attempt at several names: KEYS[1..n] lock
 * keys, ARGV[1] token. Deletes each key that still holds the token, tells
 * nobody, and answers how many it deleted. */
#define RL_SCRIPT_CLEANUP_MANY \
    "local del = {} " \
    "for a = 1, #KEYS, 1000 do local v = redis.call('mget', unpack(KEYS, a, math.min(a + 999, #KEYS))) " \
    "for j = 1, #v do if v[j] == ARGV[1] then del[#del + 1] = KEYS[a + j - 1] end end end " \
    "for a = 1, #del, 1000 do redis.call('del', unpack(del, a, math.min(a + 999, #del))) end " \
    "return #del"

/* KEYS[1..n] fence counters; ARGV[1] counter ttl ms (0: never expires),
 * ARGV[2..n+1] the quorum's highest number of each. Raises every lagging
 * counter (with its expiry) and leaves the others alone: it runs only on a
 * node whose acquire script has just set every counter's expiry, and most
 * of the time, on a node that answered late, nothing lags. */
#define RL_SCRIPT_FENCE_WRITEBACK_MANY \
    "local t = tonumber(ARGV[1]) " \
    "for a = 1, #KEYS, 1000 do local v = redis.call('mget', unpack(KEYS, a, math.min(a + 999, #KEYS))) " \
    "for j = 1, #v do local i = a + j - 1 " \
    "if (tonumber(v[j] or '0') or 0) < tonumber(ARGV[i + 1]) then " \
    "if t > 0 then redis.call('set', KEYS[i], ARGV[i + 1], 'PX', ARGV[1]) " \
    "else redis.call('set', KEYS[i], ARGV[i + 1]) end end end end return 1"

#endif
