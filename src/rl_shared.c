/* rl_shared: shared locks and holder limits (see rl_shared.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_shared.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_queue.h"
#include "rl_round.h"
#include "rl_scripts.h"
#include "rl_wait.h"

int rl_shared_quorum(int n, int64_t k) {
    if (k <= 1) return n / 2 + 1;
    /* The least q with (k+1)q > kn; never below a majority, so a shared
     * hold and an exclusive one always meet on some node. */
    int q = (int)((k * n) / (k + 1)) + 1;
    return q > n / 2 + 1 ? q : n / 2 + 1;
}

int rl_shared_client_quorum(const rl_client *c, int64_t k) {
    if (c->set.unsafe_test_quorum > 0) return (int)c->set.unsafe_test_quorum;
    return rl_shared_quorum(c->n, k);
}

/* key, <key>:writer-waiting and <key>:released; owned, free with names_free. */
typedef struct names {
    char *key, *mark, *chan;
    size_t keylen, marklen, chanlen;
} names;

static void names_free(names *k) {
    free(k->key);
    free(k->mark);
    free(k->chan);
}

static char *join(const char *a, size_t al, const char *b, size_t bl, const char *suffix, size_t *len) {
    size_t sl = strlen(suffix);
    char *p = malloc(al + bl + sl + 1);
    if (!p) return NULL;
    memcpy(p, a, al);
    memcpy(p + al, b, bl);
    memcpy(p + al + bl, suffix, sl + 1);
    *len = al + bl + sl;
    return p;
}

static int names_make(const rl_client *c, const char *res, size_t reslen, names *k) {
    const char *pre = c->set.key_prefix;
    size_t pl = strlen(pre);
    memset(k, 0, sizeof *k);
    k->key = join(pre, pl, res, reslen, "", &k->keylen);
    k->mark = join(pre, pl, res, reslen, RL_WRITER_SUFFIX, &k->marklen);
    k->chan = join(pre, pl, res, reslen, RL_RELEASED_SUFFIX, &k->chanlen);
    if (k->key && k->mark && k->chan) return 0;
    names_free(k);
    return -1;
}

