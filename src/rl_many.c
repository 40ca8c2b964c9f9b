/* rl_many: several names at once (see rl_many.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_many.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_floor.h"
#include "rl_nameindex.h"
#include "rl_resp.h"
#include "rl_round.h"
#include "rl_scripts.h"
#include "rl_wait.h"

#define FENCE_SUFFIX ":fence" /* as rl_lock.c: the counter of key is key:fence */

/* Every key and fence key of a set, its fencing floors (rl_floor.h), and
 * room for the largest command made from them (3 + 3n + 6 arguments). One
 * owner: mkeys_free. */
typedef struct mkeys {
    int n;
    char *buf;           /* the keys, then the fence keys */
    const char **key, **fkey;
    size_t *keylen, *fkeylen;
    rl_floors floors;
    const char **argv;
    size_t *lens;
} mkeys;

static void mkeys_free(mkeys *k) {
    free(k->buf);
    free(k->key);
    free(k->fkey);
    free(k->keylen);
    free(k->fkeylen);
    rl_floors_free(&k->floors);
    free(k->argv);
    free(k->lens);
    memset(k, 0, sizeof *k);
}

static int mkeys_make(const rl_client *c, int n, const char *const *res, const size_t *lens, mkeys *k) {
    size_t pl = strlen(c->set.key_prefix), sl = sizeof FENCE_SUFFIX - 1, total = 0;
    memset(k, 0, sizeof *k);
    for (int i = 0; i < n; i++) total += 2 * (pl + lens[i]) + sl;
    size_t un = (size_t)n, args = 3 * un + 10;
    k->n = n;
    k->buf = malloc(total + 1);
    k->key = malloc(un * sizeof *k->key);
    k->fkey = malloc(un * sizeof *k->fkey);
    k->keylen = malloc(un * sizeof *k->keylen);
    k->fkeylen = malloc(un * sizeof *k->fkeylen);
    k->argv = malloc(args * sizeof *k->argv);
    k->lens = malloc(args * sizeof *k->lens);
    if (!k->buf || !k->key || !k->fkey || !k->keylen || !k->fkeylen || !k->argv || !k->lens) {
        mkeys_free(k);
        return -1;
    }
    char *p = k->buf;
    for (int i = 0; i < n; i++) {
        k->key[i] = p;
        k->keylen[i] = pl + lens[i];
        memcpy(p, c->set.key_prefix, pl);
        memcpy(p + pl, res[i], lens[i]);
        p += k->keylen[i];
    }
    for (int i = 0; i < n; i++) {
        k->fkey[i] = p;
        k->fkeylen[i] = k->keylen[i] + sl;
        memcpy(p, k->key[i], k->keylen[i]);
        memcpy(p + k->keylen[i], FENCE_SUFFIX, sl);
        p += k->fkeylen[i];
    }
    return 0;
}

/* Appends the fencing floors at index a. */
static int cmd_floors(mkeys *k, int a) {
    for (int j = 0; j < k->floors.m; j++) {
        k->argv[a] = k->floors.key[j];
        k->lens[a++] = k->floors.len[j];
    }
    return a;
}

/* Puts EVAL script numkeys into k->argv; returns the next free index. */
static int cmd_head(mkeys *k, const char *script, size_t scriptlen, char *numkeys, size_t numkeys_size, int nkeys) {
    snprintf(numkeys, numkeys_size, "%d", nkeys);
    k->argv[0] = "EVAL";
    k->lens[0] = 4;
    k->argv[1] = script;
    k->lens[1] = scriptlen;
    k->argv[2] = numkeys;
    k->lens[2] = strlen(numkeys);
    return 3;
}

/* Appends the lock keys (which 0) or the fence keys (1) at index a. */
static int cmd_keys(mkeys *k, int a, int which) {
    for (int i = 0; i < k->n; i++) {
        k->argv[a] = which ? k->fkey[i] : k->key[i];
        k->lens[a++] = which ? k->fkeylen[i] : k->keylen[i];
    }
    return a;
}

