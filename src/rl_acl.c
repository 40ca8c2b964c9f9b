/* rl_acl: the lock scripts' commands and the ACL probe (see rl_acl.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_acl.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Every command a script of rl_scripts.h calls (redis.call or
 * redis.pcall), and the two the engine sends scripts with, each once:
 * the one list the probe, the messages and the documented ACL come from.
 * sql-tests/test_auth.py checks it against the scripts' text, and each
 * command's arguments against its arity. INCR and PERSIST run only in
 * fenced acquisitions (RL_LUA_DRAW_FENCE, RL_LUA_KEEP_FENCE), HSET only
 * where holder details are written; every other command may run in any
 * call, since a name may hold another client's kind of lock (a release
 * meeting a shared lock reads its sorted set). SCAN and GETRANGE only
 * read the fleet tables (rl_fleet.h): optional, as a lock needs neither.
 * Each is checked with arguments its arity takes (a newer Redis refuses
 * other counts, and 7.0 reads past the arguments of EVAL given none), K
 * standing for the probe's key (RL_ACL_PROBE_KEY). */
#define RL_ACL_LIST(X)                                                                   \
    X("eval", "return 0", ALWAYS)                                                        \
    X("evalsha", "0000000000000000000000000000000000000000 0", OPTIONAL)                 \
    X("set", "K v", ALWAYS) X("get", "K", ALWAYS) X("del", "K", ALWAYS)                  \
    X("type", "K", ALWAYS) X("exists", "K", ALWAYS) X("mget", "K", ALWAYS)               \
    X("mset", "K v", ALWAYS) X("msetnx", "K v", ALWAYS) X("pexpire", "K 1", ALWAYS)      \
    X("pexpireat", "K 1", ALWAYS) X("pttl", "K", ALWAYS) X("time", "", ALWAYS)           \
    X("zadd", "K 1 m", ALWAYS) X("zcount", "K 0 1", ALWAYS) X("zrange", "K 0 1", ALWAYS) \
    X("zrangebyscore", "K 0 1", ALWAYS) X("zrem", "K m", ALWAYS)                         \
    X("zremrangebyscore", "K 0 1", ALWAYS) X("zscore", "K m", ALWAYS)                    \
    X("hget", "K f", ALWAYS) X("hdel", "K f", ALWAYS)                                    \
    X("incr", "K", FENCING) X("persist", "K", FENCING) X("hset", "K f v", HOLDER)        \
    X("publish", "K m", OPTIONAL) X("pubsub numsub", "", OPTIONAL)                      \
    X("scan", "0", OPTIONAL) X("getrange", "K 0 1", OPTIONAL)

#define ENTRY(name, args, need) {name, RL_ACL_##need},
static const struct {
    const char *name;
    int need;
} list[] = {RL_ACL_LIST(ENTRY)};
#define COUNT ((int)(sizeof list / sizeof list[0]))

_Static_assert(sizeof list / sizeof list[0] <= 64, "an rl_acl_mask has a bit per command");

/* The probe: ARGV[1] the key K. Answers 0 on a server without
 * redis.acl_check_cmd, else a list: 1 where the user may run that command
 * of RL_ACL_LIST, 0 where not. A pcall around each check, since
 * acl_check_cmd raises an error for a command the server does not know
 * (renamed away). No key is declared, so a cluster node runs it wherever
 * K's slot is. */
#define LUA_NAME(name, args, need) "'" name " " args "',"
static const char probe[] =
    "if type(redis.acl_check_cmd) ~= 'function' then return 0 end\n"
    "local c, out = {" RL_ACL_LIST(LUA_NAME) "}, {}\n"
    "for i = 1, #c do\n"
    "  local a = {}\n"
    "  for w in string.gmatch(c[i], '%S+') do a[#a + 1] = w == 'K' and ARGV[1] or w end\n"
    "  local ok, yes = pcall(redis.acl_check_cmd, unpack(a))\n"
    "  out[i] = (ok and yes) and 1 or 0\n"
    "end\n"
    "return out\n";

