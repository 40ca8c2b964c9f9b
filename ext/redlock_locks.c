/* redlock_locks: the eponymous, read-only virtual table of the locks this
 * connection holds. Rows are copied when a scan starts, so
 * SELECT redlock_release(resource) FROM redlock_locks works.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_locks.h"
#include "redlock_vtab.h"

#include <string.h>

SQLITE_EXTENSION_INIT3

#define LOCKS_SCHEMA                                                                                \
    "CREATE TABLE x(resource TEXT, token TEXT, ttl_ms INTEGER, validity_ms INTEGER, holds INTEGER, " \
    "fence INTEGER, nodes INTEGER, extensions INTEGER, auto_extend INTEGER, state TEXT, lost_reason TEXT, "   \
    "kind TEXT, max_holders INTEGER, xact_holds INTEGER)"

enum { COL_RESOURCE, COL_TOKEN, COL_TTL, COL_VALIDITY, COL_HOLDS, COL_FENCE, COL_NODES, COL_EXTENSIONS, COL_AUTO,
       COL_STATE, COL_LOST_REASON, COL_KIND, COL_MAX_HOLDERS, COL_XACT_HOLDS };

typedef struct locks_cursor {
    redlock_cursor c;  /* first: n rows, at i */
    rl_held *rows;
} locks_cursor;

static int locks_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err) {
    return redlock_vtab_connect(db, aux, argc, argv, err, LOCKS_SCHEMA, sizeof(redlock_vtab), out);
}

static int locks_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    (void)vt;
    return redlock_cursor_open(sizeof(locks_cursor), out);
}

static int locks_close(sqlite3_vtab_cursor *c) {
    locks_cursor *cur = (locks_cursor *)c;
    rl_session_snapshot_free(cur->rows, cur->c.n);
    sqlite3_free(cur);
    return SQLITE_OK;
}

static int locks_filter(sqlite3_vtab_cursor *c, int idx, const char *idxStr, int argc, sqlite3_value **argv) {
    (void)idx;
    (void)idxStr;
    (void)argc;
    (void)argv;
    locks_cursor *cur = (locks_cursor *)c;
    rl_session_snapshot_free(cur->rows, cur->c.n);
    cur->rows = NULL;
    cur->c.n = cur->c.i = 0;
    rl_session_check_fork(((redlock_vtab *)c->pVtab)->st->session);
    int n = rl_session_snapshot(((redlock_vtab *)c->pVtab)->st->session, &cur->rows);
    if (n < 0) return SQLITE_NOMEM;
    cur->c.n = n;
    return SQLITE_OK;
}

static int locks_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) {
    locks_cursor *cur = (locks_cursor *)c;
    const rl_held *h = &cur->rows[cur->c.i];
    int64_t left = h->validity_ms;
    switch (col) {
    case COL_RESOURCE: sqlite3_result_text(ctx, h->res, (int)h->reslen, SQLITE_TRANSIENT); break;
    case COL_TOKEN: sqlite3_result_text(ctx, h->token, RL_TOKEN_LEN, SQLITE_TRANSIENT); break;
    case COL_TTL: sqlite3_result_int64(ctx, h->ttl_ms); break;
    case COL_VALIDITY: sqlite3_result_int64(ctx, left); break;
    case COL_HOLDS: sqlite3_result_int64(ctx, h->count); break;
    case COL_FENCE:
        if (h->fence > 0) sqlite3_result_int64(ctx, h->fence);
        else sqlite3_result_null(ctx);
        break;
    case COL_NODES: sqlite3_result_int(ctx, h->yes_nodes); break;
    case COL_EXTENSIONS: sqlite3_result_int64(ctx, h->extensions); break;
    case COL_AUTO: sqlite3_result_int(ctx, h->auto_extend); break;
    case COL_STATE: sqlite3_result_text(ctx, h->lost ? "lost" : left > 0 ? "held" : "expired", -1, SQLITE_STATIC); break;
    case COL_LOST_REASON:
        if (h->lost) {
            char why[sizeof h->lost_why];
            rl_text_clean(why, sizeof why, h->lost_why, strlen(h->lost_why));
            sqlite3_result_text(ctx, why, -1, SQLITE_TRANSIENT);
        }
        else sqlite3_result_null(ctx);
        break;
    case COL_KIND: sqlite3_result_text(ctx, h->kind == RL_KIND_SHARED ? "shared" : "exclusive", -1, SQLITE_STATIC); break;
    case COL_MAX_HOLDERS:
        if (h->kind == RL_KIND_SHARED) sqlite3_result_int64(ctx, h->max_holders);
        else sqlite3_result_null(ctx);
        break;
    case COL_XACT_HOLDS: sqlite3_result_int64(ctx, h->xact_holds); break;
    }
    return SQLITE_OK;
}

static int locks_rowid(sqlite3_vtab_cursor *c, sqlite_int64 *rowid) {
    *rowid = ((locks_cursor *)c)->c.i + 1;
    return SQLITE_OK;
}

static sqlite3_module locks_module = {
    .iVersion = 1,
    .xCreate = 0,
    .xConnect = locks_connect,
    .xBestIndex = redlock_vtab_best_index,
    .xDisconnect = redlock_vtab_disconnect,
    .xDestroy = redlock_vtab_disconnect,
    .xOpen = locks_open,
    .xClose = locks_close,
    .xFilter = locks_filter,
    .xNext = redlock_cursor_next,
    .xEof = redlock_cursor_eof,
    .xColumn = locks_column,
    .xRowid = locks_rowid,
};

int redlock_register_locks_table(sqlite3 *db, redlock_state *st) {
    return sqlite3_create_module_v2(db, "redlock_locks", &locks_module, redlock_state_ref(st), redlock_state_unref);
}
