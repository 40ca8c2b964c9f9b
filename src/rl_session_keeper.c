/* rl_session_keeper: the auto-extension thread of a session (part of the
 * rl_session module, declared in rl_session.h). It extends every lock
 * taken with auto_extend at about a third of its TTL, all the locks due at
 * one wake-up in one round (one script call per node, rl_lock_extend_many),
 * shared holds one at a time (the batch's script compares the key's value
 * with the token, and a shared hold is a member of a sorted set), never
 * touches SQLite, never re-creates an expired lock (the extend script
 * cannot), marks a lock lost when an extension is refused or its validity
 * ran out first (counted, and told as an event), and stops when the
 * session ends. A lock released by its owner leaves the held list
 * before its release is sent, so the keeper never extends it afterwards.
 * For the locks taken with on_lost it also watches the validity, so that
 * the owner is told the moment one runs out, extended or not.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rl_clock.h"
#include "rl_session.h"
#include "rl_text.h"

/* Waits on s->wake until rl_now_us() reaches until_us (INT64_MAX: until woken). */
static void wait_until(rl_session *s, int64_t until_us) {
    if (until_us == INT64_MAX) {
        pthread_cond_wait(&s->wake, &s->mu);
        return;
    }
    int64_t wait = until_us - rl_now_us();
    if (wait <= 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (wait % 1000000) * 1000;
    ts.tv_sec += (time_t)(wait / 1000000 + ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_cond_timedwait(&s->wake, &s->mu, &ts);
}

/* The held lock on res with token: several names taken together share
 * one token (and adopt takes any key that holds a token), so the token
 * alone does not say which. */
static int find_held(rl_session *s, const char *res, size_t reslen, const char *token) {
    int i = rl_session_held_index(s, res, reslen);
    return i >= 0 && memcmp(s->held[i].token, token, RL_TOKEN_LEN) == 0 ? i : -1;
}

static void mark_lost(rl_session *s, rl_held *h, const char *why) {
    int was_lost = h->lost;
    h->lost = 1;
    snprintf(h->lost_why, sizeof h->lost_why, "%.250s", why);
    if (!was_lost) {
        rl_session_count_lost(s, h);
        char name[72], msg[400];
        rl_text_excerpt(name, sizeof name, h->res, h->reslen, 64);
        snprintf(msg, sizeof msg, "redlock: lock '%s' lost by auto-extension: %.250s", name, why);
        rl_session_report_end(s, h, RL_EVENT_LOCK_LOST, msg, h->lost_why);
    }
}

/* Reports a keeper's extend that too few nodes answered, for the n locks
 * that were extended last time (the first one's name and reason given):
 * they are tried again while valid, and not reported again until one
 * succeeds, so an outage does not push every other event out of the ring. */
static void report_retry(rl_session *s, int n, const char *res, size_t reslen, const char *why) {
    char name[72], msg[400];
    if (n == 1)
        snprintf(msg, sizeof msg, "redlock: lock '%s' not extended, trying again while it is valid: %.250s",
                 rl_text_excerpt(name, sizeof name, res, reslen, 64), why);
    else
        snprintf(msg, sizeof msg, "redlock: %d locks not extended, trying again while they are valid: %.250s", n,
                 why);
    rl_client_report(s->client, &(rl_event){.kind = RL_EVENT_EXTEND_FAILED, .res = n == 1 ? res : NULL,
                                            .reslen = reslen, .msg = msg});
}

/* One lock of a batch: its copy of what the call needs, kept while s->mu
 * is dropped (the held entry may be released and freed meanwhile). */
typedef struct batch {
    rl_extend_item *items;
    char *block;        /* the resources' bytes, one allocation */
    int n;
} batch;

/* Whether the keeper extends h in a batch: an exclusive lock, not lost,
 * not in flight. */
static int batchable(const rl_held *h) {
    return h->auto_extend && !h->lost && h->next_extend_us != INT64_MAX && h->kind == RL_KIND_EXCLUSIVE;
}

/* Collects up to RL_KEEPER_BATCH_MAX due exclusive locks (and those due within a
 * fifth of their period, so one call serves them too) into b, marking each
 * in flight. Locks whose validity already ran out are marked lost instead.
 * Returns how many were taken (0: none due; -1: OOM, try again soon);
 * *next receives the earliest time an exclusive lock not taken is due.
 * Caller holds s->mu. */
static int collect(rl_session *s, batch *b, int64_t now, int64_t *next) {
    int any_due = 0;
    *next = INT64_MAX;
    for (int i = 0; i < s->nheld; i++) {
        rl_held *h = &s->held[i];
        if (!batchable(h)) continue;
        if (h->next_extend_us <= now) any_due = 1;
        if (h->next_extend_us < *next) *next = h->next_extend_us;
    }
    if (!any_due) return 0;
    int n = 0;
    size_t bytes = 0;
    for (int i = 0; i < s->nheld && n < RL_KEEPER_BATCH_MAX; i++) {
        rl_held *h = &s->held[i];
        h->batch_slot = 0;
        if (!batchable(h)) continue;
        if (h->next_extend_us > now + RL_AUTO_EXTEND_PERIOD_US(h->ttl_ms) / 5) continue;
        if (h->valid_until_us <= now) {
            mark_lost(s, h, "its validity ran out before the keeper could extend it");
            continue;
        }
        n++;
        bytes += h->reslen + RL_TOKEN_LEN;
    }
    b->n = 0;
    if (n == 0) return 0; /* every due lock was lost: nothing to send */
    b->items = malloc((size_t)(n > 0 ? n : 1) * sizeof *b->items);
    b->block = malloc(bytes ? bytes : 1);
    if (!b->items || !b->block) {
        free(b->items);
        free(b->block);
        b->items = NULL;
        b->block = NULL;
        *next = now + 10000; /* try again soon */
        return -1;
    }
    char *p = b->block;
    for (int i = 0; i < s->nheld && b->n < n; i++) {
        rl_held *h = &s->held[i];
        if (!batchable(h)) continue;
        if (h->next_extend_us > now + RL_AUTO_EXTEND_PERIOD_US(h->ttl_ms) / 5) continue;
        rl_extend_item *it = &b->items[b->n];
        memcpy(p, h->res, h->reslen);
        it->res = p;
        it->reslen = h->reslen;
        p += h->reslen;
        memcpy(p, h->token, RL_TOKEN_LEN);
        it->token = p;
        p += RL_TOKEN_LEN;
        it->ttl_ms = h->ttl_ms;
        h->next_extend_us = INT64_MAX; /* in flight */
        /* Once this extend has run the key lives at least this long, maybe less
         * than an extend of the owner's, with a longer TTL, made meanwhile. */
        h->inflight_until_us = now + h->ttl_ms * 1000 - h->drift_us;
        h->batch_slot = ++b->n; /* travels with the entry if the list is reordered */
    }
    return b->n;
}

/* When h is due again after an extend of the keeper's that a later call
 * overtook: its usual period, or sooner when that call left it less
 * validity than a period (an unanswered extend of the owner's, capped). */
static int64_t next_due(const rl_held *h, int64_t now) {
    int64_t usual = now + RL_AUTO_EXTEND_PERIOD_US(h->ttl_ms), soon = now + (h->valid_until_us - now) / 3;
    return soon < usual ? soon : usual;
}

/* What the keeper's extend of held lock h (item it, ending with op) means
 * for it: as for one extend, only a call that decided after the owner's
 * last one counts. Returns 1 when it is to be tried again (too few
 * answers, still valid) after a success, else 0. Caller holds s->mu. */
static int apply(rl_session *s, rl_held *h, const rl_extend_item *it, uint64_t op, int sent, rl_status call) {
    int64_t ran_until = h->inflight_until_us;
    h->inflight_until_us = 0;
    int64_t now = rl_now_us(), ttl = it->ttl_ms;
    if (op <= h->op) {
        /* A later call (the owner's extend) decided after this one was sent:
         * its result stands, whatever this one says. */
        if (h->next_extend_us == INT64_MAX) h->next_extend_us = next_due(h, now);
        return 0;
    }
    rl_status st = call == RL_OK ? it->status : call;
    rl_held_extend_ended(h, st, op, sent, ran_until);
    if (st == RL_OK) {
        h->valid_until_us = it->valid_until_us;
        h->extensions++;
        h->next_extend_us = now + RL_AUTO_EXTEND_PERIOD_US(ttl);
        h->retrying = 0;
    } else if (st == RL_REFUSED) {
        mark_lost(s, h, it->why);
    } else if (h->valid_until_us <= now) {
        mark_lost(s, h, it->why);
    } else {
        /* Nodes did not answer: try again soon, while the lock is still valid. */
        int64_t retry = ttl * 1000 / 10;
        if (retry > 1000000) retry = 1000000;
        h->next_extend_us = now + retry;
        if (h->retrying) return 0;
        h->retrying = 1;
        return 1;
    }
    return 0;
}

/* Extends the locks of b in one round; s->mu is held on entry and exit,
 * dropped meanwhile. */
static void extend_batch(rl_session *s, batch *b) {
    pthread_mutex_unlock(&s->mu);
    uint64_t op;
    int sent;
    rl_status call = rl_lock_extend_many(s->client, b->items, b->n, &op, &sent);
    pthread_mutex_lock(&s->mu);
    int retries = 0;
    const rl_extend_item *first_retry = NULL;
    for (int i = 0; i < s->nheld; i++) {
        rl_held *h = &s->held[i];
        int slot = h->batch_slot;
        if (slot <= 0 || slot > b->n) continue;
        h->batch_slot = 0;
        const rl_extend_item *it = &b->items[slot - 1];
        /* A lock released meanwhile is gone from the list; one taken anew on
         * the name has another token and no slot. (Names taken together
         * share a token: the name is compared too.) */
        if (memcmp(h->token, it->token, RL_TOKEN_LEN) != 0 || h->reslen != it->reslen ||
            memcmp(h->res, it->res, it->reslen) != 0)
            continue;
        if (apply(s, h, it, op, sent, call) && !retries++) first_retry = it;
    }
    if (retries) report_retry(s, retries, first_retry->res, first_retry->reslen, first_retry->why);
    pthread_cond_broadcast(&s->wake); /* a detach may wait for one of these extends */
    free(b->items);
    free(b->block);
    b->items = NULL;
    b->block = NULL;
}

/* Extends one due shared hold (rl_session_held_extend, with its limit and
 * the limit's quorum); s->mu is held on entry and exit, dropped meanwhile. */
static void extend_one(rl_session *s, int i) {
    rl_held *h = &s->held[i];
    int64_t now = rl_now_us();
    if (h->valid_until_us <= now) {
        mark_lost(s, h, "its validity ran out before the keeper could extend it");
        return;
    }
    char token[RL_TOKEN_LEN + 1];
    size_t reslen = h->reslen;
    int64_t ttl = h->ttl_ms, max_holders = h->max_holders;
    int kind = h->kind;
    char *res = malloc(reslen + 1);
    if (!res) {
        h->next_extend_us = now + 10000; /* try again soon */
        return;
    }
    memcpy(res, h->res, reslen + 1);
    memcpy(token, h->token, sizeof token);
    h->next_extend_us = INT64_MAX; /* in flight */
    /* Once this extend has run the key lives at least this long, maybe less
     * than an extend of the owner's, with a longer TTL, made meanwhile. */
    h->inflight_until_us = now + ttl * 1000 - h->drift_us;
    pthread_mutex_unlock(&s->mu);

    rl_outcome o;
    rl_status st = rl_session_held_extend(s, kind, max_holders, res, reslen, token, RL_TOKEN_LEN, ttl, &o);

    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->wake); /* a detach may wait for this extend */
    i = find_held(s, res, reslen, token);
    free(res);
    if (i < 0) return; /* released meanwhile */
    h = &s->held[i];
    int64_t ran_until = h->inflight_until_us;
    h->inflight_until_us = 0;
    now = rl_now_us();
    if (o.op <= h->op) {
        /* A later call (the owner's extend) decided after this one was sent:
         * its result stands, whatever this one says. */
        if (h->next_extend_us == INT64_MAX) h->next_extend_us = next_due(h, now);
        return;
    }
    rl_held_extend_ended(h, st, o.op, o.sent, ran_until);
    if (st == RL_OK) {
        h->valid_until_us = o.valid_until_us;
        h->extensions++;
        h->next_extend_us = now + RL_AUTO_EXTEND_PERIOD_US(ttl);
        h->retrying = 0;
    } else if (st == RL_REFUSED) {
        mark_lost(s, h, o.msg);
    } else if (h->valid_until_us <= now) {
        mark_lost(s, h, o.msg);
    } else {
        /* Nodes did not answer: try again soon, while the lock is still valid. */
        int64_t retry = ttl * 1000 / 10;
        if (retry > 1000000) retry = 1000000;
        h->next_extend_us = now + retry;
        if (!h->retrying) report_retry(s, 1, h->res, h->reslen, o.msg);
        h->retrying = 1;
    }
}

/* The first due shared hold (-1: none); *next is lowered to the earliest
 * time one not due is. Caller holds s->mu. */
static int due_shared(const rl_session *s, int64_t now, int64_t *next) {
    for (int i = 0; i < s->nheld; i++) {
        const rl_held *h = &s->held[i];
        if (!h->auto_extend || h->lost || h->kind == RL_KIND_EXCLUSIVE) continue;
        if (h->next_extend_us <= now) return i;
        if (h->next_extend_us < *next) *next = h->next_extend_us;
    }
    return -1;
}

/* Reports each lock taken with on_lost whose validity has run out, once:
 * one the keeper extends is lost (not extended in time: its nodes did not
 * answer), another has expired. *next is lowered to the time the earliest
 * of the others runs out (as rl_held_left_ms counts: under 1 ms left is
 * none). Caller holds s->mu. */
static void watch_validity(rl_session *s, int64_t now, int64_t *next) {
    for (int i = 0; i < s->nheld; i++) {
        rl_held *h = &s->held[i];
        if (!h->on_lost || h->ended_told || h->lost) continue;
        if (rl_held_left_ms(h, now) > 0) {
            int64_t ends = rl_held_until_us(h) - 999;
            if (ends < *next) *next = ends;
        } else if (h->auto_extend) {
            mark_lost(s, h, "its validity ran out before the keeper could extend it");
        } else {
            char name[72], msg[200];
            snprintf(msg, sizeof msg, "redlock: lock '%s' expired: its validity ran out while it was held",
                     rl_text_excerpt(name, sizeof name, h->res, h->reslen, 64));
            rl_session_report_end(s, h, RL_EVENT_LOCK_EXPIRED, msg, "its validity ran out while it was held");
        }
    }
}

static void *keeper_main(void *arg) {
    rl_session *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->keeper_stop) {
        batch b = {0};
        int64_t next, ends = INT64_MAX;
        /* First, so a run of extends cannot hold back telling of a lock that ran out. */
        watch_validity(s, rl_now_us(), &ends);
        int n = collect(s, &b, rl_now_us(), &next);
        if (n > 0) extend_batch(s, &b);
        /* Then one shared hold, so a long run of batches does not starve them. */
        int i = s->keeper_stop ? -1 : due_shared(s, rl_now_us(), &next);
        if (i >= 0) extend_one(s, i);
        else if (n <= 0) wait_until(s, ends < next ? ends : next);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int rl_session_keeper_kick(rl_session *s) {
    if (!s->keeper_running) {
        /* The thread takes no signal meant for the host process. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        s->keeper_stop = 0;
        int rc = pthread_create(&s->keeper, NULL, keeper_main, s);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) return -1;
        s->keeper_running = 1;
    }
    pthread_cond_broadcast(&s->wake);
    return 0;
}

void rl_session_keeper_stop(rl_session *s) {
    pthread_mutex_lock(&s->mu);
    int running = s->keeper_running;
    s->keeper_stop = 1;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
    if (running) pthread_join(s->keeper, NULL);
    s->keeper_running = 0;
}
