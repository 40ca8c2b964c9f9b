/* rl_fleet: the locks and waiters on every node, read with SCAN (see
 * rl_fleet.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_fleet.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_round.h"
#include "rl_scripts.h"
#include "rl_shared.h"
#include "rl_wait.h"

/* What one node said of one name: a lock holder ('x', 'f', 'z'), a live
 * entry of its fair queue ('q'), a writer marker ('w') or subscribers to
 * its release channel ('s'). */
typedef struct entry {
    size_t name, namelen;   /* in the reader's arena: an offset while it grows */
    const char *p;          /* then the name itself (make_rows) */
    char code;
    char set;               /* 'x': the token is a set's */
    char id[40];            /* lock holders: the SHA1 of the token; 'q': the entry */
    int node;               /* index into the client's nodes */
    int details;            /* index into the reader's details, or -1 */
    int64_t ttl_ms;
    long long holders, max_holders, subs;
    long long queued;       /* 'q': the live entries of the name's queue on the node */
    int64_t since;          /* 'q': the wall-clock ms the wait began */
} entry;

typedef struct reader {
    size_t prefixlen;
    const char *prefix;
    entry *e;
    int n, cap;
    rl_holder_entry *det;
    int ndet, capdet;
    char *arena;
    size_t alen, acap;
    char (*next)[24];       /* per node: the cursor its last step answered */
    long long keys;
    int full, oom;
} reader;

/* p (an array of *cap items of size bytes) with room for need items: p
 * itself, a larger copy (*cap updated), or NULL without memory (p is then
 * unchanged). */
static void *grow(void *p, int *cap, int need, size_t size) {
    if (need <= *cap) return p;
    int n = *cap ? *cap * 2 : 256;
    while (n < need) n *= 2;
    void *q = realloc(p, (size_t)n * size);
    if (q) *cap = n;
    return q;
}

/* A new entry for name (len bytes) from node, or NULL (full, or no memory). */
static entry *add(reader *rd, int node, char code, const char *name, size_t len) {
    if (rd->full || rd->oom) return NULL;
    if (rd->n == RL_FLEET_ENTRIES_MAX || rd->alen + len > RL_FLEET_NAMES_MAX) {
        rd->full = 1;
        return NULL;
    }
    entry *more = grow(rd->e, &rd->cap, rd->n + 1, sizeof *rd->e);
    if (!more) {
        rd->oom = 1;
        return NULL;
    }
    rd->e = more;
    if (rd->alen + len > rd->acap) {
        size_t n = rd->acap ? rd->acap * 2 : 4096;
        while (n < rd->alen + len) n *= 2;
        char *a = realloc(rd->arena, n);
        if (!a) {
            rd->oom = 1;
            return NULL;
        }
        rd->arena = a;
        rd->acap = n;
    }
    entry *e = &rd->e[rd->n++];
    memset(e, 0, sizeof *e);
    memcpy(rd->arena + rd->alen, name, len);
    e->name = rd->alen;
    e->namelen = len;
    rd->alen += len;
    e->code = code;
    e->node = node;
    e->details = -1;
    e->ttl_ms = -1;
    e->holders = e->max_holders = -1;
    return e;
}

/* Parses details d (a reply element: a string, or nil) for entry e. */
static void add_details(reader *rd, entry *e, const rl_reply *d) {
    if (d->type != REDIS_REPLY_STRING || d->len >= RL_HOLDER_DETAILS_MAX) return;
    rl_holder_entry *more = grow(rd->det, &rd->capdet, rd->ndet + 1, sizeof *rd->det);
    if (!more) {
        rd->oom = 1;
        return;
    }
    rd->det = more;
    rl_holder_entry *h = &rd->det[rd->ndet];
    char kind[16];
    if (rl_holder_parse(d->str, d->len, h, kind, sizeof kind) != 0) return;
    e->details = rd->ndet++;
}

static int is_int(const rl_reply *r) { return r->type == REDIS_REPLY_INTEGER; }

/* A fair queue's entry: RL_QUEUE_ID_HEX hex digits, ':', 'x' or 's'. */
static int is_queue_entry(const rl_reply *r) {
    return r->type == REDIS_REPLY_STRING && r->len == RL_QUEUE_ID_HEX + 2 &&
           strspn(r->str, "0123456789abcdef") == RL_QUEUE_ID_HEX && r->str[RL_QUEUE_ID_HEX] == ':' &&
           (r->str[RL_QUEUE_ID_HEX + 1] == 'x' || r->str[RL_QUEUE_ID_HEX + 1] == 's');
}

