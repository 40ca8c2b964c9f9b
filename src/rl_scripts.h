/* rl_scripts: the Lua scripts sent with EVAL. EVAL (not EVALSHA) means a
 * node that lost its script cache (restart, SCRIPT FLUSH) never answers
 * NOSCRIPT; Redis hashes and caches the body itself.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_SCRIPTS_H
#define RL_SCRIPTS_H

/* KEYS[1] lock key, KEYS[2] its holder-details key; ARGV[1] token; ARGV[2],
 * when given, a channel to tell waiters on (rl_wait.h). 1 when our key was
 * deleted (and its details with it), else 0. Cleanups after a failed
 * attempt give no channel, so waiters do not wake each other for nothing. */
#define RL_SCRIPT_RELEASE \
    "if redis.call('get',KEYS[1]) == ARGV[1] then redis.call('del',KEYS[1]) " \
    "redis.call('del',KEYS[2]) " \
    "if ARGV[2] then redis.call('publish',ARGV[2],'') end return 1 else return 0 end"

/* KEYS[1] lock key, KEYS[2] its holder-details key (given the same TTL,
 * when it exists), KEYS[3] (with fencing) the fence counter; ARGV[1]
 * token, ARGV[2] ttl ms. 1 when our key got the new TTL; 0 when the key is
 * gone or not ours: it is never re-created. A counter that would expire
 * before the lock is made to live as long, so the next holder's number is
 * still higher. */
#define RL_SCRIPT_EXTEND \
    "if redis.call('get',KEYS[1]) ~= ARGV[1] then return 0 end " \
    "local r = redis.call('pexpire',KEYS[1],ARGV[2]) " \
    "redis.call('pexpire',KEYS[2],ARGV[2]) " \
    "if KEYS[3] then local t = redis.call('pttl',KEYS[3]) " \
    "if t >= 0 and t < tonumber(ARGV[2]) then redis.call('pexpire',KEYS[3],ARGV[2]) end end " \
    "return r"

/* KEYS[1] lock key, KEYS[2] fence counter; ARGV[1] token, ARGV[2] ttl ms,
 * ARGV[3] counter ttl ms (0: never expires). The new fence number when the
 * lock was set, nil when the key exists already. */
#define RL_SCRIPT_ACQUIRE_FENCED \
    "if redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then " \
    "local f = redis.call('incr',KEYS[2]) " \
    "if tonumber(ARGV[3]) > 0 then redis.call('pexpire',KEYS[2],ARGV[3]) else redis.call('persist',KEYS[2]) end " \
    "return f end return false"

/* The acquire with holder details (rl_holder.h): KEYS[1] lock key, KEYS[2]
 * holder-details key, KEYS[3] (with fencing) fence counter; ARGV[1] token,
 * ARGV[2] ttl ms, ARGV[3] the details, ARGV[4] (with fencing) counter ttl
 * ms. The details are set with the lock's own PX, in the same script, so
 * they never outlive it. Returns what SET NX (status OK, nil) or the
 * fenced script (its number, nil) would. */
#define RL_SCRIPT_ACQUIRE_HOLDER \
    "if not redis.call('set',KEYS[1],ARGV[1],'NX','PX',ARGV[2]) then return false end " \
    "redis.call('set',KEYS[2],ARGV[3],'PX',ARGV[2]) " \
    "if not KEYS[3] then return redis.status_reply('OK') end " \
    "local f = redis.call('incr',KEYS[3]) " \
    "if tonumber(ARGV[4]) > 0 then redis.call('pexpire',KEYS[3],ARGV[4]) else redis.call('persist',KEYS[3]) end " \
    "return f"

/* Who holds a name: KEYS[1] lock key, KEYS[2] holder-details key. Returns
 * {pttl of the lock key, an identity of its value that is no token (the
 * SHA1 of a string, else the key's type), the details or false}. */
#define RL_SCRIPT_HOLDER_READ \
    "local t = redis.call('type',KEYS[1]).ok local id = t " \
    "if t == 'string' then id = redis.sha1hex(redis.call('get',KEYS[1])) end " \
    "return {redis.call('pttl',KEYS[1]), id, redis.call('get',KEYS[2])}"

/* KEYS[1] fence counter; ARGV[1] the quorum's highest number, ARGV[2]
 * counter ttl ms (0: never expires). Raises a lagging counter to ARGV[1]. */
#define RL_SCRIPT_FENCE_WRITEBACK \
    "local c = tonumber(redis.call('get',KEYS[1]) or '0') " \
    "if c < tonumber(ARGV[1]) then redis.call('set',KEYS[1],ARGV[1]) end " \
    "if tonumber(ARGV[2]) > 0 then redis.call('pexpire',KEYS[1],ARGV[2]) else redis.call('persist',KEYS[1]) end return 1"

#endif
