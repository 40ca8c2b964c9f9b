/* redlock_stats and redlock_lock_stats: eponymous, read-only virtual tables
 * of the engine's counters. redlock_stats has one row per node of this
 * connection (commands, votes, errors, timeouts, times marked down, reply
 * latency p50/p99 over the latest RL_LAT_WINDOW replies, last error);
 * redlock_lock_stats one row per lock name this connection has used (at
 * most RL_LOCKSTATS_MAX). Rows are copied when a scan starts.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_stats.h"

#include <stdlib.h>
#include <string.h>

#include "redlock_vtab.h"
#include "rl_stats.h"

SQLITE_EXTENSION_INIT3

enum { NODE_STATS, LOCK_STATS };

typedef struct stats_vtab {
    redlock_vtab t; /* first: the state and db */
    int kind;
} stats_vtab;

typedef struct node_row {
    int64_t id;
    rl_node_stats s;
    int64_t p50, p99;
    char last_error[256];
} node_row;

typedef struct stats_cursor {
    sqlite3_vtab_cursor base;
    node_row *nodes;     /* NODE_STATS */
    rl_lockstat *locks;  /* LOCK_STATS */
    int n, i;
} stats_cursor;

static const char *const schemas[2] = {
    "CREATE TABLE x(id INTEGER, calls INTEGER, yes INTEGER, no INTEGER, errors INTEGER, timeouts INTEGER, "
    "down INTEGER, p50_ms REAL, p99_ms REAL, last_error TEXT)",
    "CREATE TABLE x(resource TEXT, acquisitions INTEGER, refusals INTEGER, wait_total_ms INTEGER, "
    "wait_max_ms INTEGER, hold_max_ms INTEGER, lost INTEGER)",
};

static int stats_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err,
                         int kind) {
    int rc = redlock_vtab_connect(db, aux, argc, argv, err, schemas[kind], sizeof(stats_vtab), out);
    if (rc == SQLITE_OK) ((stats_vtab *)*out)->kind = kind;
    return rc;
}

static int node_stats_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                              char **err) {
    return stats_connect(db, aux, argc, argv, out, err, NODE_STATS);
}

static int lock_stats_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                              char **err) {
    return stats_connect(db, aux, argc, argv, out, err, LOCK_STATS);
}

static int stats_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
    (void)vt;
    info->estimatedCost = 10;
    info->estimatedRows = 10;
    return SQLITE_OK;
}

static int stats_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    (void)vt;
    stats_cursor *cur = sqlite3_malloc(sizeof *cur);
    if (!cur) return SQLITE_NOMEM;
    memset(cur, 0, sizeof *cur);
    *out = &cur->base;
    return SQLITE_OK;
}

static void free_rows(stats_cursor *cur) {
    free(cur->nodes);
    rl_stats_lock_copy_free(cur->locks, cur->n);
    cur->nodes = NULL;
    cur->locks = NULL;
    cur->n = cur->i = 0;
}

static int stats_close(sqlite3_vtab_cursor *c) {
    free_rows((stats_cursor *)c);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int stats_filter(sqlite3_vtab_cursor *c, int idx, const char *idxStr, int argc, sqlite3_value **argv) {
    (void)idx;
    (void)idxStr;
    (void)argc;
    (void)argv;
    stats_cursor *cur = (stats_cursor *)c;
    stats_vtab *vt = (stats_vtab *)c->pVtab;
    rl_session *session = vt->t.st->session;
    free_rows(cur);
    rl_session_check_fork(session);
    if (vt->kind == LOCK_STATS) {
        int64_t untracked;
        int n = rl_session_lock_stats(session, &cur->locks, &untracked);
        if (n < 0) return SQLITE_NOMEM;
        cur->n = n;
        return SQLITE_OK;
    }
    rl_client *cl = rl_session_client(session);
    rl_session_settle(session); /* the replies still owed count too */
    int n = rl_client_node_count(cl);
    if (n == 0) return SQLITE_OK;
    cur->nodes = calloc((size_t)n, sizeof *cur->nodes);
    if (!cur->nodes) return SQLITE_NOMEM;
    for (int i = 0; i < n; i++) {
        node_row *row = &cur->nodes[cur->n];
        if (rl_client_node_stats(cl, i, &row->id, &row->s, row->last_error, sizeof row->last_error) != 0) break;
        rl_stats_percentiles(&row->s, &row->p50, &row->p99);
        cur->n++;
    }
    return SQLITE_OK;
}

static int stats_next(sqlite3_vtab_cursor *c) {
    ((stats_cursor *)c)->i++;
    return SQLITE_OK;
}

static int stats_eof(sqlite3_vtab_cursor *c) {
    stats_cursor *cur = (stats_cursor *)c;
    return cur->i >= cur->n;
}

static void result_or_null(sqlite3_context *ctx, int64_t v) {
    if (v < 0) sqlite3_result_null(ctx);
    else sqlite3_result_int64(ctx, v);
}

static int stats_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) {
    stats_cursor *cur = (stats_cursor *)c;
    if (cur->locks) {
        const rl_lockstat *l = &cur->locks[cur->i];
        const int64_t v[7] = {0, l->acquisitions, l->refusals, l->wait_total_ms, l->wait_max_ms, l->hold_max_ms, l->lost};
        if (col == 0) sqlite3_result_text(ctx, l->res, (int)l->reslen, SQLITE_TRANSIENT);
        else if (col > 0 && col < 7) sqlite3_result_int64(ctx, v[col]);
        return SQLITE_OK;
    }
    const node_row *r = &cur->nodes[cur->i];
    const int64_t v[9] = {r->id, r->s.calls, r->s.yes, r->s.no, r->s.errors, r->s.timeouts, r->s.down, r->p50, r->p99};
    if (col == 7 || col == 8) { /* kept in µs, shown in ms as every time of the extension */
        if (v[col] < 0) sqlite3_result_null(ctx);
        else sqlite3_result_double(ctx, (double)v[col] / 1000.0);
    } else if (col >= 0 && col < 9) result_or_null(ctx, v[col]);
    else if (col == 9) {
        if (r->last_error[0]) sqlite3_result_text(ctx, r->last_error, -1, SQLITE_TRANSIENT);
        else sqlite3_result_null(ctx);
    }
    return SQLITE_OK;
}

static int stats_rowid(sqlite3_vtab_cursor *c, sqlite_int64 *rowid) {
    *rowid = ((stats_cursor *)c)->i + 1;
    return SQLITE_OK;
}

#define STATS_MODULE(connect_fn)                                                                               \
    {                                                                                                          \
        .iVersion = 1, .xCreate = 0, .xConnect = connect_fn, .xBestIndex = stats_best_index,                   \
        .xDisconnect = redlock_vtab_disconnect, .xDestroy = redlock_vtab_disconnect, .xOpen = stats_open,      \
        .xClose = stats_close, .xFilter = stats_filter, .xNext = stats_next, .xEof = stats_eof,                \
        .xColumn = stats_column, .xRowid = stats_rowid,                                                        \
    }

static sqlite3_module node_stats_module = STATS_MODULE(node_stats_connect);
static sqlite3_module lock_stats_module = STATS_MODULE(lock_stats_connect);

int redlock_register_stats_tables(sqlite3 *db, redlock_state *st) {
    int rc = sqlite3_create_module_v2(db, "redlock_stats", &node_stats_module, redlock_state_ref(st),
                                      redlock_state_unref);
    if (rc != SQLITE_OK) return rc;
    return sqlite3_create_module_v2(db, "redlock_lock_stats", &lock_stats_module, redlock_state_ref(st),
                                    redlock_state_unref);
}