static int is_sha1(const rl_reply *r) {
    return r->type == REDIS_REPLY_STRING && r->len == 40 && strspn(r->str, "0123456789abcdef") == 40;
}

/* The name of key k (its prefix taken off, and suffix when given), or NULL. */
static const char *name_of(const reader *rd, const rl_reply *k, const char *suffix, size_t *len) {
    size_t sl = suffix ? strlen(suffix) : 0;
    if (k->type != REDIS_REPLY_STRING || k->len <= rd->prefixlen + sl ||
        memcmp(k->str, rd->prefix, rd->prefixlen) != 0 ||
        (sl && memcmp(k->str + k->len - sl, suffix, sl) != 0))
        return NULL;
    *len = k->len - rd->prefixlen - sl;
    if (*len > RL_RESOURCE_MAX) return NULL;
    return k->str + rd->prefixlen;
}

/* One entry of a step's answer (see RL_SCRIPT_FLEET_SCAN); what is not in
 * its shape is skipped, never trusted. */
static void read_entry(reader *rd, int node, const rl_reply *x) {
    if (x->type != REDIS_REPLY_ARRAY || x->elements < 3 || x->element[1]->type != REDIS_REPLY_STRING ||
        x->element[1]->len != 1 || !is_int(x->element[2]))
        return;
    const rl_reply *const *el = (const rl_reply *const *)x->element;
    char code = el[1]->str[0];
    size_t len;
    const char *name = name_of(rd, el[0], code == 'w' ? RL_WRITER_SUFFIX : NULL, &len);
    if (!name) return;
    if ((code == 'w' || code == 's') && x->elements == 3) {
        if (code == 's' && el[2]->integer <= 0) return;
        entry *e = add(rd, node, code, name, len);
        if (!e) return;
        if (code == 'w') e->ttl_ms = el[2]->integer;
        else e->subs = el[2]->integer;
    } else if ((code == 'x' || code == 'f') && x->elements == 6 && is_sha1(el[3]) && is_int(el[5])) {
        entry *e = add(rd, node, code, name, len);
        if (!e) return;
        memcpy(e->id, el[3]->str, 40);
        e->ttl_ms = el[2]->integer;
        e->set = code == 'x' && el[5]->integer == 1;
        if (code == 'x') add_details(rd, e, el[4]);
    } else if (code == 'z' && x->elements == 6 && is_int(el[3]) && is_int(el[4]) && el[3]->integer >= 0 &&
               el[4]->integer >= 0 && el[5]->type == REDIS_REPLY_ARRAY) {
        const rl_reply *l = el[5];
        for (size_t i = 0; i + 2 < l->elements && i < 3 * (size_t)RL_FLEET_HOLDERS_MAX; i += 3) {
            if (!is_sha1(l->element[i]) || !is_int(l->element[i + 1]) || l->element[i + 1]->integer <= 0) continue;
            entry *e = add(rd, node, 'z', name, len);
            if (!e) return;
            memcpy(e->id, l->element[i]->str, 40);
            e->ttl_ms = l->element[i + 1]->integer;
            e->holders = el[3]->integer;
            e->max_holders = el[4]->integer;
            add_details(rd, e, l->element[i + 2]);
        }
    } else if (code == 'q' && x->elements == 4 && el[2]->integer > 0 && el[3]->type == REDIS_REPLY_ARRAY) {
        const rl_reply *l = el[3];
        for (size_t i = 0; i + 1 < l->elements && i < 2 * (size_t)RL_FLEET_HOLDERS_MAX; i += 2) {
            if (!is_queue_entry(l->element[i]) || !is_int(l->element[i + 1]) || l->element[i + 1]->integer < 0)
                continue;
            entry *e = add(rd, node, 'q', name, len);
            if (!e) return;
            memcpy(e->id, l->element[i]->str, l->element[i]->len);
            e->queued = el[2]->integer;
            e->since = l->element[i + 1]->integer;
        }
    }
}