static rl_status finish(rl_outcome *out, rl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static rl_status finish(rl_outcome *out, rl_status st, const char *fmt, ...) {
    out->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->msg, sizeof out->msg, fmt, ap);
    va_end(ap);
    return st;
}

/* The names of a set as items of an rl_nameindex. */
typedef struct name_list {
    const char *const *res;
    const size_t *lens;
} name_list;

static const char *name_at(const void *items, int i, size_t *len) {
    const name_list *l = items;
    *len = l->lens[i];
    return l->res[i];
}

#define NAME(s, len) rl_text_excerpt((char[72]){0}, 72, (s), (len), 64)

rl_status rl_many_check(const rl_client *c, int n, const char *const *res, const size_t *lens, int to_take,
                        rl_outcome *out) {
    if (n < 1) return finish(out, RL_MISUSE, "the list of names is empty; give at least one name");
    if (n > RL_MANY_MAX)
        return finish(out, RL_MISUSE, "%d names in one call; at most %d can be taken at once: split the set, or "
                                      "protect it with one coarser lock name", n, RL_MANY_MAX);
    size_t total = 0, pl = strlen(c->set.key_prefix);
    for (int i = 0; i < n; i++) {
        rl_status st = rl_lock_check_resource(c, res[i], lens[i], out);
        if (st != RL_OK) {
            char msg[sizeof out->msg];
            snprintf(msg, sizeof msg, "%s", out->msg);
            return finish(out, st, "name %d of the list: %s", i + 1, msg);
        }
        total += pl + lens[i];
    }
    if (total > RL_MANY_MAX_BYTES)
        return finish(out, RL_MISUSE, "the %d names come to %zu bytes of keys (key_prefix included); at most %d can "
                                      "be taken at once: split the set, or use shorter names", n, total, RL_MANY_MAX_BYTES);
    /* Each name looked up among those before it, then added. */
    name_list l = {res, lens};
    rl_nameindex x = {0};
    for (int i = 0; i < n; i++) {
        if (rl_nameindex_find(&x, &l, i, name_at, res[i], lens[i]) >= 0) {
            rl_nameindex_free(&x);
            return finish(out, RL_MISUSE, "'%s' is in the list twice; give each name once", NAME(res[i], lens[i]));
        }
        rl_nameindex_appended(&x, &l, i + 1, name_at);
    }
    /* With fencing, name:fence is the key of name's counter: taking both
     * in one set would leave a token in that counter, and every later
     * fenced acquisition of name would fail. */
    size_t sl = sizeof FENCE_SUFFIX - 1;
    for (int i = 0; to_take && c->set.fencing && i < n; i++) {
        if (lens[i] <= sl || memcmp(res[i] + lens[i] - sl, FENCE_SUFFIX, sl) != 0) continue;
        int j = rl_nameindex_find(&x, &l, n, name_at, res[i], lens[i] - sl);
        if (j < 0) continue;
        rl_nameindex_free(&x);
        return finish(out, RL_MISUSE, "'%s' is the key of the fencing counter of '%s', also in the list; take them in "
                                      "two calls, or turn fencing off", NAME(res[i], lens[i]), NAME(res[j], lens[j]));
    }
    rl_nameindex_free(&x);
    return RL_OK;
}

/* The shared start of both calls: nodes present, keys made. The names
 * passed rl_many_check in the caller (rl_session, which checks them before
 * looking at its own list); only their count is looked at again here, so
 * that no allocation below can be out of bounds. */