static rl_status finish(rl_outcome *out, rl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static rl_status finish(rl_outcome *out, rl_status st, const char *fmt, ...) {
    va_list ap;
    out->status = st;
    va_start(ap, fmt);
    vsnprintf(out->msg, sizeof out->msg, fmt, ap);
    va_end(ap);
    return st;
}

static void count_votes(rl_outcome *out, const rl_round *r) {
    out->yes = r->yes;
    out->no = r->no;
    out->fail = r->fail;
}

/* Checks what rl_lock_acquire checks, plus max_holders. */
static rl_status check_args(const rl_client *c, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                            int64_t max_holders, rl_outcome *out) {
    if (rl_lock_check_times(ttl_ms, wait_ms, out) != RL_OK) return out->status;
    if (max_holders < 0 || max_holders > RL_SHARED_MAX_HOLDERS)
        return finish(out, RL_MISUSE, "max_holders must be a whole number from 1 to %d, or 0 for no limit",
                      RL_SHARED_MAX_HOLDERS);
    if (c->n == 0)
        return finish(out, RL_MISUSE, RL_LOCK_NO_NODES_MSG);
    if (out->quorum > c->n)
        return finish(out, RL_MISUSE, "unsafe_test_quorum %d is larger than the %d nodes configured", out->quorum, c->n);
    if (rl_lock_check_resource(c, res, reslen, out) != RL_OK) return out->status;
    return rl_lock_check_ttl(c, ttl_ms, out);
}

/* The compare-and-delete of a failed attempt (no channel: nobody waits for it). */
static void cleanup(rl_client *c, const rl_round *r, const names *k, const char *token) {
    const char *argv[] = {"EVAL", RL_SCRIPT_RELEASE, "1", k->key, token};
    size_t lens[] = {4, sizeof RL_SCRIPT_RELEASE - 1, 1, k->keylen, RL_TOKEN_LEN};
    rl_round_cleanup(c, r, 5, argv, lens);
}

rl_status rl_shared_acquire(rl_client *c, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                            int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    memset(out, 0, sizeof *out);
    token[0] = '\0';
    pthread_mutex_lock(&c->mu);
    out->nodes = c->n;
    out->quorum = rl_shared_client_quorum(c, max_holders);
    names k;
    rl_vote *votes = NULL;
    if (check_args(c, res, reslen, ttl_ms, wait_ms, max_holders, out) != RL_OK) {
        pthread_mutex_unlock(&c->mu);
        return out->status;
    }
    votes = calloc((size_t)c->n, sizeof *votes);
    if (!votes || names_make(c, res, reslen, &k) != 0) {
        free(votes);
        pthread_mutex_unlock(&c->mu);
        return finish(out, RL_NOMEM, "out of memory");
    }
    if (ttl_ms > c->max_ttl_ms) c->max_ttl_ms = ttl_ms;
    int64_t deadline = rl_now_us() + wait_ms * 1000;
    int subscribed = 0, woken = 0;
    char ttl[32], lim[32], details[RL_HOLDER_DETAILS_MAX];
    snprintf(ttl, sizeof ttl, "%lld", (long long)ttl_ms);
    snprintf(lim, sizeof lim, "%lld", (long long)max_holders);
    /* with holder_info, the holder's details go in the same script */
    size_t dlen = c->set.holder_info ? rl_holder_details(c, "shared", details, sizeof details) : 0;
    rl_queue q;
    int no_queue = rl_queue_start(c, &q, k.key, k.keylen, 1, wait_ms) != 0;
    if (no_queue) finish(out, RL_NOMEM, "out of memory");
    for (; !no_queue;) {
        int turn = rl_lock_turn(c, &q, votes, deadline, token, out);
        if (turn < 0) break;
        if (turn == 0) continue;
        const char *argv[] = {"EVAL", RL_SCRIPT_ACQUIRE_SHARED, "2", k.key, k.mark, token, ttl, lim, details};
        size_t lens[] = {4, sizeof RL_SCRIPT_ACQUIRE_SHARED - 1, 1, k.keylen, k.marklen, RL_TOKEN_LEN, strlen(ttl),
                         strlen(lim), dlen};
        rl_round r = {.kind = RL_K_ACQUIRE_SHARED, .give_up_after_us = rl_lock_validity_us(c, ttl_ms, 0, 0),
                      .argc = c->set.holder_info ? 9 : 8, .argv = argv, .lens = lens,
                      .quorum = out->quorum,
                      .guard_applies = 1, .secret = token, .secretlen = RL_TOKEN_LEN, .votes = votes};
        rl_round_run(c, &r);
        int64_t validity = rl_lock_validity_us(c, ttl_ms, r.start_us, r.end_us);
        if (r.yes >= out->quorum && validity > 0) {
            count_votes(out, &r);
            out->validity_ms = validity / 1000;
            out->valid_until_us = r.end_us + validity;
            out->status = RL_OK;
            break;
        }
        /* Failed attempt: give back whatever we got, on every node that may hold it. */
        cleanup(c, &r, &k, token);
        if (rl_lock_ran_out(&r, out, validity)) {
            rl_lock_too_slow(&r, r.end_us, ttl_ms, out);
        } else {
            rl_lock_not_done(c, &r, out, "held exclusively or full");
        }
        int64_t now = rl_now_us();
        if (now >= deadline) break;
        if (q.on) woken = rl_lock_queue_wait(c, &q, deadline, out);
        else woken = rl_lock_pause(c, k.key, k.keylen, &subscribed, woken, r.yes > 0, now, deadline, out);
        if (woken < 0) break;
    }
    rl_queue_end(c, &q, out->status == RL_OK);
    if (subscribed) rl_wait_unsubscribe(c);
    if (out->status != RL_OK) token[0] = '\0';
    out->op = c->op;
    pthread_mutex_unlock(&c->mu);
    names_free(&k);
    free(votes);
    return out->status;
}

rl_status rl_shared_extend(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                           int64_t ttl_ms, int64_t max_holders, rl_outcome *out) {
    char lim[32];
    snprintf(lim, sizeof lim, "%lld", (long long)max_holders);
    pthread_mutex_lock(&c->mu);
    int q = rl_shared_quorum(c->n, max_holders);
    pthread_mutex_unlock(&c->mu);
    return rl_lock_extend_with(c, res, reslen, token, toklen, ttl_ms, lim, q, out);
}