/* The round's inspect: reads a step's answer (a yes, rl_vote checked its
 * cursor and count). */
static int step_inspect(void *ctx, int node, int state, const rl_reply *rep, char *why, size_t whylen) {
    (void)why, (void)whylen;
    reader *rd = ctx;
    if (state != RL_V_YES) return 0;
    const rl_reply *cur = rep->element[0];
    memcpy(rd->next[node], cur->str, cur->len);
    rd->next[node][cur->len] = '\0';
    if (rep->element[1]->integer > 0) rd->keys += rep->element[1]->integer;
    for (size_t i = 2; i < rep->elements; i++) read_entry(rd, node, rep->element[i]);
    return 0;
}

/* ---- from entries to rows ---- */

static int name_cmp(const entry *a, const entry *b) {
    size_t n = a->namelen < b->namelen ? a->namelen : b->namelen;
    int k = memcmp(a->p, b->p, n);
    if (k) return k;
    return a->namelen < b->namelen ? -1 : a->namelen > b->namelen;
}

/* By name, code, id, node. */
static int entry_cmp(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    int k = name_cmp(a, b);
    if (k) return k;
    if (a->code != b->code) return a->code < b->code ? -1 : 1;
    k = memcmp(a->id, b->id, 40);
    if (k) return k;
    return (a->node > b->node) - (a->node < b->node);
}

static int is_lock(char code) { return code == 'x' || code == 'f' || code == 'z'; }

static int same_group(const entry *a, const entry *b) {
    return name_cmp(a, b) == 0 && a->code == b->code &&
           ((!is_lock(a->code) && a->code != 'q') || memcmp(a->id, b->id, 40) == 0);
}

/* A name's queue entries in the queue's order: by the time the wait began,
 * entry, node. */
static int queue_cmp(const void *pa, const void *pb) {
    const entry *a = pa, *b = pb;
    if (a->since != b->since) return a->since < b->since ? -1 : 1;
    int k = memcmp(a->id, b->id, 40);
    if (k) return k;
    return (a->node > b->node) - (a->node < b->node);
}

/* Puts the queue entries of one name (e[0..n), sorted by entry) in the
 * queue's order, each entry's time the earliest any node gave (a node
 * cannot be trusted to agree), and counts them: *entries distinct
 * entries, *most the most live on one node. */
static void order_queue(entry *e, int n, long long *entries, long long *most) {
    *entries = *most = 0;
    for (int i = 0, j; i < n; i = j) {
        int64_t since = e[i].since;
        for (j = i; j < n && memcmp(e[j].id, e[i].id, 40) == 0; j++)
            if (e[j].since < since) since = e[j].since;
        for (int k = i; k < j; k++) e[k].since = since;
        (*entries)++;
    }
    for (int i = 0; i < n; i++)
        if (e[i].queued > *most) *most = e[i].queued;
    qsort(e, (size_t)n, sizeof *e, queue_cmp);
}

/* A lock row's first entry and the SHA1 it is numbered by. */
typedef struct idref {
    const char *id;
    int row;
} idref;

static int idref_cmp(const void *pa, const void *pb) {
    const idref *a = pa, *b = pb;
    int k = memcmp(a->id, b->id, 40);
    return k ? k : (a->row > b->row) - (a->row < b->row);
}

static int row_cmp_first(const void *pa, const void *pb) {
    int a = *(const int *)pa, b = *(const int *)pb;
    return (a > b) - (a < b);
}

/* Numbers the lock rows by token: rows of one token share a number, given
 * in the order of their first row. */
static int number_holders(rl_fleet_lock *rows, int n, const char *const *ids) {
    idref *refs = malloc((size_t)(n ? n : 1) * sizeof *refs);
    int *first = malloc((size_t)(n ? n : 1) * sizeof *first), *of = malloc((size_t)(n ? n : 1) * sizeof *of);
    if (!refs || !first || !of) {
        free(refs), free(first), free(of);
        return -1;
    }
    for (int i = 0; i < n; i++) refs[i] = (idref){.id = ids[i], .row = i};
    qsort(refs, (size_t)n, sizeof *refs, idref_cmp);
    int runs = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || memcmp(refs[i].id, refs[i - 1].id, 40) != 0) first[runs++] = refs[i].row;
        of[refs[i].row] = first[runs - 1];
    }
    qsort(first, (size_t)runs, sizeof *first, row_cmp_first);
    for (int i = 0; i < n; i++) {
        int lo = 0, hi = runs - 1;
        while (lo < hi) { /* the position of row of[i] among the first rows */
            int mid = (lo + hi) / 2;
            if (first[mid] < of[i]) lo = mid + 1;
            else hi = mid;
        }
        rows[i].holder_id = lo + 1;
    }
    free(refs), free(first), free(of);
    return 0;
}

