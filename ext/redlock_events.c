/* redlock_events: the eponymous, read-only virtual table of the last
 * RL_EVENTS_MAX events of this connection, oldest first. The engine keeps
 * them in a ring that the keeper thread writes to as well; the rows are
 * copied out under its mutex when a scan starts.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_events.h"
#include "redlock_vtab.h"

#include <stdlib.h>

SQLITE_EXTENSION_INIT3

#define EVENTS_SCHEMA                                                                                    \
    "CREATE TABLE x(id INTEGER, time_ms INTEGER, age_ms INTEGER, kind TEXT, node_id INTEGER, resource TEXT, " \
    "message TEXT)"

enum { COL_ID, COL_TIME, COL_AGE, COL_KIND, COL_NODE, COL_RESOURCE, COL_MESSAGE };

typedef struct events_cursor {
    redlock_cursor c;  /* first: n rows, at i */
    rl_event_row *rows;
} events_cursor;

/* The kind column: the event's name in SQL (stable: scripts filter on it). */
static const char *kind_name(int kind) {
    switch (kind) {
    case RL_EVENT_NODE_DOWN: return "node_down";
    case RL_EVENT_NODE_UP: return "node_up";
    case RL_EVENT_LOCK_LOST: return "lock_lost";
    case RL_EVENT_NO_QUORUM: return "no_quorum";
    case RL_EVENT_NODE_REFUSED: return "node_refused";
    case RL_EVENT_EXTEND_FAILED: return "extend_failed";
    case RL_EVENT_LOCK_EXPIRED: return "lock_expired";
    default: return "other";
    }
}

static int events_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err) {
    return redlock_vtab_connect(db, aux, argc, argv, err, EVENTS_SCHEMA, sizeof(redlock_vtab), out);
}

static int events_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    (void)vt;
    return redlock_cursor_open(sizeof(events_cursor), out);
}

static int events_close(sqlite3_vtab_cursor *c) {
    free(((events_cursor *)c)->rows);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int events_filter(sqlite3_vtab_cursor *c, int idx, const char *idxStr, int argc, sqlite3_value **argv) {
    (void)idx;
    (void)idxStr;
    (void)argc;
    (void)argv;
    events_cursor *cur = (events_cursor *)c;
    free(cur->rows);
    cur->rows = NULL;
    cur->c.n = cur->c.i = 0;
    rl_session *s = ((redlock_vtab *)c->pVtab)->st->session;
    rl_session_check_fork(s);
    int n = rl_client_events_copy(rl_session_client(s), &cur->rows);
    if (n < 0) return SQLITE_NOMEM;
    cur->c.n = n;
    return SQLITE_OK;
}

static int events_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) {
    const events_cursor *cur = (const events_cursor *)c;
    const rl_event_row *e = &cur->rows[cur->c.i];
    switch (col) {
    case COL_ID: sqlite3_result_int64(ctx, (sqlite3_int64)e->seq); break;
    case COL_TIME: sqlite3_result_int64(ctx, e->wall_ms); break;
    case COL_AGE: sqlite3_result_int64(ctx, e->age_ms); break;
    case COL_KIND: sqlite3_result_text(ctx, kind_name(e->kind), -1, SQLITE_STATIC); break;
    case COL_NODE:
        if (e->node_id > 0) sqlite3_result_int64(ctx, e->node_id);
        else sqlite3_result_null(ctx);
        break;
    case COL_RESOURCE:
        if (e->has_res) sqlite3_result_text(ctx, e->res, -1, SQLITE_TRANSIENT);
        else sqlite3_result_null(ctx);
        break;
    case COL_MESSAGE: sqlite3_result_text(ctx, e->msg, -1, SQLITE_TRANSIENT); break;
    }
    return SQLITE_OK;
}

static int events_rowid(sqlite3_vtab_cursor *c, sqlite_int64 *rowid) {
    const events_cursor *cur = (const events_cursor *)c;
    *rowid = (sqlite_int64)cur->rows[cur->c.i].seq;
    return SQLITE_OK;
}

static sqlite3_module events_module = {
    .iVersion = 1,
    .xCreate = 0,
    .xConnect = events_connect,
    .xBestIndex = redlock_vtab_best_index,
    .xDisconnect = redlock_vtab_disconnect,
    .xDestroy = redlock_vtab_disconnect,
    .xOpen = events_open,
    .xClose = events_close,
    .xFilter = events_filter,
    .xNext = redlock_cursor_next,
    .xEof = redlock_cursor_eof,
    .xColumn = events_column,
    .xRowid = events_rowid,
};

int redlock_register_events_table(sqlite3 *db, redlock_state *st) {
    return sqlite3_create_module_v2(db, "redlock_events", &events_module, redlock_state_ref(st), redlock_state_unref);
}