static rl_status begin(rl_client *c, int n, const char *const *res, const size_t *lens, int to_take, rl_outcome *out,
                       mkeys *k, rl_vote **votes) {
    if (rl_lock_check_nodes(c, out) != RL_OK) return out->status;
    if (n < 1 || n > RL_MANY_MAX) return finish(out, RL_MISUSE, "%d names; from 1 to %d can be taken at once", n, RL_MANY_MAX);
    *votes = calloc((size_t)c->n, sizeof **votes);
    /* The floors only a fenced acquisition writes. */
    if (!*votes || mkeys_make(c, n, res, lens, k) != 0 ||
        (to_take && c->set.fencing && rl_floors_make(&k->floors, c->set.key_prefix, k->key, k->keylen, n) != 0)) {
        if (*votes) mkeys_free(k);
        free(*votes);
        *votes = NULL;
        return finish(out, RL_NOMEM, "out of memory");
    }
    return RL_OK;
}

/* What the acquire script's answers carry, per node (a yes vote's value
 * is the set's fencing number on that node, rl_vote.c). */
typedef struct acq_seen {
    int n, fenced;
    const char *const *res;
    const size_t *lens;
    int *blocker;        /* [node]: 0-based index of the name found taken, or -1 */
} acq_seen;

static int acq_inspect(void *ctx, int node, int state, const rl_reply *rep, char *why, size_t whylen) {
    acq_seen *a = ctx;
    if (state == RL_V_NO) {
        long long i = rep->element[1]->integer;
        if (i > a->n) {
            snprintf(why, whylen, "unexpected reply: name %lld of %d taken", i, a->n);
            return -1;
        }
        a->blocker[node] = (int)i - 1;
        snprintf(why, whylen, "held by someone else ('%s' is taken)", NAME(a->res[i - 1], a->lens[i - 1]));
        return 0;
    }
    if (rep->elements != (a->fenced ? 2u : 1u)) {
        snprintf(why, whylen, "unexpected reply: %s fencing number where %s expected", a->fenced ? "no" : "a",
                 a->fenced ? "one was" : "none was");
        return -1;
    }
    return 0;
}

/* The cleanup of a failed attempt: every key still holding token goes,
 * one script per node that may hold any (rl_round_cleanup). */
static void cleanup(rl_client *c, const rl_round *r, mkeys *k, const char *token) {
    char nk[16];
    int a = cmd_head(k, RL_SCRIPT_CLEANUP_MANY, sizeof RL_SCRIPT_CLEANUP_MANY - 1, nk, sizeof nk, k->n);
    a = cmd_keys(k, a, 0);
    k->argv[a] = token;
    k->lens[a++] = RL_TOKEN_LEN;
    rl_round_cleanup(c, r, a, k->argv, k->lens);
}

/* The write-back command raising every fencing floor of k to fence into
 * k->argv (nk, ttl, num: room for three of its arguments). Returns argc. */
static int writeback_cmd(mkeys *k, long long fence, int64_t fence_ttl, char *nk, size_t nklen, char *ttl, size_t ttllen,
                         char num[RL_DECIMAL_MAX]) {
    snprintf(ttl, ttllen, "%lld", (long long)fence_ttl);
    int x = cmd_head(k, RL_SCRIPT_FENCE_WRITEBACK, sizeof RL_SCRIPT_FENCE_WRITEBACK - 1, nk, nklen,
                     k->floors.m);
    x = cmd_floors(k, x);
    k->argv[x] = ttl;
    k->lens[x++] = strlen(ttl);
    k->argv[x] = num; /* fence >= 1 (rl_vote.c) */
    k->lens[x++] = rl_resp_decimal(num, (unsigned long long)fence);
    return x;
}

/* An acquirer about to wait tells the nodes where a name of the set is
 * held shared to let no new shared holder in until its next try, as
 * rl_lock does for one name (rl_shared.h), for rl_lock_marker_ms. One
 * round, ended at the first answer as there. */