static int lock_row_cmp(const void *pa, const void *pb) {
    const rl_fleet_lock *a = pa, *b = pb;
    size_t n = a->reslen < b->reslen ? a->reslen : b->reslen;
    int k = memcmp(a->res, b->res, n);
    if (k) return k;
    if (a->reslen != b->reslen) return a->reslen < b->reslen ? -1 : 1;
    return (a->holder_id > b->holder_id) - (a->holder_id < b->holder_id);
}

/* Turns the entries into rows. Caller holds c->mu (the quorums). */
static int make_rows(rl_client *c, reader *rd, const int64_t *node_ids, rl_fleet *out) {
    for (int i = 0; i < rd->n; i++) rd->e[i].p = rd->arena + rd->e[i].name;
    if (rd->n) qsort(rd->e, (size_t)rd->n, sizeof *rd->e, entry_cmp);
    size_t count = rd->n ? (size_t)rd->n : 1;
    out->locks = calloc(count, sizeof *out->locks);
    out->waiters = calloc(count, sizeof *out->waiters);
    out->ids = malloc(count * sizeof *out->ids);
    const char **ids = malloc(count * sizeof *ids);
    if (!out->locks || !out->waiters || !out->ids || !ids) {
        free(ids);
        return -1;
    }
    int nid = 0, quorum = rl_client_quorum(c);
    long long fewest = -1; /* a shared name's live holders, the fewest over its nodes */
    long long queued = 0;  /* a queued name's waiters */
    int position = 0, qend = 0;
    for (int i = 0; i < rd->n;) {
        if (rd->e[i].code == 'q' && i >= qend) { /* the first entry of a name's queue */
            for (qend = i; qend < rd->n && rd->e[qend].code == 'q' && name_cmp(&rd->e[qend], &rd->e[i]) == 0;)
                qend++;
            long long entries, most;
            order_queue(rd->e + i, qend - i, &entries, &most);
            queued = entries > most ? entries : most;
            position = 0;
        }
        int j = i;
        while (j < rd->n && same_group(&rd->e[i], &rd->e[j])) j++;
        const entry *g = &rd->e[i];
        if (g->code == 'q' && ++position > RL_FLEET_HOLDERS_MAX) { /* not listed: its place may be wrong */
            i = j;
            continue;
        }
        if (g->code == 'z' && (i == 0 || name_cmp(&rd->e[i - 1], g) != 0 || rd->e[i - 1].code != 'z')) {
            fewest = -1; /* the first holder of a shared name: its count over every holder's entries */
            for (int k = i; k < rd->n && rd->e[k].code == 'z' && name_cmp(&rd->e[k], g) == 0; k++)
                if (fewest < 0 || rd->e[k].holders < fewest) fewest = rd->e[k].holders;
        }
        int64_t *nodes = out->ids + nid, ttl = -1;
        int nn = 0, det = -1, set = 0;
        long long most_subs = 0;
        for (int k = i; k < j; k++) {
            const entry *e = &rd->e[k];
            if (nn == 0 || nodes[nn - 1] != node_ids[e->node]) nodes[nn++] = node_ids[e->node];
            if (e->ttl_ms >= 0 && (ttl < 0 || e->ttl_ms < ttl)) ttl = e->ttl_ms;
            if (det < 0) det = e->details;
            set |= e->set;
            if (e->subs > most_subs) most_subs = e->subs;
        }
        nid += nn;
        if (is_lock(g->code)) {
            rl_fleet_lock *l = &out->locks[out->nlocks];
            ids[out->nlocks++] = g->id;
            l->res = g->p;
            l->reslen = g->namelen;
            if (g->code == 'z') l->kind = RL_FLEET_SHARED;
            else if (g->code == 'f') l->kind = RL_FLEET_FOREIGN;
            else l->kind = set ? RL_FLEET_SET : RL_FLEET_EXCLUSIVE;
            l->nodes = nn;
            l->node_ids = nodes;
            l->ttl_ms = ttl;
            l->holders = g->code == 'z' ? fewest : -1;
            l->max_holders = g->code == 'z' ? g->max_holders : -1;
            l->quorum = g->code == 'z' ? rl_shared_client_quorum(c, g->max_holders) : quorum;
            l->on_quorum = nn >= l->quorum;
            if (det >= 0) {
                l->has_details = 1;
                l->d = rd->det[det];
            }
        } else {
            rl_fleet_waiter *w = &out->waiters[out->nwaiters++];
            w->res = g->p;
            w->reslen = g->namelen;
            w->kind = g->code == 'w' ? RL_FLEET_WRITER : g->code == 'q' ? RL_FLEET_QUEUED : RL_FLEET_SUBSCRIBED;
            w->nodes = nn;
            w->node_ids = nodes;
            w->ttl_ms = g->code == 'w' ? ttl : -1;
            w->waiters = g->code == 'w' ? -1 : g->code == 'q' ? queued : most_subs;
            w->since_ms = -1;
            if (g->code == 'q') {
                w->position = position;
                w->since_ms = g->since;
                memcpy(w->entry, g->id, RL_QUEUE_ID_HEX + 2);
                w->exclusive = g->id[RL_QUEUE_ID_HEX + 1] == 'x';
                w->more = (j == qend || position == RL_FLEET_HOLDERS_MAX) && queued > position;
            }
        }
        i = j;
    }
    int rc = number_holders(out->locks, out->nlocks, ids);
    free(ids);
    out->names = rd->arena; /* the rows point into it */
    rd->arena = NULL;
    qsort(out->locks, (size_t)out->nlocks, sizeof *out->locks, lock_row_cmp);
    return rc;
}