const char *rl_acl_probe_script(size_t *len) {
    *len = sizeof probe - 1;
    return probe;
}

int rl_acl_count(void) { return COUNT; }

const char *rl_acl_command(int i, int *need) {
    if (i < 0 || i >= COUNT) return NULL;
    if (need) *need = list[i].need;
    return list[i].name;
}

static rl_acl_mask bit_of(const char *name) {
    for (int i = 0; i < COUNT; i++)
        if (strcmp(list[i].name, name) == 0) return (rl_acl_mask)1 << i;
    return 0;
}

/* Whether error text (len bytes) says EVAL itself may not run here: the
 * ACL refused it ("NOPERM this user has no permissions to run the 'eval'
 * command"), or the server does not know it ("ERR unknown command 'EVAL'",
 * backquotes before Redis 7). */
static int eval_refused(const char *text, size_t len) {
    if (len >= 6 && memcmp(text, "NOPERM", 6) == 0 && memmem(text, len, "'eval' command", 14))
        return 1;
    static const char unknown[] = "ERR unknown command ";
    size_t u = sizeof unknown - 1;
    return len >= u + 6 && memcmp(text, unknown, u) == 0 &&
           (text[u] == '\'' || text[u] == '`') && strncasecmp(text + u + 1, "eval", 4) == 0 &&
           (text[u + 5] == '\'' || text[u + 5] == '`');
}

rl_acl_mask rl_acl_probe_missing(const rl_reply *r, int *known) {
    *known = 0;
    if (!r) return 0;
    if (r->type == REDIS_REPLY_ERROR) {
        if (!r->str || !eval_refused(r->str, r->len)) return 0;
        *known = 1;
        return bit_of("eval");
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)COUNT) return 0;
    rl_acl_mask missing = 0;
    for (int i = 0; i < COUNT; i++) {
        const rl_reply *e = r->element[i];
        if (!e || e->type != REDIS_REPLY_INTEGER || (e->integer != 0 && e->integer != 1)) return 0;
        if (e->integer == 0) missing |= (rl_acl_mask)1 << i;
    }
    *known = 1;
    return missing;
}

rl_acl_mask rl_acl_needed(int fencing, int holder_info) {
    rl_acl_mask m = 0;
    for (int i = 0; i < COUNT; i++) {
        int need = list[i].need;
        if (need == RL_ACL_ALWAYS || (need == RL_ACL_FENCING && fencing) ||
            (need == RL_ACL_HOLDER && holder_info))
            m |= (rl_acl_mask)1 << i;
    }
    return m;
}

size_t rl_acl_names(rl_acl_mask mask, int plus, size_t max, char *buf, size_t buflen) {
    size_t at = 0, shown = 0, left = 0;
    if (buflen == 0) return 0;
    buf[0] = '\0';
    for (int i = 0; i < COUNT; i++) {
        if (!(mask >> i & 1)) continue;
        if (shown == max) {
            left++;
            continue;
        }
        char name[32];
        size_t k = 0;
        for (const char *p = list[i].name; *p && k < sizeof name - 1; p++) {
            char ch = plus ? *p : (char)toupper((unsigned char)*p);
            name[k++] = *p == ' ' && plus ? '|' : ch; /* a subcommand's rule: +pubsub|numsub */
        }
        name[k] = '\0';
        const char *sep = shown ? (plus ? " " : ", ") : "";
        int n = snprintf(buf + at, buflen - at, "%s%s%s", sep, plus ? "+" : "", name);
        if (n < 0 || (size_t)n >= buflen - at) { /* no room: what fits stays, cut whole */
            buf[at] = '\0';
            return at;
        }
        at += (size_t)n;
        shown++;
    }
    if (left) {
        int n = snprintf(buf + at, buflen - at, " and %zu more", left);
        if (n > 0 && (size_t)n < buflen - at) at += (size_t)n;
        else buf[at] = '\0';
    }
    return at;
}
