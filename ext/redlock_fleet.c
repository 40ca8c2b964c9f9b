/* redlock_fleet: the eponymous, read-only tables redlock_fleet_locks and
 * redlock_fleet_waiters. Each scan reads every node afresh (rl_fleet.h),
 * bounded by the hidden argument max_keys, and copies the rows at xFilter;
 * a read that could not look at every key ends with one row of kind
 * 'incomplete' whose note says why. No column ever holds a token: the
 * engine never hands one over.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_fleet.h"

#include <string.h>

#include "redlock_vtab.h"
#include "rl_fleet.h"

SQLITE_EXTENSION_INIT3

enum { LOCKS, WAITERS };

static const char *const schemas[2] = {
    "CREATE TABLE x(resource TEXT, kind TEXT, held INTEGER, nodes INTEGER, quorum INTEGER, node_ids TEXT, "
    "ttl_ms INTEGER, holders INTEGER, max_holders INTEGER, host TEXT, pid INTEGER, app TEXT, since INTEGER, "
    "holder_id INTEGER, note TEXT, max_keys HIDDEN)",
    "CREATE TABLE x(resource TEXT, kind TEXT, waiters INTEGER, nodes INTEGER, node_ids TEXT, ttl_ms INTEGER, "
    "position INTEGER, host TEXT, pid INTEGER, app TEXT, since INTEGER, mode TEXT, entry TEXT, note TEXT, "
    "max_keys HIDDEN)",
};

enum { L_RESOURCE, L_KIND, L_HELD, L_NODES, L_QUORUM, L_NODE_IDS, L_TTL, L_HOLDERS, L_MAX_HOLDERS, L_HOST, L_PID,
       L_APP, L_SINCE, L_HOLDER_ID, L_NOTE, L_MAX_KEYS };
enum { W_RESOURCE, W_KIND, W_WAITERS, W_NODES, W_NODE_IDS, W_TTL, W_POSITION, W_HOST, W_PID, W_APP, W_SINCE,
       W_MODE, W_ENTRY, W_NOTE, W_MAX_KEYS };

static const int max_keys_col[2] = {L_MAX_KEYS, W_MAX_KEYS};

typedef struct fleet_vtab {
    redlock_vtab t; /* first: the state and db */
    int which;
} fleet_vtab;

typedef struct fleet_cursor {
    redlock_cursor c; /* first: n rows (the incomplete row included), at i */
    rl_fleet f;
    int rows;         /* rows of the table's own kind */
} fleet_cursor;

static int fleet_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err,
                         int which) {
    int rc = redlock_vtab_connect(db, aux, argc, argv, err, schemas[which], sizeof(fleet_vtab), out);
    if (rc == SQLITE_OK) ((fleet_vtab *)*out)->which = which;
    return rc;
}

static int locks_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out, char **err) {
    return fleet_connect(db, aux, argc, argv, out, err, LOCKS);
}

static int waiters_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                           char **err) {
    return fleet_connect(db, aux, argc, argv, out, err, WAITERS);
}

/* max_keys = ? (or the table-valued form, redlock_fleet_locks(50000)) is
 * handed to xFilter; everything else SQLite filters itself. */
static int fleet_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
    int col = max_keys_col[((fleet_vtab *)vt)->which];
    info->idxNum = 0;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *k = &info->aConstraint[i];
        if (k->iColumn != col || k->op != SQLITE_INDEX_CONSTRAINT_EQ) continue;
        if (!k->usable) return SQLITE_CONSTRAINT; /* a plan that can give it is better */
        info->aConstraintUsage[i].argvIndex = 1;
        info->aConstraintUsage[i].omit = 1;
        info->idxNum = 1;
        break;
    }
    info->estimatedCost = 1000;
    info->estimatedRows = 100;
    return SQLITE_OK;
}

static int fleet_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    (void)vt;
    return redlock_cursor_open(sizeof(fleet_cursor), out);
}

static int fleet_close(sqlite3_vtab_cursor *c) {
    rl_fleet_free(&((fleet_cursor *)c)->f);
    sqlite3_free(c);
    return SQLITE_OK;
}