/* ---- the read ---- */

/* The key prefix as a SCAN MATCH pattern: its glob characters escaped,
 * then '*'. Owned by the caller. */
static char *match_pattern(const char *prefix, size_t *len) {
    size_t pl = strlen(prefix), n = 0;
    char *p = malloc(2 * pl + 2);
    if (!p) return NULL;
    for (size_t i = 0; i < pl; i++) {
        if (strchr("*?[]\\", prefix[i])) p[n++] = '\\';
        p[n++] = prefix[i];
    }
    p[n++] = '*';
    p[n] = '\0';
    *len = n;
    return p;
}

/* Appends to the text in buf (size bytes), cut at its end. */
static void appendf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void appendf(char *buf, size_t size, const char *fmt, ...) {
    size_t used = strlen(buf);
    if (used + 1 >= size) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, size - used, fmt, ap);
    va_end(ap);
}

/* Adds "node 2 host:port: why" to the text in buf (at most
 * RL_ROUND_FAILURES_SHOWN of them; *more counts the rest). */
static void tell(char *buf, size_t buflen, int *shown, int *more, const rl_node *node, const char *why) {
    if (*shown == RL_ROUND_FAILURES_SHOWN) {
        (*more)++;
        return;
    }
    char name[320];
    rl_node_name(node, name, sizeof name);
    appendf(buf, buflen, "%s%s: %s", *shown ? "; " : "", name, why);
    (*shown)++;
}

enum { ST_ACTIVE, ST_DONE, ST_CUT, ST_FAILED };

/* out->complete, nodes_read, cut and why from each node's state (why[i]:
 * a failed node's reason): "nodes 1, 3 have more than max_keys (10000)
 * keys under the key prefix; node 2 127.0.0.1:6380: no answer within 50
 * ms". */
