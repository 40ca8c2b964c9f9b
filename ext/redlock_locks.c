/* redlock_locks: the eponymous, read-only virtual table of the locks this
 * connection holds. Rows are copied when a scan starts, so
 * SELECT redlock_release(resource) FROM redlock_locks works.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_ext.h"

#include <string.h>

#include "rl_clock.h"

SQLITE_EXTENSION_INIT3

enum { COL_RESOURCE, COL_TOKEN, COL_TTL, COL_VALIDITY, COL_HOLDS, COL_FENCE, COL_NODES, COL_EXTENSIONS, COL_AUTO,
       COL_STATE, COL_LOST_REASON, COL_KIND, COL_MAX_HOLDERS };

typedef struct locks_vtab {
    sqlite3_vtab base;
    redlock_state *st;
} locks_vtab;

typedef struct locks_cursor {
    sqlite3_vtab_cursor base;
    rl_held *rows;
    int n, i;
    int64_t now_us;
} locks_cursor;

static int locks_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err) {
    (void)argc;
    (void)argv;
    (void)err;
    int rc = sqlite3_declare_vtab(db,
                                  "CREATE TABLE x(resource TEXT, token TEXT, ttl_ms INTEGER, validity_ms INTEGER, "
                                  "holds INTEGER, fence INTEGER, nodes INTEGER, extensions INTEGER, "
                                  "auto_extend INTEGER, state TEXT, lost_reason TEXT, kind TEXT, max_holders INTEGER)");
    if (rc != SQLITE_OK) return rc;
    sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
    locks_vtab *vt = sqlite3_malloc(sizeof *vt);
    if (!vt) return SQLITE_NOMEM;
    memset(vt, 0, sizeof *vt);
    vt->st = aux;
    *out = &vt->base;
    return SQLITE_OK;
}

static int locks_disconnect(sqlite3_vtab *vt) {
    sqlite3_free(vt);
    return SQLITE_OK;
}

static int locks_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
    (void)vt;
    info->estimatedCost = 10;
    info->estimatedRows = 10;
    return SQLITE_OK;
}

static int locks_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    (void)vt;
    locks_cursor *cur = sqlite3_malloc(sizeof *cur);
    if (!cur) return SQLITE_NOMEM;
    memset(cur, 0, sizeof *cur);
    *out = &cur->base;
    return SQLITE_OK;
}

static int locks_close(sqlite3_vtab_cursor *c) {
    locks_cursor *cur = (locks_cursor *)c;
    rl_session_snapshot_free(cur->rows, cur->n);
    sqlite3_free(cur);
    return SQLITE_OK;
}

static int locks_filter(sqlite3_vtab_cursor *c, int idx, const char *idxStr, int argc, sqlite3_value **argv) {
    (void)idx;
    (void)idxStr;
    (void)argc;
    (void)argv;
    locks_cursor *cur = (locks_cursor *)c;
    rl_session_snapshot_free(cur->rows, cur->n);
    cur->rows = NULL;
    cur->n = cur->i = 0;
    rl_session_check_fork(((locks_vtab *)c->pVtab)->st->session);
    int n = rl_session_snapshot(((locks_vtab *)c->pVtab)->st->session, &cur->rows);
    if (n < 0) return SQLITE_NOMEM;
    cur->n = n;
    cur->now_us = rl_now_us();
    return SQLITE_OK;
}

static int locks_next(sqlite3_vtab_cursor *c) {
    ((locks_cursor *)c)->i++;
    return SQLITE_OK;
}

static int locks_eof(sqlite3_vtab_cursor *c) {
    locks_cursor *cur = (locks_cursor *)c;
    return cur->i >= cur->n;
}

static int locks_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) {
    locks_cursor *cur = (locks_cursor *)c;
    const rl_held *h = &cur->rows[cur->i];
    int64_t left = h->lost ? 0 : (h->valid_until_us - cur->now_us) / 1000;
    if (left < 0) left = 0;
    switch (col) {
    case COL_RESOURCE: sqlite3_result_text(ctx, h->res, (int)h->reslen, SQLITE_TRANSIENT); break;
    case COL_TOKEN: sqlite3_result_text(ctx, h->token, RL_TOKEN_LEN, SQLITE_TRANSIENT); break;
    case COL_TTL: sqlite3_result_int64(ctx, h->ttl_ms); break;
    case COL_VALIDITY: sqlite3_result_int64(ctx, left); break;
    case COL_HOLDS: sqlite3_result_int(ctx, h->count); break;
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
    }
    return SQLITE_OK;
}

static int locks_rowid(sqlite3_vtab_cursor *c, sqlite_int64 *rowid) {
    *rowid = ((locks_cursor *)c)->i + 1;
    return SQLITE_OK;
}

static sqlite3_module locks_module = {
    .iVersion = 1,
    .xCreate = 0,
    .xConnect = locks_connect,
    .xBestIndex = locks_best_index,
    .xDisconnect = locks_disconnect,
    .xDestroy = locks_disconnect,
    .xOpen = locks_open,
    .xClose = locks_close,
    .xFilter = locks_filter,
    .xNext = locks_next,
    .xEof = locks_eof,
    .xColumn = locks_column,
    .xRowid = locks_rowid,
};

int redlock_register_locks_table(sqlite3 *db, redlock_state *st) {
    return sqlite3_create_module_v2(db, "redlock_locks", &locks_module, redlock_state_ref(st), redlock_state_unref);
}
