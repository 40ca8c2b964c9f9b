/* rl_session: held locks of one owner (see rl_session.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rl_clock.h"
#include "rl_proc.h"
#include "rl_shared.h"
#include "rl_round.h"

/* The keeper's condition variable waits on CLOCK_MONOTONIC. 0 or -1. */
static int init_wake(pthread_cond_t *wake) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0) return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(wake, &ca);
    pthread_condattr_destroy(&ca);
    return rc == 0 ? 0 : -1;
}

rl_session *rl_session_new(void) {
    rl_session *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->client = rl_client_new();
    int ok = s->client && init_wake(&s->wake) == 0;
    if (!ok || pthread_mutex_init(&s->mu, NULL) != 0) {
        if (ok) pthread_cond_destroy(&s->wake);
        rl_client_free(s->client);
        free(s);
        return NULL;
    }
    s->pid = rl_proc_pid();
    return s;
}

void rl_session_check_fork(rl_session *s) {
    if (s->pid == rl_proc_pid()) return;
    s->pid = rl_proc_pid();
    pthread_mutex_init(&s->mu, NULL);
    init_wake(&s->wake);
    s->keeper_running = s->keeper_stop = 0;
    s->editing_nodes = 0;
    s->xact_taken = 0;
    for (int i = 0; i < s->nheld; i++) free(s->held[i].res);
    s->nheld = 0;
    s->taken_since_look = 0;
    rl_nameindex_drop(&s->byname);
    rl_client_forget_after_fork(s->client);
}