static void describe(const rl_client *c, const int *state, char (*why)[RL_ERR_REASON_MAX], int64_t max_keys,
                     rl_fleet *out) {
    int n = c->n, cut = 0;
    for (int i = 0; i < n; i++) {
        out->nodes_read += state[i] == ST_DONE || state[i] == ST_CUT;
        out->complete &= state[i] == ST_DONE;
        cut += state[i] == ST_CUT;
    }
    out->cut = cut > 0;
    if (cut) {
        appendf(out->why, sizeof out->why, "node%s ", cut > 1 ? "s" : "");
        for (int i = 0, k = 0; i < n; i++)
            if (state[i] == ST_CUT)
                appendf(out->why, sizeof out->why, "%s%lld", k++ ? ", " : "", (long long)c->nodes[i]->id);
        appendf(out->why, sizeof out->why, " %s more than max_keys (%lld) keys under the key prefix",
                cut > 1 ? "have" : "has", (long long)max_keys);
    }
    int shown = 0, more = 0;
    for (int i = 0; i < n; i++) {
        if (state[i] == ST_DONE || state[i] == ST_CUT) continue;
        if (state[i] == ST_ACTIVE)
            snprintf(why[i], sizeof why[i], "not read to the end: the read gathered its most (%d entries, or "
                     "%d MiB of names)", RL_FLEET_ENTRIES_MAX, RL_FLEET_NAMES_MAX >> 20);
        if (shown == 0 && cut) appendf(out->why, sizeof out->why, "; ");
        tell(out->why, sizeof out->why, &shown, &more, c->nodes[i], why[i]);
    }
    if (more) appendf(out->why, sizeof out->why, "; and %d more nodes (see redlock_nodes.last_error)", more);
}

void rl_fleet_free(rl_fleet *f) {
    free(f->locks);
    free(f->waiters);
    free(f->names);
    free(f->ids);
    memset(f, 0, sizeof *f);
}

/* The node list is the one the read started with (ids and configurations). */
static int same_nodes(const rl_client *c, int n, const int64_t *ids, const uint64_t *cfgs) {
    if (c->n != n) return 0;
    for (int i = 0; i < n; i++)
        if (c->nodes[i]->id != ids[i] || c->nodes[i]->cfg != cfgs[i]) return 0;
    return 1;
}

