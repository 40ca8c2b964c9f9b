/* rl_lock_holder: holder details, written and read (see rl_lock.h).
 * SPDX-License-Identifier: BSD-3-Clause */

#include "rl_lock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rl_clock.h"
#include "rl_proc.h"
#include "rl_resp.h"
#include "rl_round.h"
#include "rl_scripts.h"

#define SEP RL_DETAILS_SEP
#define TAG RL_DETAILS_TAG

_Static_assert(RL_TOKEN_LEN == 60 && RL_TOKEN_ID_LEN == 16 && RL_TOKEN_PUBLIC_LEN == 28,
               "the scripts' RL_TOKEN_LEN_TEXT, RL_TOKEN_ID_LEN_TEXT, RL_TOKEN_SET_AT_TEXT and "
               "RL_TOKEN_PUBLIC_LEN_TEXT");
_Static_assert(sizeof ((rl_holder_id *)0)->text == RL_HOLDER_DETAILS_MAX, "rl_holder_id.text");
_Static_assert(RL_TOKEN_ID_LEN % 2 == 0, "an id of whole bytes");

/* text made safe for a field: cleaned, at most RL_HOLDER_TEXT_MAX bytes,
 * no separator (rl_text_clean turns control bytes, 0x1f too, into spaces). */
static const char *field_text(char *buf, size_t buflen, const char *s) {
    return rl_text_excerpt(buf, buflen, s, strlen(s), RL_HOLDER_TEXT_MAX);
}

/* c->holder made current: kept while the process, client_name and
 * key_prefix stay as they were, so an acquire costs no gethostname or
 * getpid system call and no formatting of text; else new details with a
 * new id (the nodes get them before the next lock, rl_holder_before_send),
 * and the locks taken before keep pointing to theirs. 0, or -1 when no
 * random bytes came for the id (c->holder is then as it was). */
static int holder_current(rl_client *c) {
    rl_holder_id *h = &c->holder;
    long pid = (long)rl_proc_pid();
    if (h->gen && !h->stale && h->pid == pid) return 0;
    char id[RL_TOKEN_ID_LEN];
    if (rl_random_hex(id, RL_TOKEN_ID_LEN / 2) != 0) return -1;
    char host[256] = "", hb[RL_HOLDER_TEXT_MAX + 4], ab[RL_HOLDER_TEXT_MAX + 4];
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    int k = snprintf(h->text, sizeof h->text, TAG SEP "%s" SEP "%ld" SEP "%s", field_text(hb, sizeof hb, host), pid,
                     field_text(ab, sizeof ab, c->set.client_name));
    h->len = k > 0 && (size_t)k < sizeof h->text ? (size_t)k : 0; /* no room: no details rather than a cut */
    memcpy(h->id, id, sizeof id);
    if (++h->gen == 0) h->gen = 1; /* 0 means none on a node */
    h->pid = pid;
    h->stale = 0;
    return 0;
}

/* Unix ms now (the wall clock: what a person reads as the time). */
static unsigned long long wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000 + (unsigned long long)ts.tv_nsec / 1000000;
}

int rl_holder_token_start(rl_client *c, int set, char pub[RL_TOKEN_PUBLIC_LEN]) {
    static const char hex[] = "0123456789abcdef";
    if (holder_current(c) != 0) return -1;
    memcpy(pub, c->holder.id, RL_TOKEN_ID_LEN);
    pub[RL_TOKEN_ID_LEN] = set ? '1' : '0';
    unsigned long long ms = wall_ms();
    for (int i = RL_TOKEN_PUBLIC_LEN - 1; i > RL_TOKEN_ID_LEN; i--, ms >>= 4) pub[i] = hex[ms & 15];
    return 0;
}

size_t rl_holder_details(rl_client *c, const char *kind, char *buf, size_t buflen) {
    char digits[RL_DECIMAL_MAX];
    size_t dlen = rl_resp_decimal(digits, wall_ms());
    const rl_holder_id *h = &c->holder;
    size_t klen = strlen(kind);
    if (holder_current(c) != 0 || !h->len || buflen == 0 || h->len + dlen + klen + 2 >= buflen) {
        if (buflen) buf[0] = '\0'; /* no room: no details rather than a cut */
        return 0;
    }
    memcpy(buf, h->text, h->len);
    buf[h->len] = SEP[0];
    memcpy(buf + h->len + 1, digits, dlen);
    buf[h->len + 1 + dlen] = SEP[0];
    memcpy(buf + h->len + dlen + 2, kind, klen + 1);
    return h->len + dlen + 2 + klen;
}