static int fleet_filter(sqlite3_vtab_cursor *c, int idx, const char *idxStr, int argc, sqlite3_value **argv) {
    (void)idxStr;
    fleet_cursor *cur = (fleet_cursor *)c;
    fleet_vtab *vt = (fleet_vtab *)c->pVtab;
    rl_fleet_free(&cur->f);
    cur->c.n = cur->c.i = cur->rows = 0;
    int64_t max_keys = RL_FLEET_MAX_KEYS;
    if (idx == 1 && argc == 1 && sqlite3_value_type(argv[0]) != SQLITE_NULL &&
        (!redlock_value_whole(argv[0], &max_keys) || max_keys < 1 || max_keys > RL_FLEET_MAX_KEYS_LIMIT))
        return redlock_vtab_error(c->pVtab, "max_keys must be a whole number from 1 to %d (default %d)",
                                  RL_FLEET_MAX_KEYS_LIMIT, RL_FLEET_MAX_KEYS);
    redlock_state *st = vt->t.st;
    rl_session_check_fork(st->session);
    rl_outcome o;
    rl_status s = rl_fleet_read(rl_session_client(st->session), max_keys, &cur->f, &o);
    if (s == RL_NOMEM) return SQLITE_NOMEM;
    if (s == RL_INTERRUPTED) {
        redlock_vtab_error(c->pVtab, "%s", o.msg);
        return SQLITE_INTERRUPT;
    }
    if (s != RL_OK)
        return redlock_vtab_error(c->pVtab, "could not read the locks on the nodes: %s%s", o.msg,
                                  st->default_nodes && s == RL_NO_QUORUM ? REDLOCK_DEFAULT_NODES_HINT : "");
    cur->rows = vt->which == LOCKS ? cur->f.nlocks : cur->f.nwaiters;
    cur->c.n = cur->rows + !cur->f.complete;
    return SQLITE_OK;
}

static void result_text(sqlite3_context *ctx, const char *s) {
    if (s && s[0]) sqlite3_result_text(ctx, s, -1, SQLITE_TRANSIENT);
    else sqlite3_result_null(ctx);
}

static void result_count(sqlite3_context *ctx, long long v) {
    if (v < 0) sqlite3_result_null(ctx);
    else sqlite3_result_int64(ctx, v);
}

/* A name as stored on the nodes, made safe to show (another program may
 * have put escape sequences or bytes that are not UTF-8 in a key). */
static void result_name(sqlite3_context *ctx, const char *res, size_t len) {
    char *s = sqlite3_malloc64(len + 1);
    if (!s) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    size_t n = rl_text_clean(s, len + 1, res, len);
    sqlite3_result_text(ctx, s, (int)n, sqlite3_free);
}

/* The node ids as a JSON array, [1,2,3]. */
static void result_ids(sqlite3_context *ctx, const int64_t *ids, int n) {
    sqlite3_str *js = sqlite3_str_new(NULL);
    sqlite3_str_appendchar(js, 1, '[');
    for (int i = 0; i < n; i++) sqlite3_str_appendf(js, "%s%lld", i ? "," : "", (long long)ids[i]);
    sqlite3_str_appendchar(js, 1, ']');
    int len = sqlite3_str_length(js);
    char *text = sqlite3_str_finish(js);
    if (!text) sqlite3_result_error_nomem(ctx);
    else sqlite3_result_text(ctx, text, len, sqlite3_free);
}

/* The row that says the read was cut: only kind, note and max_keys. */
static void incomplete_column(const fleet_cursor *cur, sqlite3_context *ctx, int col, int which) {
    if (col == (which == LOCKS ? L_KIND : W_KIND)) sqlite3_result_text(ctx, "incomplete", -1, SQLITE_STATIC);
    else if (col == (which == LOCKS ? L_NOTE : W_NOTE)) {
        long long more = cur->f.max_keys * 10;
        if (more > RL_FLEET_MAX_KEYS_LIMIT) more = RL_FLEET_MAX_KEYS_LIMIT;
        const char *name = which == LOCKS ? "redlock_fleet_locks" : "redlock_fleet_waiters";
        char *note = cur->f.cut && cur->f.max_keys < RL_FLEET_MAX_KEYS_LIMIT
                         ? sqlite3_mprintf("rows may be missing: %s (to look at more: SELECT * FROM %s(%lld))",
                                           cur->f.why, name, more)
                         : sqlite3_mprintf("rows may be missing: %s", cur->f.why);
        if (!note) sqlite3_result_error_nomem(ctx);
        else sqlite3_result_text(ctx, note, -1, sqlite3_free);
    } else sqlite3_result_null(ctx);
}

static const char *lock_kind(int kind) {
    switch (kind) {
    case RL_FLEET_EXCLUSIVE: return "exclusive";
    case RL_FLEET_SET: return "set";
    case RL_FLEET_SHARED: return "shared";
    default: return "foreign";
    }
}

static void lock_column(const rl_fleet_lock *l, sqlite3_context *ctx, int col) {
    const rl_holder_entry *d = l->has_details ? &l->d : NULL;
    switch (col) {
    case L_RESOURCE: result_name(ctx, l->res, l->reslen); break;
    case L_KIND: sqlite3_result_text(ctx, lock_kind(l->kind), -1, SQLITE_STATIC); break;
    case L_HELD: sqlite3_result_int(ctx, l->on_quorum); break;
    case L_NODES: sqlite3_result_int(ctx, l->nodes); break;
    case L_QUORUM: sqlite3_result_int(ctx, l->quorum); break;
    case L_NODE_IDS: result_ids(ctx, l->node_ids, l->nodes); break;
    case L_TTL: result_count(ctx, l->ttl_ms); break;
    case L_HOLDERS: result_count(ctx, l->holders); break;
    case L_MAX_HOLDERS: result_count(ctx, l->max_holders); break;
    case L_HOST: result_text(ctx, d ? d->host : NULL); break;
    case L_PID: result_count(ctx, d ? d->pid : -1); break;
    case L_APP: result_text(ctx, d ? d->app : NULL); break;
    case L_SINCE: result_count(ctx, d ? d->since_ms : -1); break;
    case L_HOLDER_ID: sqlite3_result_int(ctx, l->holder_id); break;
    default: sqlite3_result_null(ctx); break; /* note */
    }
}

