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

/* Many locks at once, as RL_SCRIPT_EXTEND does each: KEYS[1..n] the lock
 * keys, then (with fencing) KEYS[n+1..2n] their fence counters; ARGV[1..n]
 * the tokens, ARGV[n+1..2n] the TTLs in ms. An array of n integers: 1 where
 * that key held its own token and got its TTL, 0 where it is gone or not
 * ours (never re-created). */
#define RL_SCRIPT_EXTEND_MANY \
    "local n = #ARGV / 2 local f = #KEYS > n local out = {} " \
    "for i = 1, n do local t = tonumber(ARGV[n + i]) " \
    "if redis.call('get',KEYS[i]) == ARGV[i] then out[i] = redis.call('pexpire',KEYS[i],t) " \
    "if f then local p = redis.call('pttl',KEYS[n + i]) " \
    "if p >= 0 and p < t then redis.call('pexpire',KEYS[n + i],t) end end " \
    "else out[i] = 0 end end return out"

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

#endif
