/* rl_vote: reply classification for lock commands (see rl_vote.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_vote.h"

#include <stdio.h>
#include <string.h>


static const char *type_name(int t) {
    switch (t) {
    case REDIS_REPLY_STRING: return "a string";
    case REDIS_REPLY_ARRAY: return "an array";
    case REDIS_REPLY_INTEGER: return "an integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "a status";
    default: return "an unknown reply";
    }
}

static int unexpected(const rl_reply *r, char *why, size_t whylen) {
    if (r->type == REDIS_REPLY_INTEGER)
        snprintf(why, whylen, "unexpected reply: integer %lld", r->integer);
    else
        snprintf(why, whylen, "unexpected reply: %s", type_name(r->type));
    return RL_V_FAIL;
}

/* Whether error text (len bytes) is the ACL refusing a command or a key:
 * NOPERM for a command sent as it is; inside a script, Redis 7.0 says
 * "The user executing the script can't run this command or subcommand"
 * (or "can't access at least one of the keys"), later versions "ACL
 * failure in script". */
static int acl_refusal(const char *text, size_t len) {
    return (len >= 6 && memcmp(text, "NOPERM", 6) == 0) ||
           memmem(text, len, "user executing the script can't", 31) != NULL ||
           memmem(text, len, "ACL failure in script", 21) != NULL;
}

/* A vote state with its reason. */
static int said(int state, char *why, size_t whylen, const char *reason) {
    snprintf(why, whylen, "%s", reason);
    return state;
}

/* A yes carrying a number (a fence number, a PTTL). */
static int yes_with(long long *value, long long v) {
    *value = v;
    return RL_V_YES;
}