static const char *wait_kind(int kind) {
    switch (kind) {
    case RL_FLEET_WRITER: return "writer-waiting";
    case RL_FLEET_QUEUED: return "queued";
    default: return "subscribed";
    }
}

/* A queued row's note: on the name's last row when not all its waiters
 * are rows. */
static void queue_note(const rl_fleet_waiter *w, sqlite3_context *ctx) {
    if (!w->more) {
        sqlite3_result_null(ctx);
        return;
    }
    char *note = sqlite3_mprintf("%lld waiters queued, the first %d listed (at most %d per name and node)",
                                 w->waiters, w->position, RL_FLEET_HOLDERS_MAX);
    if (!note) sqlite3_result_error_nomem(ctx);
    else sqlite3_result_text(ctx, note, -1, sqlite3_free);
}

static void waiter_column(const rl_fleet_waiter *w, sqlite3_context *ctx, int col) {
    int q = w->kind == RL_FLEET_QUEUED;
    switch (col) {
    case W_RESOURCE: result_name(ctx, w->res, w->reslen); break;
    case W_KIND: sqlite3_result_text(ctx, wait_kind(w->kind), -1, SQLITE_STATIC); break;
    case W_WAITERS: result_count(ctx, w->waiters); break;
    case W_NODES: sqlite3_result_int(ctx, w->nodes); break;
    case W_NODE_IDS: result_ids(ctx, w->node_ids, w->nodes); break;
    case W_TTL: result_count(ctx, w->ttl_ms); break;
    case W_POSITION: result_count(ctx, q ? w->position : -1); break;
    case W_SINCE: result_count(ctx, q ? w->since_ms : -1); break;
    case W_MODE:
        if (q) sqlite3_result_text(ctx, w->exclusive ? "exclusive" : "shared", -1,
                                   SQLITE_STATIC);
        else sqlite3_result_null(ctx);
        break;
    case W_ENTRY: result_text(ctx, q ? w->entry : NULL); break; /* a random id, no secret */
    case W_NOTE:
        if (q) queue_note(w, ctx);
        else sqlite3_result_null(ctx);
        break;
    default: sqlite3_result_null(ctx); break; /* host, pid, app: a queue entry carries none */
    }
}

static int fleet_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) {
    const fleet_cursor *cur = (const fleet_cursor *)c;
    int which = ((const fleet_vtab *)c->pVtab)->which;
    if (col == max_keys_col[which]) sqlite3_result_int64(ctx, cur->f.max_keys);
    else if (cur->c.i >= cur->rows) incomplete_column(cur, ctx, col, which);
    else if (which == LOCKS) lock_column(&cur->f.locks[cur->c.i], ctx, col);
    else waiter_column(&cur->f.waiters[cur->c.i], ctx, col);
    return SQLITE_OK;
}

static int fleet_rowid(sqlite3_vtab_cursor *c, sqlite_int64 *rowid) {
    *rowid = ((fleet_cursor *)c)->c.i + 1;
    return SQLITE_OK;
}

#define FLEET_MODULE(connect_fn)                                                                               \
    {                                                                                                          \
        .iVersion = 1, .xCreate = 0, .xConnect = connect_fn, .xBestIndex = fleet_best_index,                   \
        .xDisconnect = redlock_vtab_disconnect, .xDestroy = redlock_vtab_disconnect, .xOpen = fleet_open,      \
        .xClose = fleet_close, .xFilter = fleet_filter, .xNext = redlock_cursor_next,                          \
        .xEof = redlock_cursor_eof, .xColumn = fleet_column, .xRowid = fleet_rowid,                            \
    }

static sqlite3_module locks_module = FLEET_MODULE(locks_connect);
static sqlite3_module waiters_module = FLEET_MODULE(waiters_connect);

int redlock_register_fleet_tables(sqlite3 *db, redlock_state *st) {
    int rc = sqlite3_create_module_v2(db, "redlock_fleet_locks", &locks_module, redlock_state_ref(st),
                                      redlock_state_unref);
    if (rc != SQLITE_OK) return rc;
    return sqlite3_create_module_v2(db, "redlock_fleet_waiters", &waiters_module, redlock_state_ref(st),
                                    redlock_state_unref);
}