static void mark_writer_waiting(rl_client *c, mkeys *k, int64_t left_us, rl_vote *votes) {
    char nk[16], px[32];
    snprintf(px, sizeof px, "%lld", (long long)rl_lock_marker_ms(c, left_us));
    int a = cmd_head(k, RL_SCRIPT_WRITER_WAITING_MANY, sizeof RL_SCRIPT_WRITER_WAITING_MANY - 1, nk, sizeof nk, k->n);
    a = cmd_keys(k, a, 0);
    k->argv[a] = px;
    k->lens[a++] = strlen(px);
    k->argv[a] = RL_WRITER_SUFFIX;
    k->lens[a++] = sizeof RL_WRITER_SUFFIX - 1;
    rl_round r = {.kind = RL_K_MARK, .argc = a, .argv = k->argv, .lens = k->lens, .quorum = 1, .votes = votes};
    rl_round_run(c, &r);
}

/* The acquirer that set the markers got in, or was interrupted: they go,
 * as in rl_lock (interrupted: without waiting for any answer). */
static void clear_writer_waiting(rl_client *c, mkeys *k, int interrupted, rl_vote *votes) {
    char nk[16];
    int a = cmd_head(k, RL_SCRIPT_WRITER_DONE, sizeof RL_SCRIPT_WRITER_DONE - 1, nk, sizeof nk, k->n);
    a = cmd_keys(k, a, 0);
    k->argv[a] = RL_WRITER_SUFFIX;
    k->lens[a++] = sizeof RL_WRITER_SUFFIX - 1;
    if (interrupted) {
        rl_round_cleanup_connected(c, a, k->argv, k->lens);
        return;
    }
    rl_round r = {.kind = RL_K_MARK, .argc = a, .argv = k->argv, .lens = k->lens, .quorum = 1, .votes = votes};
    rl_round_run(c, &r);
}

/* After a successful fenced round: the set's number is the highest of the
 * yes votes; nodes whose floors lag get one write-back script raising
 * them. Returns how many nodes are known to store the number in every
 * floor of the set; why says what failed; *waited whether it waited on
 * the nodes. */
static int writeback(rl_client *c, const rl_round *r, void *kv, long long fence, int64_t fence_ttl, char *why,
                     size_t whylen, int *waited) {
    mkeys *k = kv;
    int lagging, stored = rl_lock_fence_stored(c, r, fence, &lagging);
    *waited = lagging > 0;
    if (!lagging) return stored;
    char nk[16], ttl[32], num[RL_DECIMAL_MAX];
    int x = writeback_cmd(k, fence, fence_ttl, nk, sizeof nk, ttl, sizeof ttl, num);
    return stored + rl_lock_fence_raise(c, r, fence, x, k->argv, k->lens, why, whylen);
}

static void count_votes(rl_outcome *out, const rl_round *r) {
    out->yes = r->yes;
    out->no = r->no;
    out->fail = r->fail;
}

/* The outcome of an acquire round that did not reach a quorum of yes votes. */
static void not_taken(const rl_client *c, const rl_round *r, rl_outcome *out, const acq_seen *a) {
    count_votes(out, r);
    if (r->yes + r->no >= out->quorum) {
        const char *taken = "";
        for (int i = 0; i < c->n && !taken[0]; i++)
            if (r->votes[i].state == RL_V_NO && a->blocker[i] >= 0) taken = r->votes[i].why;
        finish(out, RL_REFUSED, "%s: %d of %d nodes said no (%d needed)", taken[0] ? taken : "held elsewhere", r->no,
               c->n, out->quorum);
        return;
    }
    snprintf(out->msg, sizeof out->msg, "%d of %d nodes failed, so the %d votes needed could not be had: ", r->fail,
             c->n, out->quorum);
    rl_round_describe_failures(c, r, out->msg, sizeof out->msg);
    out->status = RL_NO_QUORUM;
}

