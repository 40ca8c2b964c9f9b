/* rl_lock: Redlock acquire, release and extend (see rl_lock.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_lock.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_fence.h"
#include "rl_floor.h"
#include "rl_queue.h"
#include "rl_round.h"
#include "rl_scripts.h"
#include "rl_wait.h"

#define FENCE_SUFFIX ":fence"

/* The key (prefix + resource), its fence counter and fencing floor
 * (rl_floor.h), release channel and writer marker; free with keys_free. */
typedef struct keys {
    char *key, *fkey, *chan, *mark, *flkey;
    size_t keylen, fkeylen, chanlen, marklen, flkeylen;
    char small[384]; /* the names of a short key, without an allocation; never copy a keys */
} keys;

/* The five names share one block, owned by key: small, or allocated. */
static void keys_free(keys *k) {
    if (k->key != k->small) free(k->key);
    k->key = k->fkey = k->chan = k->mark = k->flkey = NULL;
}

static int keys_make(const rl_client *c, const char *res, size_t reslen, keys *k) {
    size_t pl = strlen(c->set.key_prefix), sl = sizeof FENCE_SUFFIX - 1;
    k->key = NULL;
    k->keylen = pl + reslen;
    k->fkeylen = k->keylen + sl;
    k->chanlen = k->keylen + sizeof RL_RELEASED_SUFFIX - 1;
    k->marklen = k->keylen + sizeof RL_WRITER_SUFFIX - 1;
    size_t total = k->keylen + 1 + k->fkeylen + 1 + k->chanlen + 1 + k->marklen + 1 +
                   RL_FLOOR_KEY_MAX(pl, k->keylen) + 1;
    k->key = total <= sizeof k->small ? k->small : malloc(total);
    if (!k->key) return -1;
    k->fkey = k->key + k->keylen + 1;
    k->chan = k->fkey + k->fkeylen + 1;
    k->mark = k->chan + k->chanlen + 1;
    k->flkey = k->mark + k->marklen + 1;
    memcpy(k->key, c->set.key_prefix, pl);
    memcpy(k->key + pl, res, reslen);
    memcpy(k->fkey, k->key, k->keylen);
    memcpy(k->fkey + k->keylen, FENCE_SUFFIX, sl);
    memcpy(k->chan, k->key, k->keylen);
    memcpy(k->chan + k->keylen, RL_RELEASED_SUFFIX, sizeof RL_RELEASED_SUFFIX - 1);
    memcpy(k->mark, k->key, k->keylen);
    memcpy(k->mark + k->keylen, RL_WRITER_SUFFIX, sizeof RL_WRITER_SUFFIX); /* with its NUL */
    k->key[k->keylen] = k->fkey[k->fkeylen] = k->chan[k->chanlen] = '\0';
    k->flkeylen = rl_floor_key(c->set.key_prefix, pl, k->key, k->keylen, k->flkey);
    k->flkey[k->flkeylen] = '\0';
    return 0;
}

/* The compare-and-delete command for key k and token into argv/lens: with
 * the release channel for a release waiters must hear of, without it for a
 * cleanup. Returns argc. */
static int release_cmd(const rl_client *c, const keys *k, const char *token, size_t toklen, int tell_waiters,
                       const char *argv[6], size_t lens[6]) {
    const char *a[6] = {"EVAL", RL_SCRIPT_RELEASE, "1", k->key, token, k->chan};
    size_t l[6] = {4, sizeof RL_SCRIPT_RELEASE - 1, 1, k->keylen, toklen, k->chanlen};
    memcpy(argv, a, sizeof a);
    memcpy(lens, l, sizeof l);
    if (tell_waiters && c->set.fair) { /* tells the queue's head instead (rl_queue.h) */
        argv[1] = RL_SCRIPT_RELEASE_FAIR;
        lens[1] = sizeof RL_SCRIPT_RELEASE_FAIR - 1;
        return 5;
    }
    return tell_waiters ? 6 : 5;
}