void rl_holder_before_send(void *ctx, rl_client *c, rl_node *node, int64_t now_us, int64_t deadline_us) {
    int64_t ttl_ms = *(const int64_t *)ctx;
    const rl_holder_id *h = &c->holder;
    if (!h->gen || !h->len || !node->conn) return;
    /* A lock taken now is set before the node answers (by the deadline)
     * and lives its TTL from then, on a clock that may run a little slow:
     * the details must outlive that, with a second to spare. */
    int64_t need = deadline_us + ttl_ms * 1000 + rl_client_drift_us(c, ttl_ms) + 1000000;
    if (node->details_gen == h->gen && node->details_until_us >= need) return;
    if (node->details_gen != h->gen && now_us < node->details_retry_us) return;
    int64_t life_ms = ttl_ms > RL_HOLDER_LIFE_MS / 4 ? 4 * ttl_ms : RL_HOLDER_LIFE_MS;
    const char *pre = c->set.key_prefix;
    size_t pl = strlen(pre), tl = sizeof RL_CLIENT_DETAILS_TAG - 1, kl = pl + tl + RL_TOKEN_ID_LEN;
    char small[256], *key = kl <= sizeof small ? small : malloc(kl);
    if (!key) return; /* no details this time: the next acquire tries again */
    memcpy(key, pre, pl);
    memcpy(key + pl, RL_CLIENT_DETAILS_TAG, tl);
    memcpy(key + pl + tl, h->id, RL_TOKEN_ID_LEN);
    char life[RL_DECIMAL_MAX];
    size_t lifelen = rl_resp_decimal(life, (unsigned long long)life_ms);
    const char *argv[6] = {"EVAL", RL_SCRIPT_DETAILS_PUT, "1", key, h->text, life};
    size_t lens[6] = {4, sizeof RL_SCRIPT_DETAILS_PUT - 1, 1, kl, h->len, lifelen};
    /* Op 0 is no round's: the answer is read as a set-up command's. */
    rl_tag tag = {.op = 0, .kind = RL_K_DETAILS, .deadline_us = deadline_us};
    if (rl_conn_send(node->conn, &tag, 6, argv, lens) == 0) {
        node->details_gen = h->gen;
        /* They reach the node after now and live life_ms from then on its
         * clock, which may run a little fast. */
        node->details_until_us = now_us + life_ms * 1000 - rl_client_drift_us(c, life_ms);
    }
    if (key != small) free(key);
}

void rl_holder_clear(rl_holder *h) {
    free(h->node_ids);
    free(h->list);
    memset(h, 0, sizeof *h);
}