rl_status rl_many_acquire(rl_client *c, int n, const char *const *res, const size_t *lens, int64_t ttl_ms,
                          int64_t wait_ms, char token[RL_TOKEN_LEN + 1], long long *fences, rl_outcome *out) {
    memset(out, 0, sizeof *out);
    token[0] = '\0';
    if (rl_lock_check_times(ttl_ms, wait_ms, out) != RL_OK) return out->status;
    pthread_mutex_lock(&c->mu);
    if (ttl_ms * 1000 <= rl_client_drift_us(c, ttl_ms)) {
        pthread_mutex_unlock(&c->mu);
        /* rl_lock_acquire says what the least usable TTL is */
        return rl_lock_acquire(c, res[0], lens[0], ttl_ms, 0, token, out);
    }
    mkeys k;
    rl_vote *votes = NULL;
    if (begin(c, n, res, lens, 1, out, &k, &votes) != RL_OK) {
        pthread_mutex_unlock(&c->mu);
        return out->status;
    }
    int fenced = c->set.fencing != 0;
    acq_seen a = {.n = n, .fenced = fenced, .res = res, .lens = lens};
    a.blocker = calloc((size_t)c->n, sizeof *a.blocker);
    if (!a.blocker) {
        finish(out, RL_NOMEM, "out of memory");
        goto done;
    }
    for (int j = 0; j < n; j++) fences[j] = 0;
    if (ttl_ms > c->max_ttl_ms) c->max_ttl_ms = ttl_ms;
    int64_t deadline = rl_now_us() + wait_ms * 1000;
    int subscribed = -1, woken = 0, marked = 0; /* subscribed: index of the name whose release wakes us */
    for (;;) {
        out->attempts++;
        if (rl_lock_new_token(c, 1, token, out) != RL_OK) break;
        int64_t fence_ttl = rl_lock_fence_ttl_ms(c, ttl_ms);
        char nk[16], ttl[32], fttl[32], cnt[16];
        snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
        snprintf(fttl, sizeof fttl, "%lld", (long long)fence_ttl);
        snprintf(cnt, sizeof cnt, "%d", n);
        int x = cmd_head(&k, RL_SCRIPT_ACQUIRE_MANY, sizeof RL_SCRIPT_ACQUIRE_MANY - 1, nk, sizeof nk,
                         fenced ? 2 * n + k.floors.m : n);
        x = cmd_keys(&k, x, 0);
        if (fenced) x = cmd_floors(&k, cmd_keys(&k, x, 1));
        const char *tail[4] = {token, ttl, fttl, cnt};
        for (int j = 0; j < 4; j++) k.argv[x] = tail[j], k.lens[x++] = strlen(tail[j]);
        for (int i = 0; i < c->n; i++) a.blocker[i] = -1;
        rl_round r = {.kind = RL_K_ACQUIRE_MANY, .give_up_after_us = rl_lock_validity_us(c, ttl_ms, 0, 0),
                      .argc = x, .argv = k.argv, .lens = k.lens, .quorum = out->quorum,
                      .guard_applies = 1, .secret = token, .secretlen = RL_TOKEN_LEN, .votes = votes,
                      .inspect = acq_inspect, .inspect_ctx = &a,
                      /* the connection's holder details, where a node needs them first */
                      .before = c->set.holder_info ? rl_holder_before_send : NULL, .before_ctx = &ttl_ms};
        rl_round_run(c, &r);
        char wb_why[512] = "";
        rl_lock_decision d;
        rl_lock_decide(c, &r, out->quorum, ttl_ms, fenced, writeback, &k, fence_ttl, wb_why, sizeof wb_why,
                       &d);
        if (r.yes >= out->quorum && d.validity_us > 0 && !d.fence_short) {
            if (fenced) {
                /* Nodes that answer after the decision run the script too
                 * and may lag: the same write-back is queued behind it on
                 * each, without waiting (it only ever raises a counter). So
                 * counters of nodes that were restarted empty catch up, as
                 * they do for one lock (rl_fence_late_yes), and a later
                 * quorum that meets the storing one only in such a node
                 * still draws larger numbers. */
                char wnk[16], fttl2[32], num[RL_DECIMAL_MAX];
                int x2 = writeback_cmd(&k, d.fence, fence_ttl, wnk, sizeof wnk, fttl2, sizeof fttl2, num);
                rl_round_send_late(c, &r, x2, k.argv, k.lens);
                for (int j = 0; j < n; j++) fences[j] = d.fence;
            }
            count_votes(out, &r);
            out->validity_ms = d.validity_us / 1000;
            out->valid_until_us = d.end_us + d.validity_us;
            out->status = RL_OK;
            break;
        }
        /* Failed attempt: give back whatever we got, on every node that may hold any of it. */
        cleanup(c, &r, &k, token);
        if (d.fence_short) {
            count_votes(out, &r);
            finish(out, RL_NO_QUORUM,
                   "fencing numbers could be stored on only %d of the %d nodes needed, so they were not handed out "
                   "and the locks were given back: %s",
                   d.stored, out->quorum, wb_why);
        } else if (rl_lock_ran_out(&r, out, d.validity_us)) {
            rl_lock_too_slow(&r, d.end_us, ttl_ms, out);
        } else {
            not_taken(c, &r, out, &a);
        }
        int64_t now = rl_now_us();
        if (now >= deadline) break;
        /* Wake on the release of a name that was found taken (the first
         * node's answer says which); another name taken next time moves the
         * subscription there. */
        int blocked_on = -1;
        for (int i = 0; i < c->n && blocked_on < 0; i++)
            if (votes[i].state == RL_V_NO) blocked_on = a.blocker[i];
        if (r.no > 0) { /* after reading the votes: this round reuses them */
            mark_writer_waiting(c, &k, deadline - now, votes);
            marked = 1;
            now = rl_now_us();
        }
        if (blocked_on >= 0 && blocked_on != subscribed) {
            if (subscribed >= 0) rl_wait_unsubscribe(c);
            subscribed = blocked_on;
            /* A release may have come before the subscription did: try again at once. */
            int confirmed = rl_wait_subscribe(c, k.key[blocked_on], k.keylen[blocked_on], deadline);
            if (confirmed > 0) continue;
            now = confirmed < 0 ? deadline : rl_now_us(); /* cancelled: the pause below sees it at once */
        }
        int w = subscribed >= 0 ? subscribed : 0;
        woken = rl_lock_pause(c, k.key[w], k.keylen[w], NULL, woken, r.yes > 0, now, deadline, out);
        if (woken < 0) break;
    }
    if (marked && (out->status == RL_OK || out->status == RL_INTERRUPTED))
        clear_writer_waiting(c, &k, out->status == RL_INTERRUPTED, votes);
    if (subscribed >= 0) rl_wait_unsubscribe(c);
done:
    if (out->status != RL_OK) {
        token[0] = '\0';
        for (int j = 0; j < n; j++) fences[j] = 0;
    }
    out->op = c->op;
    pthread_mutex_unlock(&c->mu);
    mkeys_free(&k);
    free(votes);
    free(a.blocker);
    return out->status;
}