static rl_status finish(rl_outcome *out, rl_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static rl_status finish(rl_outcome *out, rl_status st, const char *fmt, ...) {
    out->status = st;
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(out->msg, sizeof out->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

rl_status rl_lock_check_resource(const rl_client *c, const char *res, size_t reslen, rl_outcome *out) {
    if (!res || reslen == 0) return finish(out, RL_MISUSE, "resource must be a non-empty name");
    size_t pl = strlen(c->set.key_prefix);
    if (reslen + pl > RL_RESOURCE_MAX)
        return finish(out, RL_MISUSE, "resource name is too long: key_prefix plus resource may be at most %d bytes",
                      RL_RESOURCE_MAX);
    /* Such a name's key would be a fencing floor's (rl_floor.h). */
    if (reslen >= sizeof RL_FLOOR_NAME - 1 && memcmp(res, RL_FLOOR_NAME, sizeof RL_FLOOR_NAME - 1) == 0)
        return finish(out, RL_MISUSE, "names starting with '" RL_FLOOR_NAME "' are kept for the keys of fencing "
                                      "floors; choose another name");
    int own = rl_floor_is_own(c->set.key_prefix, pl, res, reslen);
    if (own < 0) return finish(out, RL_NOMEM, "out of memory");
    if (own)
        return finish(out, RL_MISUSE, "under this key_prefix, which leaves a '{' open, this name's key is the key "
                                      "of its own fencing floor; choose another name");
    return RL_OK;
}

/* Shared start of every call: counts, nodes present, resource, keys. */
rl_status rl_lock_check_nodes(const rl_client *c, rl_outcome *out) {
    out->nodes = c->n;
    out->quorum = rl_client_quorum(c);
    if (c->n == 0)
        return finish(out, RL_MISUSE, RL_LOCK_NO_NODES_MSG);
    if (out->quorum > c->n)
        return finish(out, RL_MISUSE, "unsafe_test_quorum %d is larger than the %d nodes configured", out->quorum, c->n);
    return RL_OK;
}

/* Votes of a call kept on its stack: node lists up to this long need no
 * allocation per call. */
#define SMALL_VOTES 7

static void end(keys *k, rl_vote *votes, const rl_vote *small) {
    keys_free(k);
    if (votes != small) free(votes);
}

/* The keys of res and a vote per node (small when there are few nodes);
 * give both back with end. */
static rl_status begin(rl_client *c, const char *res, size_t reslen, rl_outcome *out, keys *k, rl_vote *small,
                       rl_vote **votes) {
    *votes = NULL;
    k->key = NULL;
    if (rl_lock_check_nodes(c, out) != RL_OK) return out->status;
    if (rl_lock_check_resource(c, res, reslen, out) != RL_OK) return out->status;
    if (c->n <= SMALL_VOTES) memset(*votes = small, 0, (size_t)c->n * sizeof *small);
    else *votes = calloc((size_t)c->n, sizeof **votes);
    if (!*votes || keys_make(c, res, reslen, k) != 0) {
        end(k, *votes, small);
        *votes = NULL;
        return finish(out, RL_NOMEM, "out of memory");
    }
    return RL_OK;
}

int rl_lock_pause(rl_client *c, const char *key, size_t keylen, int *subscribed, int woken, int got_some, int64_t now,
                  int64_t deadline, rl_outcome *out) {
    if (subscribed && !*subscribed) {
        /* From now on a release wakes us; try once more at once, since it
         * may have come before the subscription did. */
        *subscribed = 1;
        int confirmed = rl_wait_subscribe(c, key, keylen, deadline);
        if (confirmed > 0) return woken;
        if (confirmed < 0) now = deadline; /* cancelled: the pause below sees it at once */
        else now = rl_now_us();
    }
    int64_t d = rl_random_between(c->set.retry_delay_ms - c->set.retry_jitter_ms,
                                  c->set.retry_delay_ms + c->set.retry_jitter_ms) * 1000;
    /* Woken by a release, we got some nodes but not a quorum: the waiters
     * woken with us split the nodes. Once per release, try again after a
     * short random pause instead of a whole retry delay. */
    if (woken && got_some) d = rl_random_between(0, 5000);
    if (d < 0) d = 0;
    if (now + d > deadline) d = deadline - now;
    /* Until d has passed or a whole release message came. */
    woken = rl_wait_pause(c, key, keylen, 0, now + d);
    if (woken < 0) {
        /* Every failed attempt is cleaned up before the pause: nothing is held. */
        finish(out, RL_INTERRUPTED, "gave up after %d attempts; no lock taken", out->attempts);
        return -1;
    }
    if (c->n != out->nodes) {
        finish(out, RL_MISUSE, "the node list changed while waiting for the lock");
        return -1;
    }
    return woken;
}

rl_status rl_lock_check_times(int64_t ttl_ms, int64_t wait_ms, rl_outcome *out) {
    if (ttl_ms < 1 || ttl_ms > RL_TTL_MAX_MS)
        return finish(out, RL_MISUSE, "ttl_ms must be a whole number of milliseconds from 1 to %lld", RL_TTL_MAX_MS);
    if (wait_ms < 0 || wait_ms > RL_WAIT_MAX_MS)
        return finish(out, RL_MISUSE, "wait_ms must be a whole number of milliseconds from 0 to %lld", RL_WAIT_MAX_MS);
    return RL_OK;
}

rl_status rl_lock_new_token(rl_client *c, int set, char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    char pub[RL_TOKEN_PUBLIC_LEN];
    if (rl_holder_token_start(c, set, pub) == 0 && rl_token_new(token, pub) == 0) return RL_OK;
    token[0] = '\0';
    return finish(out, RL_NO_QUORUM, "the kernel gave no random bytes for a token (getrandom failed); no lock taken");
}

int64_t rl_lock_fence_ttl_ms(const rl_client *c, int64_t ttl_ms) {
    if (c->set.fence_ttl_ms <= 0) return 0;
    return c->set.fence_ttl_ms > ttl_ms ? c->set.fence_ttl_ms : ttl_ms;
}

/* Validity in µs of a lock set for ttl_ms by an attempt that ran from
 * start_us to end_us: the TTL less the time the attempt took and the drift
 * allowance. */
int64_t rl_lock_validity_us(const rl_client *c, int64_t ttl_ms, int64_t start_us, int64_t end_us) {
    return ttl_ms * 1000 - (end_us - start_us) - rl_client_drift_us(c, ttl_ms);
}

/* A TTL within the clock drift allowance can never leave a positive
 * validity: refuse it up front instead of failing every attempt. */
rl_status rl_lock_check_ttl(const rl_client *c, int64_t ttl_ms, rl_outcome *out) {
    if (ttl_ms * 1000 > rl_client_drift_us(c, ttl_ms)) return RL_OK;
    int64_t least = ttl_ms;
    while (least * 1000 <= rl_client_drift_us(c, least)) least++;
    return finish(out, RL_MISUSE,
                  "ttl_ms %lld is too short: the clock drift allowance (2 ms + drift_factor %g x ttl_ms) takes all of "
                  "it; use at least %lld ms, in practice far more than the time to reach the nodes",
                  (long long)ttl_ms, c->set.drift_factor, (long long)least);
}

static void count_votes(rl_outcome *out, const rl_round *r) {
    out->yes = r->yes;
    out->no = r->no;
    out->fail = r->fail;
}

int rl_lock_ran_out(const rl_round *r, const rl_outcome *out, int64_t validity_us) {
    return r->yes >= out->quorum || (validity_us <= 0 && r->yes + r->no < out->quorum);
}

void rl_lock_too_slow(const rl_round *r, int64_t end_us, int64_t ttl_ms, rl_outcome *out) {
    count_votes(out, r);
    finish(out, RL_NO_QUORUM,
           "acquiring took %lld ms, which used up the validity of a %lld ms lock; raise ttl_ms or lower timeout_ms",
           (long long)((end_us - r->start_us) / 1000), (long long)ttl_ms);
}

/* The outcome of a round that did not reach a quorum of yes votes. */
rl_status rl_lock_not_done(const rl_client *c, const struct rl_round *r, rl_outcome *out, const char *what) {
    count_votes(out, r);
    /* Acquire: a quorum answered, so the lock is held elsewhere. Release and
     * extend: "not ours" only when the no votes alone leave no room for a
     * quorum of ours; otherwise it is not known, and that is an error. */
    if (r->strict_no ? r->no + r->blocked > c->n - out->quorum : r->yes + r->no >= out->quorum)
        return finish(out, RL_REFUSED, "%s: %d of %d nodes said no (%d needed)", what, r->no, c->n, out->quorum);
    snprintf(out->msg, sizeof out->msg, "%d of %d nodes failed, so the %d votes needed could not be had: ", r->fail,
             c->n, out->quorum);
    rl_round_describe_failures(c, r, out->msg, sizeof out->msg);
    out->status = RL_NO_QUORUM;
    return RL_NO_QUORUM;
}

int64_t rl_lock_marker_ms(const rl_client *c, int64_t left_us) {
    int64_t slowest = 0;
    for (int i = 0; i < c->n; i++) {
        int64_t t = rl_client_timeout_us(c, c->nodes[i]) / 1000;
        if (t > slowest) slowest = t;
    }
    int64_t next_try = c->set.retry_delay_ms + c->set.retry_jitter_ms, left_ms = left_us > 0 ? (left_us + 999) / 1000 : 0;
    return (left_ms < next_try ? left_ms : next_try) + 2 * slowest + 100;
}

/* An exclusive acquirer about to wait tells the nodes where the name is
 * held shared to let no new shared holder in (rl_shared.h) until its next
 * try: the marker lives rl_lock_marker_ms. One round;
 * its votes decide nothing, so it ends at the first answer: the others
 * still go before the next try on each connection, and a hung or paused
 * node does not hold the wait up for its whole timeout. Caller holds c->mu. */
static void mark_writer_waiting(rl_client *c, const keys *k, int64_t left_us, rl_vote *votes) {
    char px[32];
    snprintf(px, sizeof px, "%lld", (long long)rl_lock_marker_ms(c, left_us));
    const char *argv[] = {"EVAL", RL_SCRIPT_WRITER_WAITING, "2", k->key, k->mark, px};
    size_t lens[] = {4, sizeof RL_SCRIPT_WRITER_WAITING - 1, 1, k->keylen, k->marklen, strlen(px)};
    rl_round r = {.kind = RL_K_MARK, .argc = 6, .argv = argv, .lens = lens, .quorum = 1, .votes = votes};
    rl_round_run(c, &r);
}

/* The acquirer that set the marker got in, or was interrupted: the marker
 * goes, so readers with no writer waiting are let in then, not when it
 * expires. Got in: one round, ended at the first answer as
 * mark_writer_waiting's. Interrupted: the wait ends now, so the removal
 * goes out as a failed attempt's cleanup does, answered later
 * (rl_round_cleanup_connected); with every link dead the round would wait
 * a whole node timeout for a first answer. */
static void clear_writer_waiting(rl_client *c, const keys *k, int interrupted, rl_vote *votes) {
    const char *argv[] = {"EVAL", RL_SCRIPT_WRITER_DONE, "1", k->key, RL_WRITER_SUFFIX};
    size_t lens[] = {4, sizeof RL_SCRIPT_WRITER_DONE - 1, 1, k->keylen, sizeof RL_WRITER_SUFFIX - 1};
    if (interrupted) {
        rl_round_cleanup_connected(c, 5, argv, lens);
        return;
    }
    rl_round r = {.kind = RL_K_MARK, .argc = 5, .argv = argv, .lens = lens, .quorum = 1, .votes = votes};
    rl_round_run(c, &r);
}

long long rl_lock_fence_number(const rl_client *c, const rl_round *r) {
    long long fence = 0;
    for (int i = 0; i < c->n; i++)
        if (r->votes[i].state == RL_V_YES && r->votes[i].value > fence) fence = r->votes[i].value;
    return fence;
}

int rl_lock_fence_stored(const rl_client *c, const rl_round *r, long long fence, int *lagging) {
    int stored = 0;
    *lagging = 0;
    for (int i = 0; i < c->n; i++) {
        if (r->votes[i].state != RL_V_YES) continue;
        if (r->votes[i].value >= fence) stored++;
        else ++*lagging;
    }
    return stored;
}

int rl_lock_fence_raise(rl_client *c, const rl_round *r, long long fence, int argc, const char *const *argv,
                        const size_t *lens, char *why, size_t whylen) {
    size_t n = c->n > 0 ? (size_t)c->n : 1; /* c->n >= 1 here (a round decided); for the compiler */
    unsigned char *only = calloc(n, 1);
    rl_vote *votes = calloc(n, sizeof *votes);
    int lagging = 0, confirmed = 0;
    if (!only || !votes) {
        snprintf(why, whylen, "out of memory");
        goto out;
    }
    for (int i = 0; i < c->n; i++)
        if (r->votes[i].state == RL_V_YES && r->votes[i].value < fence) only[i] = 1, lagging++;
    if (lagging) {
        rl_round wb = {.kind = RL_K_WRITEBACK, .argc = argc, .argv = argv, .lens = lens, .only = only,
                       .wait_all = 1, .quorum = lagging, .votes = votes};
        rl_round_run(c, &wb);
        confirmed = wb.yes;
        if (wb.yes < lagging) rl_round_describe_failures(c, &wb, why, whylen);
    }
out:
    free(only);
    free(votes);
    return confirmed;
}

/* After a successful fenced round r: remembers it so late yes replies get
 * the write-back too, and raises the counters of the nodes that said yes
 * with a lower number than fence. Returns how many nodes are known to
 * store fence now; when a write-back failed, why says so. *waited says
 * whether it waited on the nodes (time passed). */
static int fence_writeback(rl_client *c, const rl_round *r, void *kv, long long fence, int64_t fence_ttl_ms,
                           char *why, size_t whylen, int *waited) {
    const keys *k = kv;
    rl_fence_remember(c, r->op, k->fkey, k->fkeylen, fence, fence_ttl_ms);
    int lagging, stored = rl_lock_fence_stored(c, r, fence, &lagging);
    *waited = lagging > 0;
    if (!lagging) return stored; /* the usual case: nothing to build or wait for */
    rl_fence_cmd w;
    rl_fence_cmd_make(&w, k->fkey, k->fkeylen, fence, fence_ttl_ms);
    return stored + rl_lock_fence_raise(c, r, fence, RL_FENCE_ARGC, w.argv, w.lens, why, whylen);
}

void rl_lock_decide(rl_client *c, const rl_round *r, int quorum, int64_t ttl_ms, int fenced,
                    rl_lock_write_back write_back, void *wb_keys, int64_t fence_ttl_ms, char *why, size_t whylen,
                    rl_lock_decision *d) {
    memset(d, 0, sizeof *d);
    d->end_us = r->end_us;
    d->validity_us = rl_lock_validity_us(c, ttl_ms, r->start_us, d->end_us);
    if (r->yes < quorum || d->validity_us <= 0 || !fenced) return;
    d->fence = rl_lock_fence_number(c, r);
    int waited;
    d->stored = write_back(c, r, wb_keys, d->fence, fence_ttl_ms, why, whylen, &waited);
    if (waited) { /* otherwise only instructions ran since the round's end */
        d->end_us = rl_now_us();
        d->validity_us = rl_lock_validity_us(c, ttl_ms, r->start_us, d->end_us);
    }
    d->fence_short = d->stored < quorum && d->validity_us > 0;
}

/* Tells the owner (rl_client_report) that an acquisition failed for lack of a quorum. */
static void report_no_quorum(const rl_client *c, const char *res, size_t reslen, const rl_outcome *out) {
    char name[72], msg[sizeof out->msg + 128];
    snprintf(msg, sizeof msg, "redlock: could not lock '%s': %s", rl_text_excerpt(name, sizeof name, res, reslen, 64),
             out->msg);
    rl_client_report(c, &(rl_event){.kind = RL_EVENT_NO_QUORUM, .res = res, .reslen = reslen,
                     .msg = msg});
}

rl_status rl_lock_acquire(rl_client *c, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                          char token[RL_TOKEN_LEN + 1], rl_outcome *out) {
    memset(out, 0, sizeof *out);
    token[0] = '\0';
    if (rl_lock_check_times(ttl_ms, wait_ms, out) != RL_OK) return out->status;
    pthread_mutex_lock(&c->mu);
    keys k;
    rl_vote small[SMALL_VOTES], *votes = NULL;
    if (rl_lock_check_ttl(c, ttl_ms, out) != RL_OK || begin(c, res, reslen, out, &k, small, &votes) != RL_OK) {
        pthread_mutex_unlock(&c->mu);
        return out->status;
    }
    if (ttl_ms > c->max_ttl_ms) c->max_ttl_ms = ttl_ms;
    int64_t deadline = 0; /* counted from the first attempt's start */
    int subscribed = 0, woken = 0, marked = 0;
    rl_queue q;
    int no_queue = rl_queue_start(c, &q, k.key, k.keylen, 0, wait_ms) != 0;
    if (no_queue) finish(out, RL_NOMEM, "out of memory");
    else if (q.on) deadline = rl_now_us() + wait_ms * 1000; /* counted from the first turn */
    for (; !no_queue;) {
        int turn = rl_lock_turn(c, &q, votes, deadline, token, out);
        if (turn < 0) break;
        if (turn == 0) continue;
        int64_t fence_ttl = rl_lock_fence_ttl_ms(c, ttl_ms);
        char ttl[RL_DECIMAL_MAX], fttl[RL_DECIMAL_MAX]; /* both checked whole numbers >= 0 */
        size_t ttllen = rl_resp_decimal(ttl, (unsigned long long)ttl_ms);
        size_t fttllen = rl_resp_decimal(fttl, (unsigned long long)fence_ttl);
        const char *set_argv[] = {"SET", k.key, token, "NX", "PX", ttl};
        size_t set_lens[] = {3, k.keylen, RL_TOKEN_LEN, 2, 2, ttllen};
        const char *f_argv[] = {"EVAL", RL_SCRIPT_ACQUIRE_FENCED, "3", k.key, k.fkey, k.flkey, token, ttl, fttl};
        size_t f_lens[] = {4, sizeof RL_SCRIPT_ACQUIRE_FENCED - 1, 1, k.keylen, k.fkeylen, k.flkeylen,
                           RL_TOKEN_LEN, ttllen, fttllen};
        int fenced = c->set.fencing != 0;
        /* Past the TTL less the drift allowance no answer can make the lock
         * valid: a split vote waits for a hung node no longer than that. */
        rl_round r = {.kind = fenced ? RL_K_ACQUIRE_FENCED : RL_K_ACQUIRE,
                      .give_up_after_us = rl_lock_validity_us(c, ttl_ms, 0, 0),
                      .argc = fenced ? 9 : 6,
                      .argv = fenced ? f_argv : set_argv,
                      .lens = fenced ? f_lens : set_lens,
                      .quorum = out->quorum,
                      .guard_applies = 1,
                      .secret = token,
                      .secretlen = RL_TOKEN_LEN,
                      .votes = votes,
                      /* the connection's holder details, where a node needs them first */
                      .before = c->set.holder_info ? rl_holder_before_send : NULL,
                      .before_ctx = &ttl_ms};
        rl_round_run(c, &r);
        if (!deadline) deadline = r.start_us + wait_ms * 1000;
        char wb_why[RL_ERR_MAX] = "";
        rl_lock_decision d;
        rl_lock_decide(c, &r, out->quorum, ttl_ms, fenced, fence_writeback, &k, fence_ttl, wb_why,
                       sizeof wb_why, &d);
        if (r.yes >= out->quorum && d.validity_us > 0 && !d.fence_short) {
            count_votes(out, &r);
            out->fence = d.fence;
            out->validity_ms = d.validity_us / 1000;
            out->valid_until_us = d.end_us + d.validity_us;
            out->end_us = d.end_us;
            out->status = RL_OK;
            break;
        }
        /* Failed attempt: give back whatever we got, on every node that may hold it. */
        const char *rel_argv[7];
        size_t rel_lens[7];
        rl_round_cleanup(c, &r, release_cmd(c, &k, token, RL_TOKEN_LEN, 0, rel_argv, rel_lens), rel_argv, rel_lens);
        if (d.fence_short) {
            count_votes(out, &r);
            finish(out, RL_NO_QUORUM,
                   "fencing number %lld could be stored on only %d of the %d nodes needed, so it was not handed out "
                   "and the lock was given back: %s",
                   d.fence, d.stored, out->quorum, wb_why);
        } else if (rl_lock_ran_out(&r, out, d.validity_us)) {
            rl_lock_too_slow(&r, d.end_us, ttl_ms, out);
        } else {
            rl_lock_not_done(c, &r, out, "held elsewhere");
        }
        int64_t now = rl_now_us();
        if (now >= deadline) break;
        if (r.no > 0) {
            mark_writer_waiting(c, &k, deadline - now, votes);
            marked = 1;
            now = rl_now_us();
        }
        if (q.on) woken = rl_lock_queue_wait(c, &q, deadline, out);
        else woken = rl_lock_pause(c, k.key, k.keylen, &subscribed, woken, r.yes > 0, now, deadline, out);
        if (woken < 0) break;
    }
    rl_queue_end(c, &q, out->status == RL_OK);
    if (marked && (out->status == RL_OK || out->status == RL_INTERRUPTED))
        clear_writer_waiting(c, &k, out->status == RL_INTERRUPTED, votes);
    if (subscribed) rl_wait_unsubscribe(c);
    if (out->status != RL_OK) token[0] = '\0';
    if (out->status == RL_NO_QUORUM) report_no_quorum(c, res, reslen, out);
    out->op = c->op;
    pthread_mutex_unlock(&c->mu);
    end(&k, votes, small);
    return out->status;
}

int rl_lock_queue_wait(rl_client *c, rl_queue *q, int64_t deadline, rl_outcome *out) {
    int64_t now = rl_now_us();
    if (now >= deadline) {
        if (out->attempts == 0)
            finish(out, RL_REFUSED, "queued behind other waiters for all of wait_ms (%d turns); held elsewhere",
                   q->turns);
        return -1;
    }
    int w = rl_queue_pause(c, q, now, deadline);
    if (w < 0) {
        /* Every failed attempt is cleaned up before the pause: nothing is held. */
        finish(out, RL_INTERRUPTED, "gave up after %d attempts; no lock taken", out->attempts);
        return -1;
    }
    if (c->n != out->nodes) {
        finish(out, RL_MISUSE, "the node list changed while waiting for the lock");
        return -1;
    }
    return w;
}

int rl_lock_turn(rl_client *c, rl_queue *q, rl_vote *votes, int64_t deadline, char token[RL_TOKEN_LEN + 1],
                 rl_outcome *out) {
    if (!rl_queue_may_try(c, q, votes)) return rl_lock_queue_wait(c, q, deadline, out) < 0 ? -1 : 0;
    out->attempts++;
    return rl_lock_new_token(c, 0, token, out) == RL_OK ? 1 : -1;
}

/* Whether s (len bytes) is what INCR leaves in a key: a decimal integer. */
static int is_integer_text(const char *s, size_t len) {
    size_t i = len > 0 && s[0] == '-';
    if (i == len || len > 20) return 0;
    for (; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

rl_status rl_lock_check_token(const char *token, size_t toklen, rl_outcome *out) {
    if (!token || toklen == 0) return finish(out, RL_MISUSE, "token must be a non-empty text returned by redlock_acquire");
    if (toklen > RL_TOKEN_ARG_MAX) return finish(out, RL_MISUSE, "token is too long to be a redlock token");
    if (is_integer_text(token, toklen))
        return finish(out, RL_MISUSE, "token is a number, which is what fencing counters hold, never a lock's token; "
                                      "pass the token redlock_acquire returned");
    if ((toklen == sizeof RL_WRITER_MARK - 1 && memcmp(token, RL_WRITER_MARK, toklen) == 0) ||
        memchr(token, RL_DETAILS_SEP[0], toklen))
        return finish(out, RL_MISUSE, "token is what the extension keeps beside a lock (a writer's marker or holder "
                                      "details), never a lock's token; pass the token redlock_acquire returned");
    return RL_OK;
}

/* One call by token (release, check): arguments checked, then body runs
 * with c->mu held, the keys made and a vote per node, and sets out. */
typedef void by_token_body(rl_client *c, const keys *k, const char *token, size_t toklen, rl_vote *votes,
                           rl_outcome *out, void *arg);

static rl_status by_token(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                          rl_outcome *out, by_token_body *body, void *arg) {
    memset(out, 0, sizeof *out);
    if (rl_lock_check_token(token, toklen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&c->mu);
    keys k;
    rl_vote small[SMALL_VOTES], *votes = NULL;
    if (begin(c, res, reslen, out, &k, small, &votes) == RL_OK) {
        body(c, &k, token, toklen, votes, out, arg);
        end(&k, votes, small);
    }
    out->op = c->op;
    pthread_mutex_unlock(&c->mu);
    return out->status;
}

static void release_body(rl_client *c, const keys *k, const char *token, size_t toklen, rl_vote *votes,
                         rl_outcome *out, void *arg) {
    (void)arg;
    const char *argv[7];
    size_t lens[7];
    rl_round r = {.kind = RL_K_RELEASE, .argc = release_cmd(c, k, token, toklen, 1, argv, lens), .argv = argv,
                  .lens = lens, .quorum = out->quorum, .strict_no = 1, .secret = token, .secretlen = toklen,
                  .votes = votes};
    rl_round_run(c, &r);
    rl_round_owe_broken(c, &r);
    if (r.yes >= out->quorum) {
        count_votes(out, &r);
        out->status = RL_OK;
    } else {
        rl_lock_not_done(c, &r, out, "not held with this token");
    }
}

rl_status rl_lock_release(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                          rl_outcome *out) {
    return by_token(c, res, reslen, token, toklen, out, release_body, NULL);
}

/* What check_body needs and reports: the quorum; ms left and the kind (see rl_lock_check). */
typedef struct check_result {
    int64_t ttl_left_ms, shared_k;
    int quorum; /* yes votes needed; 0: the client's majority */
} check_result;

#define CHECK_KIND_SHIFT 32 /* RL_SCRIPT_CHECK: (max_holders + 1) << 32 marks a shared holder */
_Static_assert(RL_SHARED_MAX_HOLDERS == 1000000, "RL_SCRIPT_CHECK refuses limits above 1000000");

static void check_body(rl_client *c, const keys *k, const char *token, size_t toklen, rl_vote *votes, rl_outcome *out,
                       void *arg) {
    check_result *res = arg;
    const char *argv[] = {"EVAL", RL_SCRIPT_CHECK, "1", k->key, token};
    size_t lens[] = {4, sizeof RL_SCRIPT_CHECK - 1, 1, k->keylen, toklen};
    if (res->quorum > out->quorum) out->quorum = res->quorum;
    rl_round r = {.kind = RL_K_CHECK, .argc = 5, .argv = argv, .lens = lens, .quorum = out->quorum,
                  .guard_applies = 1, .strict_no = 1, .secret = token, .secretlen = toklen, .votes = votes};
    rl_round_run(c, &r);
    count_votes(out, &r);
    if (r.yes < out->quorum) {
        rl_lock_not_done(c, &r, out, "not held with this token");
        return;
    }
    /* Every yes node keeps the key at least its PTTL from the round's
     * start; the least of them is how long a quorum surely has it. */
    int64_t least = 0;
    res->shared_k = -1;
    for (int i = 0; i < c->n; i++) {
        if (votes[i].state != RL_V_YES) continue;
        int64_t ms = votes[i].value & ((1LL << CHECK_KIND_SHIFT) - 1), kind = votes[i].value >> CHECK_KIND_SHIFT;
        if (kind > 0 && kind - 1 > res->shared_k) res->shared_k = kind - 1;
        if (least == 0 || ms < least) least = ms;
    }
    /* A PTTL beyond any TTL set here (another client's PEXPIRE, a hostile
     * node) would overflow the µs arithmetic; the key lives at least the
     * longest TTL, so that is a safe lower bound. */
    if (least > RL_TTL_MAX_MS) least = RL_TTL_MAX_MS;
    int64_t validity = rl_lock_validity_us(c, least, r.start_us, r.end_us);
    if (least > c->max_ttl_ms) c->max_ttl_ms = least;
    if (validity > 0) {
        res->ttl_left_ms = least;
        out->validity_ms = validity / 1000;
        out->valid_until_us = r.end_us + validity;
        out->status = RL_OK;
    } else {
        finish(out, RL_REFUSED, "the lock has %lld ms left on the nodes, less than the time the check took "
                                "plus the drift allowance", (long long)least);
    }
}

rl_status rl_lock_check(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen, int quorum,
                        int64_t *ttl_left_ms, int64_t *shared_k, rl_outcome *out) {
    check_result r = {0, -1, quorum};
    rl_status st = by_token(c, res, reslen, token, toklen, out, check_body, &r);
    *ttl_left_ms = r.ttl_left_ms;
    *shared_k = r.shared_k;
    return st;
}

rl_status rl_lock_extend(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                         int64_t ttl_ms, rl_outcome *out) {
    return rl_lock_extend_with(c, res, reslen, token, toklen, ttl_ms, NULL, 0, out);
}

rl_status rl_lock_extend_with(rl_client *c, const char *res, size_t reslen, const char *token, size_t toklen,
                              int64_t ttl_ms, const char *limit, int quorum, rl_outcome *out) {
    memset(out, 0, sizeof *out);
    if (ttl_ms < 1 || ttl_ms > RL_TTL_MAX_MS)
        return finish(out, RL_MISUSE, "ttl_ms must be a whole number of milliseconds from 1 to %lld", RL_TTL_MAX_MS);
    if (rl_lock_check_token(token, toklen, out) != RL_OK) return out->status;
    pthread_mutex_lock(&c->mu);
    keys k;
    rl_vote small[SMALL_VOTES], *votes = NULL;
    if (rl_lock_check_ttl(c, ttl_ms, out) == RL_OK && begin(c, res, reslen, out, &k, small, &votes) == RL_OK) {
        if (quorum > 0 && c->set.unsafe_test_quorum <= 0) out->quorum = quorum;
        if (ttl_ms > c->max_ttl_ms) c->max_ttl_ms = ttl_ms;
        char ttl[RL_DECIMAL_MAX];
        size_t ttllen = rl_resp_decimal(ttl, (unsigned long long)ttl_ms); /* checked: 1 or more */
        /* The counter and floor are stretched whatever this connection's
         * fencing setting: the lock may have been taken with it on (by
         * another connection, or before it was turned off), and its next
         * holder's number must still be higher. Keys that hold no number
         * (none yet, with fencing off everywhere) are left alone. */
        const char *argv[10] = {"EVAL", RL_SCRIPT_EXTEND, "3", k.key, k.fkey, k.flkey};
        size_t lens[10] = {4, sizeof RL_SCRIPT_EXTEND - 1, 1, k.keylen, k.fkeylen, k.flkeylen};
        int argc = 6;
        argv[argc] = token;
        lens[argc++] = toklen;
        argv[argc] = ttl;
        lens[argc++] = ttllen;
        argv[argc] = c->set.key_prefix;
        lens[argc++] = strlen(c->set.key_prefix);
        if (limit) {
            argv[argc] = limit;
            lens[argc++] = strlen(limit);
        }
        rl_round r = {.kind = RL_K_EXTEND, .argc = argc, .argv = argv, .lens = lens, .quorum = out->quorum,
                      .guard_applies = 1, .strict_no = 1, .secret = token, .secretlen = toklen, .votes = votes};
        rl_round_run(c, &r);
        int64_t validity = rl_lock_validity_us(c, ttl_ms, r.start_us, r.end_us);
        count_votes(out, &r);
        out->sent = rl_round_sent(c, &r);
        if (r.yes >= out->quorum && validity > 0) {
            out->validity_ms = validity / 1000;
            out->valid_until_us = r.end_us + validity;
            out->status = RL_OK;
        } else {
            if (r.yes >= out->quorum)
                finish(out, RL_REFUSED, "extending took %lld ms, which used up the new validity",
                       (long long)((r.end_us - r.start_us) / 1000));
            else
                rl_lock_not_done(c, &r, out, "lock lost");
            /* Lost: delete what is left of it, so it does not linger on a minority. */
            if (out->status == RL_REFUSED) {
                const char *rel_argv[7];
                size_t rel_lens[7];
                rl_round_cleanup(c, &r, release_cmd(c, &k, token, toklen, 0, rel_argv, rel_lens), rel_argv, rel_lens);
            }
        }
        end(&k, votes, small);
    }
    out->op = c->op;
    pthread_mutex_unlock(&c->mu);
    return out->status;
}

/* Every item gets st and why (a round that did not run). */
static rl_status items_fail(rl_extend_item *items, int n, rl_status st, const char *why) {
    for (int k = 0; k < n; k++) {
        items[k].status = st;
        snprintf(items[k].why, sizeof items[k].why, "%s", why);
    }
    return st;
}

/* The keys of n items in one allocation: key k at kv[k] (prefix +
 * resource), its fence counter at kv[n + k] (their fencing floors then go
 * after them, each once, from fl). NULL on OOM; free the returned block
 * only. */
static char *many_keys(const rl_client *c, const rl_extend_item *items, int n, const char **kv, size_t *lens) {
    size_t pl = strlen(c->set.key_prefix), sl = sizeof FENCE_SUFFIX - 1, total = 0;
    for (int k = 0; k < n; k++) total += (pl + items[k].reslen) * 2 + sl;
    char *block = malloc(total ? total : 1), *p = block;
    if (!block) return NULL;
    for (int k = 0; k < n; k++) {
        kv[k] = p;
        memcpy(p, c->set.key_prefix, pl);
        memcpy(p + pl, items[k].res, items[k].reslen);
        lens[k] = pl + items[k].reslen;
        p += lens[k];
        kv[n + k] = p;
        memcpy(p, kv[k], lens[k]);
        memcpy(p + lens[k], FENCE_SUFFIX, sl);
        lens[n + k] = lens[k] + sl;
        p += lens[n + k];
    }
    return block;
}

/* Counts the votes for item k of round r and sets its outcome. */
static void item_outcome(rl_client *c, const rl_round *r, rl_extend_item *it, int k, int quorum) {
    int yes = 0, no = 0, fail = 0;
    for (int i = 0; i < c->n; i++) {
        int st = r->votes[i].state;
        if (st == RL_V_YES) {
            if (r->items[(size_t)i * (size_t)r->nitems + (size_t)k]) yes++;
            else no++;
        } else if (st == RL_V_FAIL) {
            fail++;
        }
    }
    it->yes = yes;
    it->no = no;
    it->fail = fail;
    int64_t validity = rl_lock_validity_us(c, it->ttl_ms, r->start_us, r->end_us);
    if (yes >= quorum && validity > 0) {
        it->status = RL_OK;
        it->validity_ms = validity / 1000;
        it->valid_until_us = r->end_us + validity;
        it->why[0] = '\0';
        return;
    }
    if (yes >= quorum) {
        it->status = RL_REFUSED;
        snprintf(it->why, sizeof it->why, "extending took %lld ms, which used up the new validity",
                 (long long)((r->end_us - r->start_us) / 1000));
    } else if (no + r->blocked > c->n - quorum) {
        it->status = RL_REFUSED;
        snprintf(it->why, sizeof it->why, "lock lost: %d of %d nodes said no (%d needed)", no, c->n, quorum);
    } else {
        it->status = RL_NO_QUORUM;
        snprintf(it->why, sizeof it->why, "%d of %d nodes failed, so the %d votes needed could not be had: ", fail,
                 c->n, quorum);
        rl_round_describe_failures(c, r, it->why, sizeof it->why);
    }
}

rl_status rl_lock_extend_many(rl_client *c, rl_extend_item *items, int n, uint64_t *op, int *sent) {
    *op = 0;
    *sent = 0;
    if (n <= 0) return RL_OK;
    rl_outcome tmp;
    memset(&tmp, 0, sizeof tmp);
    for (int k = 0; k < n; k++) {
        if (items[k].ttl_ms < 1 || items[k].ttl_ms > RL_TTL_MAX_MS)
            return items_fail(items, n, RL_MISUSE, "ttl_ms must be a whole number of milliseconds from 1 to 2147483647");
        if (items[k].reslen == 0 || !items[k].token)
            return items_fail(items, n, RL_MISUSE, "every lock needs a resource and its token");
    }
    if (n > RL_REPLY_MAX_ELEMENTS / 2) return items_fail(items, n, RL_MISUSE, "too many locks for one round");
    pthread_mutex_lock(&c->mu);
    rl_status st = RL_OK;
    /* Counters and floors are stretched whatever the fencing setting, as
     * rl_lock_extend_with does. */
    int quorum = rl_client_quorum(c);
    int nkeys = 2 * n, argc = 3 + 3 * n + 2 * n + 1; /* room for the most floors */
    const char **argv = malloc((size_t)argc * sizeof *argv);
    rl_floors fl = {0};
    size_t *lens = malloc((size_t)argc * sizeof *lens);
    char *ttls = malloc((size_t)n * 21);
    rl_vote *votes = calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *votes);
    signed char *answers = malloc((c->n > 0 ? (size_t)c->n : 1) * (size_t)n);
    char *keyblock = NULL, nkeys_text[16];
    if (c->n == 0) {
        st = items_fail(items, n, RL_MISUSE, RL_LOCK_NO_NODES_MSG);
    } else if (quorum > c->n) {
        st = items_fail(items, n, RL_MISUSE, "unsafe_test_quorum is larger than the number of nodes configured; lower it");
    } else if (!argv || !lens || !ttls || !votes || !answers ||
               !(keyblock = many_keys(c, items, n, argv + 3, lens + 3)) ||
               rl_floors_make(&fl, c->set.key_prefix, argv + 3, lens + 3, n) != 0) {
        st = items_fail(items, n, RL_NOMEM, "out of memory");
    } else {
        for (int j = 0; j < fl.m; j++) argv[3 + nkeys + j] = fl.key[j], lens[3 + nkeys + j] = fl.len[j];
        nkeys += fl.m;
        argc = 3 + nkeys + 2 * n + 1; /* and the key prefix */
        for (int k = 0; k < n; k++) {
            if (rl_lock_check_ttl(c, items[k].ttl_ms, &tmp) != RL_OK) {
                st = items_fail(items, n, RL_MISUSE, "a ttl_ms is within the clock drift allowance");
                break;
            }
        }
    }
    if (st == RL_OK) {
        argv[0] = "EVAL";
        lens[0] = 4;
        argv[1] = RL_SCRIPT_EXTEND_MANY;
        lens[1] = sizeof RL_SCRIPT_EXTEND_MANY - 1;
        lens[2] = (size_t)snprintf(nkeys_text, sizeof nkeys_text, "%d", nkeys);
        argv[2] = nkeys_text;
        for (int k = 0; k < n; k++) {
            argv[3 + nkeys + k] = items[k].token;
            lens[3 + nkeys + k] = RL_TOKEN_LEN;
            char *t = ttls + (size_t)k * 21;
            lens[3 + nkeys + n + k] = (size_t)snprintf(t, 21, "%lld", (long long)items[k].ttl_ms);
            argv[3 + nkeys + n + k] = t;
            if (items[k].ttl_ms > c->max_ttl_ms) c->max_ttl_ms = items[k].ttl_ms;
        }
        argv[argc - 1] = c->set.key_prefix;
        lens[argc - 1] = strlen(c->set.key_prefix);
        rl_round r = {.kind = RL_K_EXTEND_MANY, .argc = argc, .argv = argv, .lens = lens, .quorum = quorum,
                      .guard_applies = 1, .strict_no = 1, .withhold = 1, .nitems = n, .items = answers,
                      .votes = votes};
        rl_round_run(c, &r);
        *sent = rl_round_sent(c, &r);
        for (int k = 0; k < n; k++) {
            item_outcome(c, &r, &items[k], k, quorum);
            if (items[k].status != RL_REFUSED) continue;
            /* Lost: delete what is left of it, so it does not linger on a minority. */
            keys one = {.key = (char *)argv[3 + k], .keylen = lens[3 + k], .chan = NULL, .chanlen = 0};
            const char *rel_argv[7];
            size_t rel_lens[7];
            rl_round_cleanup(c, &r, release_cmd(c, &one, items[k].token, RL_TOKEN_LEN, 0, rel_argv, rel_lens), rel_argv,
                             rel_lens);
        }
    }
    *op = c->op;
    pthread_mutex_unlock(&c->mu);
    free(keyblock);
    rl_floors_free(&fl);
    free(argv);
    free(lens);
    free(ttls);
    free(votes);
    free(answers);
    return st;
}