rl_status rl_fleet_read(rl_client *c, int64_t max_keys, rl_fleet *out, rl_outcome *o) {
    memset(out, 0, sizeof *out);
    memset(o, 0, sizeof *o);
    out->complete = 1;
    if (max_keys == 0) max_keys = RL_FLEET_MAX_KEYS;
    if (max_keys < 0 || max_keys > RL_FLEET_MAX_KEYS_LIMIT) {
        o->status = RL_MISUSE;
        snprintf(o->msg, sizeof o->msg, "max_keys must be a whole number from 1 to %d (default %d)",
                 RL_FLEET_MAX_KEYS_LIMIT, RL_FLEET_MAX_KEYS);
        return o->status;
    }
    out->max_keys = max_keys;
    pthread_mutex_lock(&c->mu);
    if (rl_lock_check_nodes(c, o) != RL_OK) {
        pthread_mutex_unlock(&c->mu);
        return o->status;
    }
    int n = c->n;
    size_t pl = strlen(c->set.key_prefix), patlen = 0;
    reader rd = {.prefixlen = pl};
    char *prefix = malloc(pl + 1), *pattern = match_pattern(c->set.key_prefix, &patlen);
    int64_t *node_ids = calloc((size_t)n, sizeof *node_ids), *sent = calloc((size_t)n, sizeof *sent);
    uint64_t *cfgs = calloc((size_t)n, sizeof *cfgs);
    int *state = calloc((size_t)n, sizeof *state);
    unsigned char *only = calloc((size_t)n, 1);
    rl_vote *votes = calloc((size_t)n, sizeof *votes);
    char (*why)[RL_ERR_REASON_MAX] = calloc((size_t)n, sizeof *why);
    char (*count)[24] = calloc((size_t)n, sizeof *count);
    const char *(*argv)[10] = calloc((size_t)n, sizeof *argv);
    size_t (*lens)[10] = calloc((size_t)n, sizeof *lens);
    const char *const **node_argv = calloc((size_t)n, sizeof *node_argv);
    const size_t **node_lens = calloc((size_t)n, sizeof *node_lens);
    rd.next = calloc((size_t)n, sizeof *rd.next);
    if (!prefix || !pattern || !node_ids || !sent || !cfgs || !state || !only || !votes || !why || !count ||
        !argv || !lens || !node_argv || !node_lens || !rd.next) {
        o->status = RL_NOMEM;
        snprintf(o->msg, sizeof o->msg, "out of memory");
        goto done;
    }
    memcpy(prefix, c->set.key_prefix, pl + 1);
    rd.prefix = prefix;
    char most[16];
    snprintf(most, sizeof most, "%d", RL_FLEET_HOLDERS_MAX);
    for (int i = 0; i < n; i++) {
        node_ids[i] = c->nodes[i]->id;
        cfgs[i] = c->nodes[i]->cfg;
        memcpy(rd.next[i], "0", 2);
        const char *a[10] = {"EVAL", RL_SCRIPT_FLEET_SCAN, "0", rd.next[i], pattern, count[i], prefix, most,
                             RL_WRITER_SUFFIX, RL_RELEASED_SUFFIX};
        memcpy(argv[i], a, sizeof a);
        node_argv[i] = argv[i];
        node_lens[i] = lens[i];
    }
    o->status = RL_OK;
    int answered = 0;
    for (;;) {
        int asked = 0;
        for (int i = 0; i < n; i++) {
            only[i] = state[i] == ST_ACTIVE;
            if (!only[i]) continue;
            int64_t left = max_keys - sent[i];
            snprintf(count[i], sizeof count[i], "%lld", (long long)(left < RL_FLEET_BATCH ? left : RL_FLEET_BATCH));
            for (int a = 0; a < 10; a++) lens[i][a] = strlen(argv[i][a]);
            asked++;
        }
        if (!asked) break;
        rl_round r = {.kind = RL_K_FLEET, .argc = 10, .argv = argv[0], .lens = lens[0], .only = only,
                      .node_argv = node_argv, .node_lens = node_lens, .wait_all = 1, .quorum = n + 1,
                      .votes = votes, .inspect = step_inspect, .inspect_ctx = &rd};
        rl_round_run(c, &r);
        for (int i = 0; i < n; i++) {
            if (!only[i]) continue;
            const rl_vote *v = &votes[i];
            if (v->state != RL_V_YES) {
                state[i] = ST_FAILED;
                if (v->down_next_ms > 0) snprintf(why[i], sizeof why[i], "%.200s (down)", c->nodes[i]->last_error);
                else snprintf(why[i], sizeof why[i], "%s", v->why[0] ? v->why : "no answer");
                continue;
            }
            answered = 1;
            sent[i] += atoll(count[i]);
            if (strcmp(rd.next[i], "0") == 0) state[i] = ST_DONE;
            else if (sent[i] >= max_keys) state[i] = ST_CUT;
        }
        if (rd.full || rd.oom) break;
        /* Between steps the keeper thread may extend this connection's locks. */
        pthread_mutex_unlock(&c->mu);
        int stop = c->cancel && c->cancel(c->cancel_ctx);
        pthread_mutex_lock(&c->mu);
        if (stop) {
            o->status = RL_INTERRUPTED;
            snprintf(o->msg, sizeof o->msg, "interrupted (sqlite3_interrupt) while reading the nodes' keys; "
                                            "nothing was changed on them");
            goto done;
        }
        if (!same_nodes(c, n, node_ids, cfgs)) {
            o->status = RL_MISUSE;
            snprintf(o->msg, sizeof o->msg, "the node list changed while the nodes' keys were read");
            goto done;
        }
    }
    if (rd.oom) {
        o->status = RL_NOMEM;
        snprintf(o->msg, sizeof o->msg, "out of memory");
        goto done;
    }
    if (!answered) {
        o->status = RL_NO_QUORUM;
        int shown = 0, more = 0;
        snprintf(o->msg, sizeof o->msg, "no node could be read: ");
        for (int i = 0; i < n; i++) tell(o->msg, sizeof o->msg, &shown, &more, c->nodes[i], why[i]);
        if (more) appendf(o->msg, sizeof o->msg, "; and %d more (see redlock_nodes.last_error)", more);
        goto done;
    }
    out->keys = rd.keys;
    describe(c, state, why, max_keys, out);
    if (make_rows(c, &rd, node_ids, out) != 0) {
        o->status = RL_NOMEM;
        snprintf(o->msg, sizeof o->msg, "out of memory");
    }
done:
    pthread_mutex_unlock(&c->mu);
    free(prefix), free(pattern), free(node_ids), free(sent), free(cfgs), free(state), free(only), free(votes);
    free(why), free(count), free(argv), free(lens), free(node_argv), free(node_lens), free(rd.next);
    free(rd.e), free(rd.det), free(rd.arena);
    return o->status;
}