/* What the release script's answers carry, per node. */
typedef struct rel_seen {
    int n;
    char *flags;  /* [node * n + k]: '1' deleted, '0' not ours */
} rel_seen;

static int rel_inspect(void *ctx, int node, int state, const rl_reply *rep, char *why, size_t whylen) {
    (void)state;
    rel_seen *s = ctx;
    if (rep->len != (size_t)s->n) {
        snprintf(why, whylen, "unexpected reply: %zu answers for %d names", rep->len, s->n);
        return -1;
    }
    memcpy(s->flags + (size_t)node * (size_t)s->n, rep->str, (size_t)s->n);
    return 0;
}

/* A yes from a second row of a server whose yes counts through node into:
 * the script that ran first there deleted the names, the second found them
 * gone, so a name either deleted is deleted. */
static void rel_fold(void *ctx, int into, const rl_reply *rep) {
    rel_seen *s = ctx;
    if (rep->type != REDIS_REPLY_STRING || rep->len != (size_t)s->n) return;
    char *flags = s->flags + (size_t)into * (size_t)s->n;
    for (int k = 0; k < s->n; k++)
        if (rep->str[k] == '1') flags[k] = '1';
}

rl_status rl_many_release(rl_client *c, int n, const char *const *res, const size_t *lens, const char *const *toks,
                          const size_t *toklens, int wait_all, unsigned char *released, rl_outcome *out) {
    memset(out, 0, sizeof *out);
    for (int j = 0; j < n; j++) {
        released[j] = 0;
        if (rl_lock_check_token(toks[j], toklens[j], out) != RL_OK) return out->status;
    }
    pthread_mutex_lock(&c->mu);
    mkeys k;
    rl_vote *votes = NULL;
    if (begin(c, n, res, lens, 0, out, &k, &votes) != RL_OK) {
        out->op = c->op;
        pthread_mutex_unlock(&c->mu);
        return out->status;
    }
    rel_seen s = {.n = n, .flags = malloc((size_t)c->n * (size_t)n)};
    if (!s.flags) {
        finish(out, RL_NOMEM, "out of memory");
    } else {
        char nk[16];
        /* In fair mode the queues' heads are told too (rl_queue.h). */
        int x = c->set.fair ? cmd_head(&k, RL_SCRIPT_RELEASE_MANY_FAIR, sizeof RL_SCRIPT_RELEASE_MANY_FAIR - 1, nk,
                                       sizeof nk, n)
                            : cmd_head(&k, RL_SCRIPT_RELEASE_MANY, sizeof RL_SCRIPT_RELEASE_MANY - 1, nk, sizeof nk, n);
        x = cmd_keys(&k, x, 0);
        /* One token for all when they are the same (as after acquire_many). */
        int same = 1;
        for (int j = 1; j < n && same; j++)
            same = toklens[j] == toklens[0] && memcmp(toks[j], toks[0], toklens[0]) == 0;
        for (int j = 0; j < (same ? 1 : n); j++) k.argv[x] = toks[j], k.lens[x++] = toklens[j];
        /* Only one token can be masked in error texts: with several, the
         * nodes' error texts are withheld, all but their codes. */
        rl_round r = {.kind = RL_K_RELEASE_MANY, .argc = x, .argv = k.argv, .lens = k.lens, .quorum = out->quorum,
                      .wait_all = wait_all, .secret = toks[0], .secretlen = toklens[0], .withhold = !same, .votes = votes,
                      .inspect = rel_inspect, .fold = rel_fold, .inspect_ctx = &s};
        rl_round_run(c, &r);
        rl_round_owe_broken(c, &r);
        count_votes(out, &r);
        int undecided = 0;
        for (int j = 0; j < n; j++) {
            int del = 0, kept = 0;
            for (int i = 0; i < c->n; i++) {
                if (votes[i].state != RL_V_YES) continue;
                if (s.flags[(size_t)i * (size_t)n + (size_t)j] == '1') del++;
                else kept++;
            }
            if (del >= out->quorum) released[j] = 1;
            else if (kept + r.blocked <= c->n - out->quorum) undecided++;
        }
        if (undecided) {
            snprintf(out->msg, sizeof out->msg,
                     "%d of %d nodes failed, so for %d of the %d names the %d votes needed could not be had: ", r.fail,
                     c->n, undecided, n, out->quorum);
            rl_round_describe_failures(c, &r, out->msg, sizeof out->msg);
            out->status = RL_NO_QUORUM;
        } else {
            out->status = RL_OK;
        }
    }
    free(s.flags);
    mkeys_free(&k);
    free(votes);
    out->op = c->op;
    pthread_mutex_unlock(&c->mu);
    return out->status;
}