int rl_vote_classify(int kind, const rl_reply *r, const rl_secrets *sec, long long *value, char *why, size_t whylen) {
    *value = 0;
    why[0] = '\0';
    if (!r) {
        snprintf(why, whylen, "no reply");
        return RL_V_FAIL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        /* A server may echo our arguments (a token, a password) in it. */
        int k = snprintf(why, whylen, "Redis error: ");
        if (k > 0 && (size_t)k < whylen) rl_text_from_server(why + k, whylen - (size_t)k, r->str, r->len, sec);
        static const char hint[] =
            "; the node's user needs that permission (see ACL SETUSER in the docs)";
        size_t w = strlen(why);
        if (r->str && acl_refusal(r->str, r->len) && w + sizeof hint <= whylen)
            memcpy(why + w, hint, sizeof hint);
        return RL_V_FAIL;
    }
    int is_int = r->type == REDIS_REPLY_INTEGER;
    switch (kind) {
    case RL_K_ACQUIRE:
        if (r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0) return RL_V_YES;
        if (r->type == REDIS_REPLY_NIL) return said(RL_V_NO, why, whylen, "held by someone else");
        return unexpected(r, why, whylen);
    case RL_K_ACQUIRE_FENCED: /* the new fence number */
        if (is_int && r->integer > 0 && r->integer < RL_FENCE_LIMIT) return yes_with(value, r->integer);
        if (r->type == REDIS_REPLY_NIL) return said(RL_V_NO, why, whylen, "held by someone else");
        return unexpected(r, why, whylen);
    case RL_K_ACQUIRE_MANY:
        /* {1} or {1, fence}: all set (value: the set's fencing number, 0
         * without fencing); {0, i}: key i exists, nothing set. */
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_INTEGER) {
            const rl_reply *head = r->element[0];
            if (head->integer == 1 && r->elements == 1) return yes_with(value, 0);
            if (head->integer == 1 && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER &&
                r->element[1]->integer >= 1 && r->element[1]->integer < RL_FENCE_LIMIT)
                return yes_with(value, r->element[1]->integer);
            if (head->integer == 0 && r->elements == 2 && r->element[1]->type == REDIS_REPLY_INTEGER &&
                r->element[1]->integer >= 1) {
                *value = r->element[1]->integer;
                return said(RL_V_NO, why, whylen, "held by someone else");
            }
        }
        return unexpected(r, why, whylen);
    case RL_K_RELEASE_MANY:
        /* One '1' (deleted) or '0' (not ours) per key; the caller checks the count. */
        if (r->type == REDIS_REPLY_STRING && r->len > 0) {
            long long deleted = 0;
            for (size_t k = 0; k < r->len; k++) {
                if (r->str[k] != '0' && r->str[k] != '1') return unexpected(r, why, whylen);
                deleted += r->str[k] == '1';
            }
            return yes_with(value, deleted);
        }
        return unexpected(r, why, whylen);
    case RL_K_CLEANUP:
        /* A cleanup of several keys (or the write-back sent to late nodes
         * of a set) answers how many it deleted, or 1. */
        if (is_int && r->integer >= 1) return RL_V_YES;
        if (is_int && r->integer == 0) return said(RL_V_NO, why, whylen, "not held with this token");
        return unexpected(r, why, whylen);
    case RL_K_RELEASE:
    case RL_K_EXTEND:
        if (is_int && r->integer == 1) return RL_V_YES;
        if (is_int && r->integer == 0) return said(RL_V_NO, why, whylen, "not held with this token");
        return unexpected(r, why, whylen);
    case RL_K_CHECK: /* the ms the key has left */
        if (is_int && r->integer > 0) return yes_with(value, r->integer);
        if (is_int && r->integer == 0) return said(RL_V_NO, why, whylen, "not held with this token");
        if (is_int && r->integer == -1)
            return said(RL_V_FAIL, why, whylen,
                        "the key holds the token but has no expiry (not a lock this extension took)");
        return unexpected(r, why, whylen);
    case RL_K_HOLDER:
        /* {pttl, identity, details or nil, shared holders}: the first three
         * into why as "<identity>\x1f<details>" (rl_lock_holder.c parses and
         * checks it, and reads the list from the reply itself) */
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 4 && r->element[0]->type == REDIS_REPLY_INTEGER &&
            r->element[3]->type == REDIS_REPLY_ARRAY &&
            (r->element[1]->type == REDIS_REPLY_STRING || r->element[1]->type == REDIS_REPLY_STATUS)) {
            const rl_reply *id = r->element[1], *d = r->element[2];
            *value = r->element[0]->integer;
            int ok = d->type == REDIS_REPLY_STRING && !memchr(d->str, '\0', d->len);
            snprintf(why, whylen, "%.*s%s%.*s", (int)(id->len < 64 ? id->len : 64), id->str, ok ? "\x1f" : "",
                     ok ? (int)d->len : 0, ok ? d->str : "");
            if (memchr(id->str, '\0', id->len) || memchr(id->str, 0x1f, id->len)) return unexpected(r, why, whylen);
            return RL_V_YES;
        }
        return unexpected(r, why, whylen);
    case RL_K_PING:
        if (r->type == REDIS_REPLY_STATUS && r->len == 4 && memcmp(r->str, "PONG", 4) == 0) return RL_V_YES;
        return unexpected(r, why, whylen);
    case RL_K_ACQUIRE_SHARED:
        if (is_int && r->integer == 1) return RL_V_YES;
        if (is_int && r->integer == 0)
            return said(RL_V_NO, why, whylen, "held exclusively, full, or an exclusive acquirer waits");
        return unexpected(r, why, whylen);
    case RL_K_MARK:
    case RL_K_WRITEBACK:
        if (is_int && r->integer == 1) return RL_V_YES;
        return unexpected(r, why, whylen);
    case RL_K_FLEET: /* {next cursor, keys, entries...}: rl_fleet.c reads the entries */
        if (r->type == REDIS_REPLY_ARRAY && r->elements >= 2 && r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_INTEGER) {
            const rl_reply *cur = r->element[0];
            if (cur->len > 0 && cur->len <= 20 && strspn(cur->str, "0123456789") == cur->len) return RL_V_YES;
        }
        return unexpected(r, why, whylen);
    case RL_K_QUEUE: /* entries ahead that keep this waiter from trying; -1: no queue there */
        if (is_int && r->integer == 0) return RL_V_YES;
        if (is_int && r->integer > 0) {
            *value = r->integer;
            return said(RL_V_NO, why, whylen, "queued behind other waiters");
        }
        if (is_int && r->integer == -1)
            return said(RL_V_FAIL, why, whylen,
                        "the key of this name's fair queue holds another program's key: no queue on this node");
        return unexpected(r, why, whylen);
    case RL_K_EXTEND_MANY: /* the answers per key: rl_vote_items */
        if (r->type == REDIS_REPLY_ARRAY) return RL_V_YES;
        return unexpected(r, why, whylen);
    }
    snprintf(why, whylen, "internal: unknown command kind");
    return RL_V_FAIL;
}

int rl_vote_items(const rl_reply *r, signed char *items, int n, char *why, size_t whylen) {
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != (size_t)n) {
        snprintf(why, whylen, "unexpected reply: %s of %zu answers for %d keys", r ? type_name(r->type) : "none",
                 r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0, n);
        return RL_V_FAIL;
    }
    for (int k = 0; k < n; k++) {
        const rl_reply *e = r->element[k];
        if (!e || e->type != REDIS_REPLY_INTEGER || (e->integer != 0 && e->integer != 1)) {
            snprintf(why, whylen, "unexpected reply: answer %d for a key is not 0 or 1", k + 1);
            return RL_V_FAIL;
        }
    }
    /* Only a reply that is whole in shape gives answers. */
    for (int k = 0; k < n; k++) items[k] = (signed char)r->element[k]->integer;
    return RL_V_YES;
}