void rl_session_free(rl_session *s) {
    if (!s) return;
    rl_session_check_fork(s); /* a child closing its copy releases nothing of the parent's */
    rl_session_keeper_stop(s); /* first: nothing may extend what we give back */
    rl_session_xact_end(s);    /* a host that closed without ending its transaction */
    rl_session_release_all(s);
    rl_round_settle(s->client); /* late replies still act (fence write-backs), bounded */
    rl_client_free(s->client);
    rl_stats_lock_clear(&s->stats);
    free(s->held);
    rl_nameindex_free(&s->byname);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

rl_client *rl_session_client(rl_session *s) { return s->client; }

void rl_session_set_on_lost(rl_session *s, void (*fn)(void *ctx, const char *res, size_t reslen, const char *why),
                            void *ctx) {
    s->on_lost = fn;
    s->on_lost_ctx = ctx;
}

void rl_session_report_end(rl_session *s, rl_held *h, int kind, const char *msg, const char *why) {
    if (h->ended_told) return;
    h->ended_told = 1;
    /* The owner first: what it does (interrupt a statement) cannot come too soon. */
    if (h->on_lost && s->on_lost) s->on_lost(s->on_lost_ctx, h->res, h->reslen, why);
    rl_client_report(s->client, &(rl_event){.kind = kind, .res = h->res, .reslen = h->reslen, .msg = msg});
}

void rl_session_settle(rl_session *s) { rl_round_settle(s->client); }

int rl_held_extend_ended(rl_held *h, rl_status st, uint64_t op, int sent, int64_t ran_until_us) {
    int undecided = sent && st != RL_OK && st != RL_REFUSED && st != RL_MISUSE;
    if (st == RL_OK || st == RL_REFUSED || undecided) h->op = op;
    if (undecided && ran_until_us > 0 && ran_until_us < h->valid_until_us) h->valid_until_us = ran_until_us;
    return undecided;
}

int64_t rl_held_until_us(const rl_held *h) {
    if (h->inflight_until_us && h->inflight_until_us < h->valid_until_us) return h->inflight_until_us;
    return h->valid_until_us;
}

/* Whole milliseconds of validity left (0 when lost or under 1 ms). Every
 * decision and every reader uses this one measure, so a lock that
 * redlock_validity reports as 0 is never handed back or extended. */
static int64_t left_ms_at(const rl_held *h, int64_t now_us) {
    if (h->lost) return 0;
    int64_t left = (rl_held_until_us(h) - now_us) / 1000;
    return left > 0 ? left : 0;
}

static int64_t left_ms(const rl_held *h) {
    return left_ms_at(h, rl_now_us());
}

int64_t rl_held_left_ms(const rl_held *h, int64_t now_us) {
    return left_ms_at(h, now_us);
}

/* The name of held lock i, for the name index. */
static const char *held_name(const void *items, int i, size_t *len) {
    const rl_held *h = (const rl_held *)items + i;
    *len = h->reslen;
    return h->res;
}

/* Index of the held lock on res, or -1. Caller holds s->mu. */
static int find(rl_session *s, const char *res, size_t reslen) {
    return rl_nameindex_find(&s->byname, s->held, s->nheld, held_name, res, reslen);
}

int rl_session_held_index(rl_session *s, const char *res, size_t reslen) {
    return find(s, res, reslen);
}

static int same_token(const rl_held *h, const char *token, size_t toklen) {
    return toklen == RL_TOKEN_LEN && memcmp(h->token, token, toklen) == 0;
}

/* The longest hold of h's name, counted as h leaves at now_us. Caller
 * holds s->mu. */
static void count_hold(rl_session *s, const rl_held *h, int64_t now_us) {
#ifdef RL_STATS_OFF
    (void)s, (void)h, (void)now_us;
    return;
#endif
    rl_lockstat *st = rl_stats_lock_get(&s->stats, h->res, h->reslen);
    int64_t ms = (now_us - h->acquired_us) / 1000;
    if (st && ms > st->hold_max_ms) st->hold_max_ms = ms;
}

void rl_session_count_lost(rl_session *s, const rl_held *h) {
    rl_lockstat *st = rl_stats_lock_get(&s->stats, h->res, h->reslen);
    if (st) st->lost++;
}

int rl_session_lock_stats(rl_session *s, rl_lockstat **out, int64_t *untracked) {
    pthread_mutex_lock(&s->mu);
    int n = rl_stats_lock_copy(&s->stats, out);
    *untracked = s->stats.untracked;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Takes entry i off the list, the last entry moving into its place, and
 * off the name index. Caller holds s->mu. */
static void unlist(rl_session *s, int i) {
    rl_nameindex_removing(&s->byname, s->held, s->nheld, held_name, i);
    free(s->held[i].res);
    s->held[i] = s->held[--s->nheld];
    if (s->capheld > 64 && s->nheld < s->capheld / 4) {
        /* A connection that once held many locks does not keep their room. */
        rl_held *h = realloc(s->held, (size_t)(s->capheld / 2) * sizeof *h);
        if (h) s->held = h, s->capheld /= 2;
    }
}

/* Takes held lock i off the list, its hold ending at now_us. Caller holds
 * s->mu. */
static void forget_at(rl_session *s, int i, int64_t now_us) {
    count_hold(s, &s->held[i], now_us);
    unlist(s, i);
}

static void forget(rl_session *s, int i) {
    forget_at(s, i, rl_now_us());
}

/* A listed lock whose validity ended, and that nothing is about to
 * change: no extend of the keeper's on its way, no hold of the open
 * transaction (whose guard must find it lost). */
static int ended(const rl_held *h, int64_t now_us) {
    return left_ms_at(h, now_us) == 0 && h->inflight_until_us == 0 &&
           h->next_extend_us != INT64_MAX && h->xact_holds == 0;
}

typedef struct ended_entry {
    int64_t acquired_us;
    int i;
} ended_entry;

static int by_acquired(const void *a, const void *b) {
    const ended_entry *x = a, *y = b;
    if (x->acquired_us != y->acquired_us) return x->acquired_us < y->acquired_us ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static int by_index_down(const void *a, const void *b) {
    const ended_entry *x = a, *y = b;
    return x->i > y->i ? -1 : x->i < y->i;
}

/* After taken locks were listed: every RL_HELD_LOOK_EVERY of them,
 * forgets the ended locks taken first beyond RL_HELD_ENDED_MAX (see
 * rl_session.h). A list no longer than that is not looked at: a session
 * with fewer locks pays nothing. Without memory for the sort nothing is
 * forgotten now; the next lock taken tries again. Caller holds s->mu. */
static void forget_ended(rl_session *s, int taken) {
    if (s->nheld <= RL_HELD_ENDED_MAX) return;
    if (s->taken_since_look < RL_HELD_LOOK_EVERY) s->taken_since_look += taken;
    if (s->taken_since_look < RL_HELD_LOOK_EVERY) return;
    s->taken_since_look = 0;
    int64_t now = rl_now_us();
    int n = 0;
    for (int i = 0; i < s->nheld; i++) n += ended(&s->held[i], now);
    if (n <= RL_HELD_ENDED_MAX) return;
    ended_entry *e = malloc((size_t)n * sizeof *e);
    if (!e) {
        s->taken_since_look = RL_HELD_LOOK_EVERY;
        return;
    }
    int k = 0;
    for (int i = 0; i < s->nheld && k < n; i++)
        if (ended(&s->held[i], now)) e[k++] = (ended_entry){s->held[i].acquired_us, i};
    qsort(e, (size_t)k, sizeof *e, by_acquired);
    int drop = k - RL_HELD_ENDED_MAX;
    /* From the highest position down: unlist moves the last entry into the
     * hole, and the last is never one still to go. */
    qsort(e, (size_t)drop, sizeof *e, by_index_down);
    for (int j = 0; j < drop; j++) {
        rl_held *h = &s->held[e[j].i];
        if (!h->lost) rl_session_count_lost(s, h); /* not safely ours to the end, as a release of it says */
        unlist(s, e[j].i);
    }
    free(e);
}

/* When the call that gave o ended: its own reading when it made one. */
static int64_t ended_at(const rl_outcome *o) {
    return o->end_us ? o->end_us : rl_now_us();
}

/* Records a new lock taken at now_us, without starting the keeper;
 * returns 0 or -1 on OOM. Caller holds s->mu. */
static int record(rl_session *s, const char *res, size_t reslen, const char *token, int64_t ttl_ms, int64_t drift_us,
                  int64_t now_us, const rl_outcome *o, int kind, int64_t max_holders, int auto_extend) {
    if (s->nheld == s->capheld) {
        int cap = s->capheld ? s->capheld * 2 : 8;
        rl_held *h = realloc(s->held, (size_t)cap * sizeof *h);
        if (!h) return -1;
        s->held = h;
        s->capheld = cap;
    }
    rl_held *h = &s->held[s->nheld];
    memset(h, 0, sizeof *h);
    h->res = malloc(reslen + 1);
    if (!h->res) return -1;
    memcpy(h->res, res, reslen);
    h->res[reslen] = '\0';
    h->reslen = reslen;
    h->kind = kind;
    h->max_holders = max_holders;
    memcpy(h->token, token, RL_TOKEN_LEN + 1);
    h->ttl_ms = ttl_ms;
    h->drift_us = drift_us;
    h->valid_until_us = o->valid_until_us;
    h->fence = o->fence;
    h->count = 1;
    h->op = o->op;
    h->yes_nodes = o->yes;
    h->acquired_us = now_us;
    h->on_lost = s->client->set.on_lost != 0; /* settings change only on this thread */
    if (auto_extend) {
        h->auto_extend = 1;
        h->next_extend_us = now_us + RL_AUTO_EXTEND_PERIOD_US(ttl_ms);
    }
    s->nheld++;
    rl_nameindex_appended(&s->byname, s->held, s->nheld, held_name);
    return 0;
}

/* Records a new lock; returns 0 or -1 on OOM. Caller holds s->mu. */
static int remember(rl_session *s, const char *res, size_t reslen, const char *token, int64_t ttl_ms,
                    const rl_outcome *o, int kind, int64_t max_holders, int auto_extend) {
    /* settings change only on this thread */
    if (record(s, res, reslen, token, ttl_ms, rl_client_drift_us(s->client, ttl_ms), ended_at(o), o, kind, max_holders,
               auto_extend) != 0)
        return -1;
    /* The keeper also watches the validity of a lock taken with on_lost. */
    if ((auto_extend || s->held[s->nheld - 1].on_lost) && rl_session_keeper_kick(s) != 0) {
        forget(s, s->nheld - 1);
        return -1;
    }
    return 0;
}

rl_status rl_session_held_extend(rl_session *s, int kind, int64_t max_holders, const char *res, size_t reslen,
                         const char *token, size_t toklen, int64_t ttl_ms, rl_outcome *out) {
    if (kind == RL_KIND_SHARED)
        return rl_shared_extend(s->client, res, reslen, token, toklen, ttl_ms, max_holders, out);
    return rl_lock_extend(s->client, res, reslen, token, toklen, ttl_ms, out);
}

/* Takes res the way kind says (max_holders for shared). */
static rl_status take(rl_session *s, int kind, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                      int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    if (kind == RL_KIND_SHARED)
        return rl_shared_acquire(s->client, res, reslen, ttl_ms, wait_ms, max_holders, token, out);
    return rl_lock_acquire(s->client, res, reslen, ttl_ms, wait_ms, token, out);
}

static rl_status acquire_kind(rl_session *s, int kind, int xact, const char *res, size_t reslen, int64_t ttl_ms,
                              int64_t wait_ms, int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* Why no lock may start now (see refused_while_editing): what, and what to do. */
#define RL_SESSION_EDITING_MSG                                                             \
    "no lock can be %s while changes to redlock_nodes are not committed (a ROLLBACK could "  \
    "still take its nodes away): COMMIT them first (from Python: con.commit()), then %s it " \
    "in a statement of its own"

/* While a change of the node list is open (until the statement that makes
 * it ends, or the transaction it is made in) no lock may start: it could be
 * counted on nodes it was not taken on, or that a ROLLBACK takes away. 1
 * with s->mu released and out set to RL_MISUSE; else 0 with s->mu still
 * held. */
static int refused_while_editing(rl_session *s, rl_outcome *out, const char *done, const char *todo) {
    if (!s->editing_nodes) return 0;
    pthread_mutex_unlock(&s->mu);
    out->status = RL_MISUSE;
    snprintf(out->msg, sizeof out->msg, RL_SESSION_EDITING_MSG, done, todo);
    return 1;
}

static rl_status acquire_counted(rl_session *s, int kind, int xact, const char *res, size_t reslen, int64_t ttl_ms,
                                 int64_t wait_ms, int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out);

rl_status rl_session_acquire(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                             char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    return acquire_counted(s, RL_KIND_EXCLUSIVE, 0, res, reslen, ttl_ms, wait_ms, 0, token, out);
}

rl_status rl_session_acquire_xact(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms,
                                  int64_t wait_ms, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    return acquire_counted(s, RL_KIND_EXCLUSIVE, 1, res, reslen, ttl_ms, wait_ms, 0, token, out);
}

rl_status rl_session_acquire_shared(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                                    int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    return acquire_counted(s, RL_KIND_SHARED, 0, res, reslen, ttl_ms, wait_ms, max_holders, token, out);
}

/* Marks h (of the open transaction) lost, if it is not yet, because its
 * validity ran out. Caller holds s->mu. */
static void mark_ran_out(rl_session *s, rl_held *h) {
    if (h->lost) return;
    rl_session_count_lost(s, h);
    h->lost = 1;
    snprintf(h->lost_why, sizeof h->lost_why, "its validity ran out while it was held");
}

static rl_status acquire_kind(rl_session *s, int kind, int xact, const char *res, size_t reslen, int64_t ttl_ms,
                              int64_t wait_ms, int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    memset(out, 0, sizeof *out);
    token[0] = '\0';
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    if (ttl_ms < 1 || ttl_ms > RL_TTL_MAX_MS || wait_ms < 0 || wait_ms > RL_WAIT_MAX_MS || max_holders < 0 ||
        max_holders > RL_SHARED_MAX_HOLDERS)
        return take(s, kind, res, reslen, ttl_ms, wait_ms, max_holders, token, out); /* says what is wrong */
    pthread_mutex_lock(&s->mu);
    if (refused_while_editing(s, out, "taken", "take")) return RL_MISUSE;
    int i = find(s, res, reslen);
    if (i >= 0) {
        rl_held *h = &s->held[i];
        int64_t left = left_ms(h);
        if (h->kind != kind || (kind == RL_KIND_SHARED && h->max_holders != max_holders)) {
            /* Both ways at once would be a lock that excludes itself; a
             * second limit would mean two vote counts for one name. */
            int was_shared = h->kind == RL_KIND_SHARED;
            long long had = (long long)h->max_holders;
            pthread_mutex_unlock(&s->mu);
            out->status = RL_MISUSE;
            if (was_shared != (kind == RL_KIND_SHARED))
                snprintf(out->msg, sizeof out->msg,
                         "this connection holds this name %s; release it with redlock_release before taking it %s",
                         was_shared ? "shared" : "exclusively", was_shared ? "exclusively" : "shared");
            else
                snprintf(out->msg, sizeof out->msg,
                         "this connection holds this name shared with max_holders %lld; take it again with the same "
                         "max_holders, or release it first", had);
            return RL_MISUSE;
        }
        if (left > 0) {
            h->count++;
            if (xact) h->xact_holds++, s->xact_taken++;
            memcpy(token, h->token, RL_TOKEN_LEN + 1);
            out->status = RL_OK;
            out->validity_ms = left;
            out->valid_until_us = h->valid_until_us;
            out->fence = h->fence;
            out->yes = h->yes_nodes;
            pthread_mutex_unlock(&s->mu);
            return RL_OK;
        }
        if (h->xact_holds > 0) {
            /* The transaction's writes were made under this lock: taken anew,
             * it would let a COMMIT through that the lost one no longer covers. */
            mark_ran_out(s, h);
            char why[sizeof h->lost_why];
            memcpy(why, h->lost_why, sizeof why);
            pthread_mutex_unlock(&s->mu);
            out->status = RL_MISUSE;
            snprintf(out->msg, sizeof out->msg,
                     "the open transaction holds this name (redlock_acquire_xact) and its lock "
                     "was lost (%s): the transaction cannot commit; ROLLBACK and start again",
                     why);
            return RL_MISUSE;
        }
        /* Expired or lost: taken anew below. Its holds are not forgotten: they
         * stay counted, as lost ones, so each of their releases says "lost".
         * Its key may outlive its validity by the drift allowance, and would
         * refuse the new attempt: it goes first, where it still holds the
         * old token (nowhere, when the lock went to someone else). */
        char stale[RL_TOKEN_LEN + 1];
        memcpy(stale, h->token, sizeof stale);
        /* Lost from now on, so that an extend of the keeper's still on its
         * way cannot make it valid again once its key is gone. */
        mark_ran_out(s, h);
        pthread_mutex_unlock(&s->mu);
        rl_outcome gone;
        rl_lock_release(s->client, res, reslen, stale, RL_TOKEN_LEN, &gone);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    int auto_extend = s->client->set.auto_extend != 0; /* settings change only on this thread */
    rl_status st = take(s, kind, res, reslen, ttl_ms, wait_ms, max_holders, token, out);
    if (st == RL_OK) {
        pthread_mutex_lock(&s->mu);
        int old = find(s, res, reslen);
        int rc = remember(s, res, reslen, token, ttl_ms, out, kind, max_holders, auto_extend);
        if (rc == 0) {
            rl_held *h = &s->held[s->nheld - 1];
            if (xact) h->xact_holds = 1, s->xact_taken++;
            if (old >= 0) {
                h->lost_holds = s->held[old].count;
                h->count += h->lost_holds;
                forget(s, old);
            }
        }
        if (rc == 0) forget_ended(s, 1);
        pthread_mutex_unlock(&s->mu);
        if (rc != 0) {
            rl_outcome tmp;
            rl_lock_release(s->client, res, reslen, token, RL_TOKEN_LEN, &tmp);
            token[0] = '\0';
            out->status = RL_NOMEM;
            snprintf(out->msg, sizeof out->msg, "out of memory (or no thread for auto-extension); the lock was given back");
            return RL_NOMEM;
        }
    }
    return st;
}

/* acquire_kind, counted in the per-name statistics. */
static rl_status acquire_counted(rl_session *s, int kind, int xact, const char *res, size_t reslen, int64_t ttl_ms,
                                 int64_t wait_ms, int64_t max_holders, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    int64_t start = rl_now_us();
    rl_status st = acquire_kind(s, kind, xact, res, reslen, ttl_ms, wait_ms, max_holders, token, out);
#ifdef RL_STATS_OFF
    (void)start;
    return st;
#endif
    if (st != RL_OK && st != RL_REFUSED) return st; /* misuse, errors: nothing waited for a holder */
    int64_t waited = (ended_at(out) - start) / 1000;
    pthread_mutex_lock(&s->mu);
    rl_lockstat *ls = rl_stats_lock_get(&s->stats, res, reslen);
    if (ls) {
        if (st == RL_OK) ls->acquisitions++;
        else ls->refusals++;
        ls->wait_total_ms += waited;
        if (waited > ls->wait_max_ms) ls->wait_max_ms = waited;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* Gives back one hold of held lock i that is not its last live one (s->mu
 * held; released before returning): RL_OK when the lock is still valid for
 * the holds left, RL_REFUSED when the hold belonged to a lock that was lost.
 * Returns -1 (nothing done, s->mu still held) when this hold is the last
 * live hold of a valid lock and the lock itself must be released. */
static int give_back_hold(rl_session *s, int i, rl_outcome *out) {
    rl_held *h = &s->held[i];
    int64_t live = h->count - h->lost_holds;
    if (live > 1 && left_ms(h) > 0) {
        h->count--;
        out->status = RL_OK;
        pthread_mutex_unlock(&s->mu);
        return RL_OK;
    }
    if (live > 0) return -1;
    /* Only holds of a lock that was lost (and given back) are left. */
    h->count--;
    h->lost_holds--;
    if (h->count == 0) forget(s, i);
    pthread_mutex_unlock(&s->mu);
    out->status = RL_REFUSED;
    snprintf(out->msg, sizeof out->msg, "the lock had been lost before it was released");
    return RL_REFUSED;
}

/* The message of a refusal to let go of a lock the open transaction holds. */
static rl_status refuse_xact(rl_outcome *out, const char *what) {
    out->status = RL_MISUSE;
    snprintf(out->msg, sizeof out->msg,
             "the open transaction holds this lock (redlock_acquire_xact): it is released "
             "right after COMMIT or ROLLBACK and cannot be %s before",
             what);
    return RL_MISUSE;
}

/* Gives back one of the session's own holds of held lock i, which the
 * open transaction holds too, so the lock itself stays (s->mu held;
 * released before returning): RL_OK, RL_REFUSED when that hold's lock
 * was lost, RL_MISUSE when the session has no hold of its own. */
static rl_status give_back_beside_xact(rl_session *s, int i, rl_outcome *out) {
    rl_held *h = &s->held[i];
    int64_t own = h->count - h->lost_holds - h->xact_holds;
    int lost;
    if (own > 0) { /* a hold of the lock the transaction holds too */
        h->count--;
        lost = left_ms(h) == 0;
    } else if (h->lost_holds > 0) { /* a hold of a lock lost before */
        h->count--;
        h->lost_holds--;
        lost = 1;
    } else {
        pthread_mutex_unlock(&s->mu);
        return refuse_xact(out, "released");
    }
    pthread_mutex_unlock(&s->mu);
    out->status = lost ? RL_REFUSED : RL_OK;
    if (lost) snprintf(out->msg, sizeof out->msg, "the lock had been lost before it was released");
    return out->status;
}

rl_status rl_session_release(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                             int *not_held, rl_outcome *out) {
    char mine[RL_TOKEN_LEN + 1];
    int was_lost = 0;
    memset(out, 0, sizeof *out);
    *not_held = 0;
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&s->mu);
    int i = find(s, res, reslen);
    if (!token) {
        if (i < 0) {
            pthread_mutex_unlock(&s->mu);
            *not_held = 1;
            out->status = RL_MISUSE;
            return RL_MISUSE;
        }
        if (s->held[i].xact_holds > 0) return give_back_beside_xact(s, i, out);
        int done = give_back_hold(s, i, out);
        if (done >= 0) return (rl_status)done;
        memcpy(mine, s->held[i].token, sizeof mine);
        token = mine;
        toklen = RL_TOKEN_LEN;
        rl_held *h = &s->held[i];
        if (h->count > 1) {
            /* The lock goes now, but outer holds are left: they stay listed, as
             * lost, so their own releases say so instead of "holds none". */
            was_lost = left_ms(h) == 0;
            h->count--;
            h->lost_holds = h->count;
            if (!h->lost) {
                h->lost = 1;
                snprintf(h->lost_why, sizeof h->lost_why, "%s",
                         was_lost ? "its validity ran out while it was held"
                                  : "an inner hold released the lock taken anew after the outer hold's had expired");
            }
            i = -1; /* kept */
        }
    }
    if (i >= 0 && same_token(&s->held[i], token, toklen) && s->held[i].xact_holds > 0) {
        pthread_mutex_unlock(&s->mu);
        return refuse_xact(out, "released");
    }
    if (i >= 0 && same_token(&s->held[i], token, toklen)) {
        /* Gone from this session before the network call: the keeper stops extending it now.
         * Expired counts as lost: it was not safely ours to the end. */
        int64_t now = rl_now_us();
        was_lost = left_ms_at(&s->held[i], now) == 0;
        if (was_lost && !s->held[i].lost) rl_session_count_lost(s, &s->held[i]);
        forget_at(s, i, now);
    }
    pthread_mutex_unlock(&s->mu);
    rl_status st = rl_lock_release(s->client, res, reslen, token, toklen, out);
    if (was_lost && st != RL_MISUSE && st != RL_NOMEM) {
        /* Known lost before this call: not ours, whatever the delete (only a
         * cleanup now) found or whether the nodes answered. */
        out->status = st = RL_REFUSED;
        snprintf(out->msg, sizeof out->msg, "the lock had been lost before it was released");
    }
    return st;
}

rl_status rl_session_extend(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                            int64_t ttl_ms, int *not_held, rl_outcome *out) {
    char mine[RL_TOKEN_LEN + 1];
    memset(out, 0, sizeof *out);
    *not_held = 0;
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&s->mu);
    int i = find(s, res, reslen);
    if (!token && i < 0) {
        pthread_mutex_unlock(&s->mu);
        *not_held = 1;
        out->status = RL_MISUSE;
        return RL_MISUSE;
    }
    int ours = i >= 0 && (!token || same_token(&s->held[i], token, toklen));
    if (!token) {
        memcpy(mine, s->held[i].token, sizeof mine);
        token = mine;
        toklen = RL_TOKEN_LEN;
    }
    if (ours && left_ms(&s->held[i]) == 0) {
        /* Our validity has ended: someone else may hold it by now. Never bring it back;
         * delete what may be left of it. */
        rl_held *h = &s->held[i];
        if (!h->lost) rl_session_count_lost(s, h);
        char name[72], msg[200];
        snprintf(msg, sizeof msg, "redlock: lock '%s' %s before redlock_extend was called",
                 rl_text_excerpt(name, sizeof name, h->res, h->reslen, 64), h->lost ? "was lost" : "had expired");
        rl_session_report_end(s, h, h->lost ? RL_EVENT_LOCK_LOST : RL_EVENT_LOCK_EXPIRED, msg,
                              h->lost ? h->lost_why : "its validity ran out while it was held");
        if (h->xact_holds > 0) {
            /* Listed, as lost, until the transaction ends: its COMMIT guard must find it. */
            if (!h->lost) snprintf(h->lost_why, sizeof h->lost_why, "its validity ran out while it was held");
            h->lost = 1;
        } else {
            forget(s, i);
        }
        pthread_mutex_unlock(&s->mu);
        rl_lock_release(s->client, res, reslen, token, toklen, out);
        memset(out, 0, sizeof *out);
        out->status = RL_REFUSED;
        snprintf(out->msg, sizeof out->msg, "the lock had expired or was lost before it was extended");
        return RL_REFUSED;
    }
    int kind = ours ? s->held[i].kind : RL_KIND_EXCLUSIVE;
    int64_t max_holders = ours ? s->held[i].max_holders : 0;
    pthread_mutex_unlock(&s->mu);
    /* Once this extend has run the key lives at least this long: all that
     * is sure when its answers do not come (it may have run anyway). */
    int64_t ran_until = rl_now_us() + ttl_ms * 1000 - rl_client_drift_us(s->client, ttl_ms);
    rl_status st = rl_session_held_extend(s, kind, max_holders, res, reslen, token, toklen, ttl_ms, out);
    pthread_mutex_lock(&s->mu);
    i = find(s, res, reslen);
    /* Only the later of two extends (this one and the keeper's) decides:
     * its PEXPIRE ran last on the nodes, whichever of them gets here last. */
    if (i >= 0 && same_token(&s->held[i], token, toklen) && out->op > s->held[i].op) {
        rl_held *h = &s->held[i];
        int undecided = rl_held_extend_ended(h, st, out->op, out->sent, ran_until);
        /* A lock the keeper watches gets a new deadline (maybe a sooner one). */
        if (h->on_lost) pthread_cond_broadcast(&s->wake);
        if (st == RL_OK) {
            h->valid_until_us = out->valid_until_us;
            h->ttl_ms = ttl_ms;
            h->drift_us = rl_client_drift_us(s->client, ttl_ms);
            h->extensions++;
            if (h->auto_extend) h->next_extend_us = rl_now_us() + RL_AUTO_EXTEND_PERIOD_US(ttl_ms);
        } else if (st == RL_REFUSED) {
            char name[72], msg[RL_ERR_REASON_MAX + 120];
            snprintf(msg, sizeof msg, "redlock: lock '%s' lost: redlock_extend found it gone: %.250s",
                     rl_text_excerpt(name, sizeof name, h->res, h->reslen, 64), out->msg);
            rl_session_report_end(s, h, RL_EVENT_LOCK_LOST, msg, out->msg);
            if (h->xact_holds > 0) {
                /* Listed, as lost, until the transaction ends: its COMMIT guard must find it. */
                if (!h->lost) rl_session_count_lost(s, h);
                h->lost = 1;
                snprintf(h->lost_why, sizeof h->lost_why, "redlock_extend found it gone: %.200s", out->msg);
            } else {
                forget(s, i);
            }
        } else if (undecided) {
            /* The keeper extends it again before the cap, with its own TTL,
             * rather than at its usual time (unless its extend is on its
             * way: INT64_MAX, and its result reschedules). */
            int64_t now = rl_now_us(), soon = now + (ran_until - now) / 3;
            if (h->auto_extend && h->next_extend_us != INT64_MAX && h->next_extend_us > soon) {
                h->next_extend_us = soon;
                pthread_cond_broadcast(&s->wake);
            }
        }
    }
    i = find(s, res, reslen);
    if (st == RL_OK && i >= 0 && same_token(&s->held[i], token, toklen) && rl_held_until_us(&s->held[i]) < out->valid_until_us) {
        /* The keeper's extend, booked after this one with the TTL from
         * before, left the lock a shorter validity here: say only what is
         * booked, which the keeper keeps renewing. */
        out->valid_until_us = rl_held_until_us(&s->held[i]);
        int64_t left = (out->valid_until_us - rl_now_us()) / 1000;
        out->validity_ms = left > 0 ? left : 0;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

rl_status rl_session_detach(rl_session *s, const char *res, size_t reslen, char token[RL_TOKEN_LEN + 1],
                            int *not_held, rl_outcome *out) {
    memset(out, 0, sizeof *out);
    *not_held = 0;
    token[0] = '\0';
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&s->mu);
    int i;
    /* An extend of the keeper's on its way would set the old TTL again
     * after the token is handed on, cutting back a longer extend made with
     * it meanwhile: wait for it (one round, bounded by timeout_ms). */
    while ((i = find(s, res, reslen)) >= 0 && s->held[i].inflight_until_us != 0) pthread_cond_wait(&s->wake, &s->mu);
    if (i < 0) {
        pthread_mutex_unlock(&s->mu);
        *not_held = 1;
        out->status = RL_MISUSE;
        return RL_MISUSE;
    }
    if (s->held[i].xact_holds > 0) {
        pthread_mutex_unlock(&s->mu);
        return refuse_xact(out, "detached");
    }
    /* Every hold goes with it: from now on the lock is the token's, not this
     * session's. Forgotten before anything else, so the keeper lets go of it
     * at once. */
    char mine[RL_TOKEN_LEN + 1];
    memcpy(mine, s->held[i].token, sizeof mine);
    int64_t left = left_ms(&s->held[i]);
    out->validity_ms = left;
    out->valid_until_us = rl_held_until_us(&s->held[i]);
    forget(s, i);
    pthread_mutex_unlock(&s->mu);
    if (left == 0) {
        /* Handing on a token whose validity this session saw end would let a
         * later step work on a lock someone else may hold: clean up instead. */
        rl_lock_release(s->client, res, reslen, mine, RL_TOKEN_LEN, out);
        memset(out, 0, sizeof *out);
        out->status = RL_REFUSED;
        snprintf(out->msg, sizeof out->msg, "the lock had expired or was lost before it was detached");
        return RL_REFUSED;
    }
    memcpy(token, mine, sizeof mine);
    out->status = RL_OK;
    return RL_OK;
}

rl_status rl_session_adopt(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                           rl_outcome *out) {
    memset(out, 0, sizeof *out);
    if (rl_lock_check_resource(s->client, res, reslen, out) != RL_OK) return out->status;
    if (toklen != RL_TOKEN_LEN) {
        out->status = RL_MISUSE;
        snprintf(out->msg, sizeof out->msg, "token must be the %d-character text redlock_detach or redlock_acquire "
                                            "returned", RL_TOKEN_LEN);
        return RL_MISUSE;
    }
    pthread_mutex_lock(&s->mu);
    if (refused_while_editing(s, out, "adopted", "adopt")) return RL_MISUSE;
    int i = find(s, res, reslen);
    if (i >= 0) {
        rl_held *h = &s->held[i];
        int same = same_token(h, token, toklen);
        int64_t left = left_ms(h);
        pthread_mutex_unlock(&s->mu);
        if (!same) {
            out->status = RL_MISUSE;
            snprintf(out->msg, sizeof out->msg, "this connection already holds this resource with another token; "
                                                "release it (or detach it) before adopting one");
            return RL_MISUSE;
        }
        /* Already ours here: nothing to take over, no hold added. */
        if (left == 0) {
            out->status = RL_REFUSED;
            snprintf(out->msg, sizeof out->msg, "the lock had expired or was lost");
            return RL_REFUSED;
        }
        out->status = RL_OK;
        out->validity_ms = left;
        return RL_OK;
    }
    pthread_mutex_unlock(&s->mu);
    int auto_extend = s->client->set.auto_extend != 0; /* settings change only on this thread */
    int64_t ttl_left, shared_k;
    rl_status st = rl_lock_check(s->client, res, reslen, token, toklen, 0, &ttl_left, &shared_k, out);
    /* A holder of a limited shared lock counts only on its limit's quorum,
     * which may be more than a majority: look again with that many. */
    int limit_quorum = st == RL_OK && shared_k > 0 ? rl_shared_client_quorum(s->client, shared_k) : 0;
    if (limit_quorum > out->quorum)
        st = rl_lock_check(s->client, res, reslen, token, toklen, limit_quorum, &ttl_left, &shared_k, out);
    if (st != RL_OK) return st;
    char tok[RL_TOKEN_LEN + 1];
    memcpy(tok, token, RL_TOKEN_LEN);
    tok[RL_TOKEN_LEN] = '\0';
    /* Its TTL here is what the nodes had left: extensions (the keeper's
     * too) never make it live longer than that until redlock_extend sets
     * another. Its fencing number is not known: the counter on the nodes
     * cannot tell this lock's number from another acquisition's. */
    out->fence = 0;
    pthread_mutex_lock(&s->mu);
    /* A shared holder is adopted as one: extended with its limit's votes. */
    int rc = remember(s, res, reslen, tok, ttl_left, out, shared_k >= 0 ? RL_KIND_SHARED : RL_KIND_EXCLUSIVE,
                      shared_k >= 0 ? shared_k : 0, auto_extend);
    if (rc == 0) forget_ended(s, 1);
    pthread_mutex_unlock(&s->mu);
    if (rc != 0) {
        /* Not ours to delete: it stays the token's, with its TTL. */
        out->status = RL_NOMEM;
        snprintf(out->msg, sizeof out->msg, "out of memory (or no thread for auto-extension); the lock was not adopted");
        return RL_NOMEM;
    }
    return RL_OK;
}

/* Gives back the m locks of batch (their entries already out of the list):
 * one script per node for all of them (rl_many_release, which takes shared
 * holds out too), so closing a connection with many locks costs a round,
 * not a round per lock; one by one when there is no memory for that. */
static void release_batch(rl_session *s, const rl_held *batch, int m) {
    const char **names = malloc((size_t)m * sizeof *names), **toks = malloc((size_t)m * sizeof *toks);
    size_t *lens = malloc((size_t)m * sizeof *lens), *toklens = malloc((size_t)m * sizeof *toklens);
    unsigned char *flags = malloc((size_t)m);
    rl_outcome o;
    rl_status st = RL_NOMEM;
    if (m > 1 && names && toks && lens && toklens && flags) {
        for (int k = 0; k < m; k++) {
            names[k] = batch[k].res;
            lens[k] = batch[k].reslen;
            toks[k] = batch[k].token;
            toklens[k] = RL_TOKEN_LEN;
        }
        st = rl_many_release(s->client, m, names, lens, toks, toklens, 0, flags, &o);
    }
    if (st == RL_NOMEM)
        for (int k = 0; k < m; k++) rl_lock_release(s->client, batch[k].res, batch[k].reslen, batch[k].token, RL_TOKEN_LEN, &o);
    free(names);
    free(toks);
    free(lens);
    free(toklens);
    free(flags);
}

/* The most locks given back in one script per node (the script takes
 * 1,000 keys to a command), and the most bytes of their names: a node
 * answers one command within its timeout, and the command is copied to
 * every node's connection. A longer name goes alone. */
#define RL_RELEASE_ALL_BATCH 1000
#define RL_RELEASE_ALL_BATCH_BYTES (256 * 1024)

int rl_session_release_all(rl_session *s) {
    int n = 0;
    pthread_mutex_lock(&s->mu);
    /* The open transaction's locks stay with its holds; the session's own
     * holds of them (and of a lock lost before) are given back. */
    int keep = 0;
    for (int i = 0; i < s->nheld; i++) {
        rl_held *h = &s->held[i];
        if (h->xact_holds == 0) continue;
        keep++;
        if (h->count > h->xact_holds) {
            h->count = h->xact_holds;
            h->lost_holds = 0;
            n++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int cap = s->nheld - keep < RL_RELEASE_ALL_BATCH ? s->nheld - keep : RL_RELEASE_ALL_BATCH;
        if (cap <= 0) {
            pthread_mutex_unlock(&s->mu);
            return n;
        }
        rl_held one, *batch = cap > 1 ? malloc((size_t)cap * sizeof *batch) : NULL;
        if (!batch) {
            batch = &one;
            cap = 1;
        }
        int m = 0;
        size_t bytes = 0;
        int64_t now = rl_now_us();
        /* From the top down: the entry moved into a freed place comes from
         * above it, so it was looked at already. */
        for (int i = s->nheld - 1; i >= 0 && m < cap; i--) {
            rl_held *h = &s->held[i];
            if (h->xact_holds > 0) continue;
            if (m > 0 && bytes + h->reslen > RL_RELEASE_ALL_BATCH_BYTES) break;
            bytes += h->reslen;
            batch[m++] = *h;
            count_hold(s, h, now);
            rl_nameindex_removing(&s->byname, s->held, s->nheld, held_name, i);
            s->held[i] = s->held[--s->nheld];
        }
        pthread_mutex_unlock(&s->mu);
        release_batch(s, batch, m);
        for (int k = 0; k < m; k++) free(batch[k].res);
        if (batch != &one) free(batch);
        n += m;
    }
}

int rl_session_xact_open(rl_session *s) {
    pthread_mutex_lock(&s->mu);
    int open = s->xact_taken > 0;
    pthread_mutex_unlock(&s->mu);
    return open;
}

int rl_session_xact_check(rl_session *s, int64_t margin_ms, char *why, size_t whylen) {
    int rc = 0;
    int64_t sum = 0;
    pthread_mutex_lock(&s->mu);
    int64_t now = rl_now_us(); /* one reading for every lock */
    for (int i = 0; i < s->nheld && rc == 0; i++) {
        const rl_held *h = &s->held[i];
        if (h->xact_holds == 0) continue;
        sum += h->xact_holds;
        int64_t left = left_ms_at(h, now);
        if (!h->lost && left > 0 && left >= margin_ms) continue;
        char name[72];
        rl_text_excerpt(name, sizeof name, h->res, h->reslen, 64);
        if (h->lost)
            snprintf(why, whylen, "the lock '%s' was lost: %s", name, h->lost_why);
        else if (left == 0)
            snprintf(why, whylen, "the lock '%s' has no validity left (its TTL of %lld ms ran out)",
                     name, (long long)h->ttl_ms);
        else
            snprintf(why, whylen,
                     "the lock '%s' has %lld ms of validity left, less than xact_margin_ms "
                     "(%lld): COMMIT might end after it",
                     name, (long long)left, (long long)margin_ms);
        rc = -1;
    }
    if (rc == 0 && sum != s->xact_taken) {
        /* Every path that drops an entry keeps the transaction's: one gone
         * all the same is treated as lost. */
        snprintf(why, whylen,
                 "a lock taken with redlock_acquire_xact in this transaction is no longer held");
        rc = -1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int rl_session_xact_end(rl_session *s) {
    int n = 0;
    pthread_mutex_lock(&s->mu);
    s->xact_taken = 0;
    for (;;) {
        int i = 0;
        while (i < s->nheld && s->held[i].xact_holds == 0) i++;
        if (i == s->nheld) break;
        rl_held *h = &s->held[i];
        int64_t own = h->count - h->lost_holds - h->xact_holds;
        h->count -= h->xact_holds;
        h->xact_holds = 0;
        if (own > 0) continue; /* the session's own holds keep it */
        /* The transaction's were its last live holds: the lock goes (as a
         * release counts it, lost when its validity had ended). */
        if (!h->lost && left_ms(h) == 0) rl_session_count_lost(s, h);
        char token[RL_TOKEN_LEN + 1];
        memcpy(token, h->token, sizeof token);
        size_t reslen = h->reslen;
        char *res;
        if (h->lost_holds > 0) {
            /* Holds of a lock lost before stay listed, as lost, as after a release. */
            res = malloc(reslen + 1);
            if (res) memcpy(res, h->res, reslen + 1);
            if (!h->lost) {
                h->lost = 1;
                snprintf(h->lost_why, sizeof h->lost_why,
                         "the transaction that took it anew ended after the outer hold's lock "
                         "had expired");
            }
        } else {
            res = h->res; /* taken over from the entry, freed below */
            count_hold(s, h, rl_now_us());
            rl_nameindex_removing(&s->byname, s->held, s->nheld, held_name, i);
            s->held[i] = s->held[--s->nheld];
        }
        pthread_mutex_unlock(&s->mu);
        rl_outcome o;
        if (res) rl_lock_release(s->client, res, reslen, token, RL_TOKEN_LEN, &o);
        free(res);
        n++;
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

int64_t rl_session_validity(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen) {
    int64_t left = 0;
    pthread_mutex_lock(&s->mu);
    int i = find(s, res, reslen);
    if (i >= 0 && (!token || same_token(&s->held[i], token, toklen))) left = left_ms(&s->held[i]);
    pthread_mutex_unlock(&s->mu);
    return left;
}

int rl_session_find(rl_session *s, const char *res, size_t reslen, rl_held *out) {
    pthread_mutex_lock(&s->mu);
    int i = find(s, res, reslen);
    if (i >= 0) {
        *out = s->held[i];
        out->res = NULL;
        out->validity_ms = left_ms(&s->held[i]);
    }
    pthread_mutex_unlock(&s->mu);
    return i >= 0 ? 0 : -1;
}

int rl_session_holds_any(rl_session *s) {
    pthread_mutex_lock(&s->mu);
    int any = s->nheld > 0;
    pthread_mutex_unlock(&s->mu);
    return any;
}

int rl_session_nodes_begin(rl_session *s, rl_error *err) {
    pthread_mutex_lock(&s->mu);
    int n = s->nheld;
    if (n == 0) s->editing_nodes = 1;
    pthread_mutex_unlock(&s->mu);
    if (n > 0)
        rl_error_set(err, RL_ERR_STATE,
                 "the nodes cannot change while this connection holds %d lock%s (even lost or expired ones: they were "
                 "taken on the nodes listed now); release them first, e.g. SELECT redlock_release_all()",
                 n, n == 1 ? "" : "s");
    return n > 0 ? -1 : 0;
}

void rl_session_nodes_done(rl_session *s) {
    pthread_mutex_lock(&s->mu);
    s->editing_nodes = 0;
    pthread_mutex_unlock(&s->mu);
}

int rl_session_nodes_open(rl_session *s) {
    pthread_mutex_lock(&s->mu);
    int open = s->editing_nodes;
    pthread_mutex_unlock(&s->mu);
    return open;
}

int rl_session_snapshot(rl_session *s, rl_held **out) {
    pthread_mutex_lock(&s->mu);
    int n = s->nheld;
    rl_held *rows = calloc(n > 0 ? (size_t)n : 1, sizeof *rows);
    for (int i = 0; rows && i < n; i++) {
        rows[i] = s->held[i];
        rows[i].valid_until_us = rl_held_until_us(&s->held[i]);
        rows[i].validity_ms = left_ms(&s->held[i]);
        /* The row is about the lock taken last; holds of an earlier, lost lock
         * on the name show only once they are all that is left. */
        if (rows[i].count > rows[i].lost_holds) rows[i].count -= rows[i].lost_holds;
        rows[i].res = malloc(s->held[i].reslen + 1);
        if (!rows[i].res) {
            rl_session_snapshot_free(rows, i);
            rows = NULL;
            break;
        }
        memcpy(rows[i].res, s->held[i].res, s->held[i].reslen + 1);
    }
    pthread_mutex_unlock(&s->mu);
    *out = rows;
    return rows ? n : -1;
}

void rl_session_snapshot_free(rl_held *rows, int n) {
    for (int i = 0; rows && i < n; i++) free(rows[i].res);
    free(rows);
}

rl_status rl_session_acquire_many(rl_session *s, int n, const char *const *res, const size_t *lens, int64_t ttl_ms,
                                  int64_t wait_ms, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    memset(out, 0, sizeof *out);
    token[0] = '\0';
    if (rl_many_check(s->client, n, res, lens, 1, out) != RL_OK) return out->status;
    long long *fences = calloc((size_t)n, sizeof *fences);
    if (!fences) {
        out->status = RL_NOMEM;
        snprintf(out->msg, sizeof out->msg, "out of memory");
        return RL_NOMEM;
    }
    if (ttl_ms < 1 || ttl_ms > RL_TTL_MAX_MS || wait_ms < 0 || wait_ms > RL_WAIT_MAX_MS) {
        rl_status st = rl_many_acquire(s->client, n, res, lens, ttl_ms, wait_ms, token, fences, out); /* says what is wrong */
        free(fences);
        return st;
    }
    pthread_mutex_lock(&s->mu);
    if (s->editing_nodes) {
        pthread_mutex_unlock(&s->mu);
        free(fences);
        out->status = RL_MISUSE;
        snprintf(out->msg, sizeof out->msg, RL_SESSION_EDITING_MSG, "taken", "take");
        return RL_MISUSE;
    }
    /* Not re-entrant: a set is taken whole on the nodes or not at all, and a
     * name held here already (or listed as expired or lost) would be part
     * of the set without being taken with it. */
    for (int j = 0; j < n; j++) {
        if (find(s, res[j], lens[j]) < 0) continue;
        pthread_mutex_unlock(&s->mu);
        free(fences);
        out->status = RL_MISUSE;
        snprintf(out->msg, sizeof out->msg,
                 "'%s' (name %d of the list) is already listed in redlock_locks of this connection; a set of names "
                 "is taken all at once or not at all, so release that name first or leave it out of the list",
                 rl_text_excerpt((char[72]){0}, 72, res[j], lens[j], 64), j + 1);
        return RL_MISUSE;
    }
    pthread_mutex_unlock(&s->mu);
    int auto_extend = s->client->set.auto_extend != 0; /* settings change only on this thread */
    rl_status st = rl_many_acquire(s->client, n, res, lens, ttl_ms, wait_ms, token, fences, out);
    if (st == RL_OK) {
        pthread_mutex_lock(&s->mu);
        /* One clock reading and one start of the keeper for the whole set. */
        int64_t now = rl_now_us(), drift = rl_client_drift_us(s->client, ttl_ms);
        int done = 0;
        for (; done < n; done++) {
            rl_outcome o = *out;
            o.fence = fences[done];
            if (record(s, res[done], lens[done], token, ttl_ms, drift, now, &o, RL_KIND_EXCLUSIVE, 0, auto_extend) != 0)
                break;
        }
        int watched = done > 0 && s->held[s->nheld - 1].on_lost;
        int failed = done < n || ((auto_extend || watched) && rl_session_keeper_kick(s) != 0);
        if (failed)
            while (done-- > 0) forget(s, s->nheld - 1);
        else
            forget_ended(s, n);
        pthread_mutex_unlock(&s->mu);
        if (failed) {
            const char **toks = malloc((size_t)n * sizeof *toks);
            size_t *toklens = malloc((size_t)n * sizeof *toklens);
            unsigned char *rel = malloc((size_t)n);
            rl_outcome tmp;
            for (int j = 0; toks && toklens && j < n; j++) toks[j] = token, toklens[j] = RL_TOKEN_LEN;
            if (toks && toklens && rel) rl_many_release(s->client, n, res, lens, toks, toklens, 1, rel, &tmp);
            free(toks);
            free(toklens);
            free(rel);
            token[0] = '\0';
            out->status = st = RL_NOMEM;
            snprintf(out->msg, sizeof out->msg, "out of memory (or no thread for auto-extension); the locks were given back");
        }
    }
    free(fences);
    return st;
}

rl_status rl_session_release_many(rl_session *s, int n, const char *const *res, const size_t *lens, const char *token,
                                  size_t toklen, int *released, int *none_held, rl_outcome *out) {
    memset(out, 0, sizeof *out);
    *released = 0;
    *none_held = 0;
    if (rl_many_check(s->client, n, res, lens, 0, out) != RL_OK) return out->status;
    if (token && (toklen == 0 || toklen > 1024)) {
        out->status = RL_MISUSE;
        snprintf(out->msg, sizeof out->msg, "token must be a non-empty text returned by redlock_acquire");
        return RL_MISUSE;
    }
    /* The names whose keys are deleted on the nodes: which, with what token,
     * and whether this session knew them lost already. */
    const char **names = malloc((size_t)n * sizeof *names);
    size_t *namelens = malloc((size_t)n * sizeof *namelens);
    const char **toks = malloc((size_t)n * sizeof *toks);
    size_t *toklens = malloc((size_t)n * sizeof *toklens);
    char (*mine)[RL_TOKEN_LEN + 1] = malloc((size_t)n * sizeof *mine);
    unsigned char *was_lost = malloc((size_t)n), *flags = malloc((size_t)n);
    rl_status st = RL_OK;
    if (!names || !namelens || !toks || !toklens || !mine || !was_lost || !flags) {
        out->status = st = RL_NOMEM;
        snprintf(out->msg, sizeof out->msg, "out of memory");
        goto out;
    }
    int m = 0, held_any = 0;
    pthread_mutex_lock(&s->mu);
    for (int j = 0; j < n; j++) {
        int i = find(s, res[j], lens[j]);
        if (i < 0 || s->held[i].xact_holds == 0) continue;
        pthread_mutex_unlock(&s->mu);
        st = refuse_xact(out, "released");
        size_t k = strlen(out->msg);
        snprintf(out->msg + k, sizeof out->msg - k, " ('%s', name %d of the list)",
                 rl_text_excerpt((char[72]){0}, 72, res[j], lens[j], 64), j + 1);
        goto out;
    }
    /* Entries to forget are only marked in the loop (each name is in the
     * list once, so each entry is met once) and removed after it, so the
     * positions stay valid. */
    unsigned char *gone = calloc(s->nheld > 0 ? (size_t)s->nheld : 1, 1);
    if (!gone) {
        pthread_mutex_unlock(&s->mu);
        out->status = st = RL_NOMEM;
        snprintf(out->msg, sizeof out->msg, "out of memory");
        goto out;
    }
    int64_t now = rl_now_us(); /* one reading for the whole list */
    for (int j = 0; j < n; j++) {
        int i = find(s, res[j], lens[j]);
        int lost = 0;
        if (!token) {
            /* As rl_session_release without a token, name by name. */
            if (i < 0) continue;
            held_any = 1;
            rl_held *h = &s->held[i];
            int64_t live = h->count - h->lost_holds;
            if (live > 1 && left_ms_at(h, now) > 0) {
                h->count--;
                (*released)++;
                continue;
            }
            if (live <= 0) { /* only holds of a lock lost before: 0 */
                h->count--;
                h->lost_holds--;
                if (h->count == 0) gone[i] = 1;
                continue;
            }
            memcpy(mine[m], h->token, RL_TOKEN_LEN + 1);
            toks[m] = mine[m];
            toklens[m] = RL_TOKEN_LEN;
            lost = left_ms_at(h, now) == 0;
            if (h->count > 1) {
                h->count--;
                h->lost_holds = h->count;
                if (!h->lost) {
                    h->lost = 1;
                    snprintf(h->lost_why, sizeof h->lost_why, "%s",
                             lost ? "its validity ran out while it was held"
                                  : "an inner hold released the lock taken anew after the outer hold's had expired");
                }
            } else {
                gone[i] = 1;
            }
        } else {
            if (i >= 0 && same_token(&s->held[i], token, toklen)) {
                lost = left_ms_at(&s->held[i], now) == 0;
                gone[i] = 1;
            }
            toks[m] = token;
            toklens[m] = toklen;
        }
        names[m] = res[j];
        namelens[m] = lens[j];
        was_lost[m++] = (unsigned char)lost;
    }
    /* Gone from this session before the network call, as for one lock: the
     * keeper stops extending them now. From the top down, as unlist moves
     * the last entry into the place it frees: every entry above i is a kept
     * one by then. (No hold is counted: names released as a set are not
     * counted per name.) */
    for (int i = s->nheld - 1; i >= 0; i--)
        if (gone[i]) unlist(s, i);
    pthread_mutex_unlock(&s->mu);
    free(gone);
    if (!token && !held_any) {
        *none_held = 1;
        goto out;
    }
    if (m > 0) {
        st = rl_many_release(s->client, m, names, namelens, toks, toklens, 1, flags, out);
        /* Known lost before this call: not ours, whatever the delete found. */
        for (int k = 0; k < m; k++) *released += flags[k] && !was_lost[k];
    }
out:
    free(names);
    free(namelens);
    free(toks);
    free(toklens);
    free(mine);
    free(was_lost);
    free(flags);
    return st;
}