/* A whole number of at most 18 digits, or -1. */
static long long number(const char *s, size_t n) {
    if (n == 0 || n > 18) return -1;
    long long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

int rl_holder_parse(const char *s, size_t slen, rl_holder_entry *e, char *kind, size_t kindlen) {
    const char *f[6];
    size_t len[6];
    int n = 0;
    const char *end = s + slen;
    if (memchr(s, '\0', slen)) return -1;
    for (const char *p = s;; n++) {
        if (n == 6) return -1;
        const char *sep = memchr(p, 0x1f, (size_t)(end - p));
        f[n] = p;
        len[n] = sep ? (size_t)(sep - p) : (size_t)(end - p);
        if (!sep) {
            n++;
            break;
        }
        p = sep + 1;
    }
    if (n != 6 || len[0] != sizeof TAG - 1 || memcmp(f[0], TAG, len[0]) != 0) return -1;
    long long pid = number(f[2], len[2]), since = number(f[4], len[4]);
    if (pid < 0 || since < 0 || len[5] == 0 || len[5] >= kindlen) return -1;
    rl_text_excerpt(e->host, sizeof e->host, f[1], len[1], RL_HOLDER_TEXT_MAX);
    rl_text_excerpt(e->app, sizeof e->app, f[3], len[3], RL_HOLDER_TEXT_MAX);
    rl_text_clean(kind, kindlen, f[5], len[5]);
    e->pid = pid;
    e->since_ms = since;
    return 0;
}

/* Parses stored details (from a server: anything) into out; 0 or -1. */
static int parse_details(const char *s, rl_holder *out) {
    rl_holder_entry e;
    char kind[sizeof out->kind];
    if (rl_holder_parse(s, strlen(s), &e, kind, sizeof kind) != 0) return -1;
    memcpy(out->host, e.host, sizeof out->host);
    memcpy(out->app, e.app, sizeof out->app);
    memcpy(out->kind, kind, sizeof out->kind);
    out->pid = e.pid;
    out->since_ms = e.since_ms;
    out->has_details = 1;
    return 0;
}

/* The shared holders listed by the nodes, merged by the SHA1 of their
 * token (which stays here: it is never shown). */
typedef struct listed {
    char id[41];
    int count, last_node;
    rl_holder_entry e;
} listed;

typedef struct lister {
    listed *l; /* RL_HOLDER_LIST_MAX entries, owned by rl_lock_holder */
    int n;
} lister;

/* Reads the list of a yes answer ({sha1, ms left, details} triples);
 * what is malformed is skipped, never trusted. */
static int list_inspect(void *ctx, int node, int state, const rl_reply *rep, char *why, size_t whylen) {
    (void)why, (void)whylen;
    lister *ls = ctx;
    if (state != RL_V_YES || rep->type != REDIS_REPLY_ARRAY || rep->elements != 4) return 0;
    const rl_reply *l = rep->element[3];
    for (size_t i = 0; i + 2 < l->elements && i < 3 * RL_HOLDER_LIST_MAX; i += 3) {
        const rl_reply *id = l->element[i], *ttl = l->element[i + 1], *d = l->element[i + 2];
        if (id->type != REDIS_REPLY_STRING || id->len != 40 || strspn(id->str, "0123456789abcdef") != 40 ||
            ttl->type != REDIS_REPLY_INTEGER || ttl->integer <= 0 || d->type != REDIS_REPLY_STRING ||
            d->len >= RL_HOLDER_DETAILS_MAX || memchr(d->str, '\0', d->len))
            continue;
        int j = 0;
        while (j < ls->n && memcmp(ls->l[j].id, id->str, 40) != 0) j++;
        if (j == ls->n) {
            rl_holder tmp;
            memset(&tmp, 0, sizeof tmp);
            if (ls->n == RL_HOLDER_LIST_MAX || parse_details(d->str, &tmp) != 0) continue;
            listed *e = &ls->l[ls->n++];
            memcpy(e->id, id->str, 40);
            e->id[40] = '\0';
            e->count = 0;
            e->last_node = -1;
            memcpy(e->e.host, tmp.host, sizeof e->e.host);
            memcpy(e->e.app, tmp.app, sizeof e->e.app);
            e->e.pid = tmp.pid;
            e->e.since_ms = tmp.since_ms;
            e->e.ttl_ms = ttl->integer;
        }
        listed *e = &ls->l[j];
        if (e->last_node == node) continue; /* a node counts once for each holder */
        e->last_node = node;
        e->count++;
        if (ttl->integer < e->e.ttl_ms) e->e.ttl_ms = ttl->integer;
    }
    return 0;
}

/* Keeps in out the listed holders a quorum of nodes list. */
static int list_keep(const lister *ls, int quorum, rl_holder *out) {
    int n = 0;
    for (int j = 0; j < ls->n; j++) n += ls->l[j].count >= quorum;
    if (n == 0) return 0;
    out->list = calloc((size_t)n, sizeof *out->list);
    if (!out->list) return -1;
    for (int j = 0; j < ls->n; j++)
        if (ls->l[j].count >= quorum) out->list[out->nlist++] = ls->l[j].e;
    return 0;
}

/* The identity part of a vote's why (up to the separator). */
static size_t id_len(const char *why) { return strcspn(why, SEP); }

rl_status rl_lock_holder(rl_client *c, const char *res, size_t reslen, rl_holder *out, rl_outcome *o) {
    memset(out, 0, sizeof *out);
    memset(o, 0, sizeof *o);
    if (rl_lock_check_resource(c, res, reslen, o) != RL_OK) return o->status;
    size_t pl = strlen(c->set.key_prefix);
    char *key = malloc(pl + reslen + 1);
    pthread_mutex_lock(&c->mu);
    o->nodes = c->n;
    o->quorum = rl_client_quorum(c);
    rl_vote *votes = calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *votes);
    out->node_ids = calloc(c->n > 0 ? (size_t)c->n : 1, sizeof *out->node_ids);
    lister ls = {.l = calloc(RL_HOLDER_LIST_MAX, sizeof(listed)), .n = 0};
    if (!key || !votes || !out->node_ids || !ls.l) {
        o->status = RL_NOMEM;
        snprintf(o->msg, sizeof o->msg, "out of memory");
        goto done;
    }
    if (c->n == 0 || o->quorum > c->n) {
        o->status = RL_MISUSE;
        snprintf(o->msg, sizeof o->msg, "no Redis nodes configured (or a quorum larger than the nodes)");
        goto done;
    }
    memcpy(key, c->set.key_prefix, pl);
    memcpy(key + pl, res, reslen);
    key[pl + reslen] = '\0';
    char most[16];
    snprintf(most, sizeof most, "%d", RL_HOLDER_LIST_MAX);
    const char *argv[6] = {"EVAL", RL_SCRIPT_HOLDER_READ, "1", key, most, c->set.key_prefix};
    size_t lens[6] = {4, sizeof RL_SCRIPT_HOLDER_READ - 1, 1, pl + reslen, strlen(most), pl};
    rl_round r = {.kind = RL_K_HOLDER, .argc = 6, .argv = argv, .lens = lens, .wait_all = 1, .quorum = o->quorum,
                  .votes = votes, .inspect = list_inspect, .inspect_ctx = &ls};
    rl_round_run(c, &r);
    o->yes = r.yes;
    o->fail = r.fail;
    if (r.yes < o->quorum) {
        o->status = RL_NO_QUORUM;
        snprintf(o->msg, sizeof o->msg, "%d of %d nodes failed, so it cannot be told who holds it: ", r.fail, c->n);
        rl_round_describe_failures(c, &r, o->msg, sizeof o->msg);
        goto done;
    }
    /* the value held by the most nodes, and whether they are a quorum */
    int best = -1, best_n = 0;
    for (int i = 0; i < c->n; i++) {
        if (votes[i].state != RL_V_YES || votes[i].value == -2) continue;
        int n = 0;
        for (int j = 0; j < c->n; j++)
            if (votes[j].state == RL_V_YES && votes[j].value != -2 && id_len(votes[j].why) == id_len(votes[i].why) &&
                memcmp(votes[j].why, votes[i].why, id_len(votes[i].why)) == 0)
                n++;
        if (n > best_n) best = i, best_n = n;
    }
    o->status = RL_OK;
    if (best < 0 || best_n < o->quorum) goto done;
    out->held = 1;
    out->ttl_ms = INT64_MAX;
    out->holders = -1;
    size_t il = id_len(votes[best].why);
    for (int j = 0; j < c->n; j++) {
        rl_vote *v = &votes[j];
        if (v->state != RL_V_YES || v->value == -2 || id_len(v->why) != il || memcmp(v->why, votes[best].why, il) != 0)
            continue;
        out->node_ids[out->nnodes++] = c->nodes[j]->id;
        if (v->value >= 0 && v->value < out->ttl_ms) out->ttl_ms = v->value;
        if (il == 4 && memcmp(v->why, "zset", 4) == 0) { /* a shared lock: its live holders */
            long long n = v->why[il] == 0x1f ? number(v->why + il + 1, strlen(v->why + il + 1)) : -1;
            if (n >= 0 && (out->holders < 0 || n < out->holders)) out->holders = n;
            snprintf(out->kind, sizeof out->kind, "shared");
        } else if (!out->has_details && v->why[il] == 0x1f) {
            parse_details(v->why + il + 1, out);
        }
    }
    if (out->ttl_ms == INT64_MAX) out->ttl_ms = -1;
    if (out->holders >= 0 && list_keep(&ls, o->quorum, out) != 0) {
        o->status = RL_NOMEM;
        snprintf(o->msg, sizeof o->msg, "out of memory");
    }
done:
    pthread_mutex_unlock(&c->mu);
    free(ls.l);
    free(votes);
    free(key);
    if (o->status != RL_OK) rl_holder_clear(out);
    return o->status;
}
