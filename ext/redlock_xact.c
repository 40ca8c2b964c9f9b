/* redlock_xact: locks that belong to the open transaction, and the COMMIT
 * guard (see redlock_xact.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_xact.h"

#include <string.h>

#include "redlock_functions.h"
#include "redlock_guard.h"
#include "redlock_vtab.h"
#include "rl_settings.h"
#include "rl_text.h"

SQLITE_EXTENSION_INIT3

/* ---- temp.redlock_xact: no rows; it is there to take part ---------------- */

static int xact_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                        sqlite3_vtab **out, char **err) {
    if (argc != 3 || sqlite3_stricmp(argv[1], "temp") != 0 ||
        sqlite3_stricmp(argv[2], "redlock_xact") != 0) {
        *err = sqlite3_mprintf(
            "redlock: the module redlock_xact is the extension's own: redlock_acquire_xact makes "
            "its one table, temp.redlock_xact, when it needs it");
        return SQLITE_ERROR;
    }
    int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(unused)");
    if (rc != SQLITE_OK) return rc;
    sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
    redlock_vtab *vt = sqlite3_malloc64(sizeof *vt);
    if (!vt) return SQLITE_NOMEM;
    memset(vt, 0, sizeof *vt);
    vt->st = aux;
    vt->db = db;
    *out = &vt->base;
    return SQLITE_OK;
}

static int xact_create(sqlite3 *db, void *aux, int argc, const char *const *argv,
                       sqlite3_vtab **out, char **err) {
    int rc = xact_connect(db, aux, argc, argv, out, err);
    /* A table created in a transaction takes part in it without an xBegin. */
    if (rc == SQLITE_OK && ((redlock_state *)aux)->xact_joining)
        ((redlock_state *)aux)->xact_joined = 1;
    return rc;
}

/* Dropped while it takes part, it would get neither xSync nor xCommit:
 * no guard, no release. */
static int xact_destroy(sqlite3_vtab *vt) {
    if (((redlock_vtab *)vt)->st->xact_joined) return SQLITE_LOCKED;
    return redlock_vtab_disconnect(vt);
}

static int xact_rename(sqlite3_vtab *vt, const char *name) {
    (void)name;
    return redlock_vtab_error(vt, "temp.redlock_xact is the extension's own and keeps its name");
}

static int xact_open(sqlite3_vtab *vt, sqlite3_vtab_cursor **out) {
    (void)vt;
    return redlock_cursor_open(sizeof(redlock_cursor), out);
}

static int xact_close(sqlite3_vtab_cursor *c) {
    sqlite3_free(c);
    return SQLITE_OK;
}

static int xact_filter(sqlite3_vtab_cursor *c, int idx, const char *idxStr, int argc,
                       sqlite3_value **argv) {
    (void)c, (void)idx, (void)idxStr, (void)argc, (void)argv;
    return SQLITE_OK; /* no rows */
}

static int xact_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) {
    (void)c, (void)col;
    sqlite3_result_null(ctx);
    return SQLITE_OK;
}

static int xact_rowid(sqlite3_vtab_cursor *c, sqlite3_int64 *rowid) {
    (void)c;
    *rowid = 0;
    return SQLITE_OK;
}

static int xact_update(sqlite3_vtab *vt, int argc, sqlite3_value **argv, sqlite3_int64 *rowid) {
    (void)argc, (void)argv, (void)rowid;
    return redlock_vtab_error(
        vt, "temp.redlock_xact holds no rows; take a lock of the transaction with "
            "redlock_acquire_xact");
}

static int xact_begin(sqlite3_vtab *vt) {
    ((redlock_vtab *)vt)->st->xact_joined = 1; /* SQLite lists it in the transaction on SQLITE_OK */
    return SQLITE_OK;
}

/* Whether a database file the transaction writes may still have to be
 * locked by the COMMIT: in rollback-journal mode COMMIT waits for the
 * EXCLUSIVE lock (busy_timeout) only after xSync. A WAL file is locked
 * SHARED (the write lock is the WAL's, held since the first write). */
static int commit_may_wait(sqlite3 *db) {
    if (sqlite3_libversion_number() < 3039000)
        return 1; /* no sqlite3_db_name in its API: assume so */
    const char *z;
    for (int i = 0; (z = sqlite3_db_name(db, i)) != NULL; i++) {
        if (i == 1 || sqlite3_txn_state(db, z) != SQLITE_TXN_WRITE) continue;
        int lock = -1;
        if (sqlite3_file_control(db, z, SQLITE_FCNTL_LOCKSTATE, &lock) != SQLITE_OK) return 1;
        if (lock != SQLITE_LOCK_SHARED && lock != SQLITE_LOCK_EXCLUSIVE) return 1;
    }
    return 0;
}

/* The COMMIT guard. The wait for a file's EXCLUSIVE lock comes first
 * (sqlite3_db_cacheflush takes it to write the dirty pages, waiting as
 * COMMIT would), so that no lock can run out between the check and the
 * commit but for the commit's own writes, which xact_margin_ms covers.
 * SQLITE_BUSY leaves the transaction open, as SQLite's own COMMIT does;
 * an error rolls it back and is the COMMIT's message. */
static int xact_sync(sqlite3_vtab *vt) {
    redlock_vtab *v = (redlock_vtab *)vt;
    rl_session *s = v->st->session;
    rl_session_check_fork(s);
    if (!rl_session_xact_open(s)) return SQLITE_OK;
    if (commit_may_wait(v->db)) {
        int rc = sqlite3_db_cacheflush(v->db);
        if (rc != SQLITE_OK) return rc;
    }
    rl_setting_value margin;
    rl_error err;
    if (rl_setting_get(rl_session_client(s), "xact_margin_ms", &margin, &err) != 0) margin.i = 0;
    char why[RL_ERR_MAX];
    if (rl_session_xact_check(s, margin.i, why, sizeof why) == 0) return SQLITE_OK;
    return redlock_vtab_error(
        vt,
        "COMMIT refused: %s; the transaction is rolled back, none of its writes are made, "
        "and its locks are released",
        why);
}

/* Committed (after the b-tree commit) or rolled back: the transaction's
 * locks go now. */
static int xact_end(sqlite3_vtab *vt) {
    redlock_vtab *v = (redlock_vtab *)vt;
    v->st->xact_joined = 0;
    rl_session_check_fork(v->st->session);
    rl_session_xact_end(v->st->session);
    return SQLITE_OK;
}

static sqlite3_module xact_module = {
    .iVersion = 1, /* no savepoint methods: a ROLLBACK TO keeps the transaction's locks */
    .xCreate = xact_create,
    .xConnect = xact_connect,
    .xBestIndex = redlock_vtab_best_index,
    .xDisconnect = redlock_vtab_disconnect,
    .xDestroy = xact_destroy,
    .xOpen = xact_open,
    .xClose = xact_close,
    .xFilter = xact_filter,
    .xNext = redlock_cursor_next,
    .xEof = redlock_cursor_eof,
    .xColumn = xact_column,
    .xRowid = xact_rowid,
    .xUpdate = xact_update,
    .xBegin = xact_begin,
    .xSync = xact_sync,
    .xCommit = xact_end,
    .xRollback = xact_end,
    .xRename = xact_rename,
};

/* ---- the functions -------------------------------------------------------- */

/* Makes temp.redlock_xact take part in the open transaction (creating it
 * when missing): a delete of no rows is a write that changes nothing and
 * counts no change. 0, or -1 with an error on ctx. */
static int join(sqlite3_context *ctx, redlock_state *st, const char *fname) {
    if (st->xact_joined) return 0;
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    static const char *const steps[] = {
        "DELETE FROM temp.redlock_xact WHERE 0",
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.redlock_xact USING redlock_xact",
        "DELETE FROM temp.redlock_xact WHERE 0",
    };
    int rc = SQLITE_OK;
    st->xact_joining = 1;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0] && !st->xact_joined; i++) {
        rc = sqlite3_exec(db, steps[i], NULL, NULL, NULL);
        if (rc != SQLITE_OK && i > 0) break; /* the first fails when the table is missing */
    }
    st->xact_joining = 0;
    if (st->xact_joined && rc == SQLITE_OK) return 0;
    st->xact_joined = 0; /* not sure of it: the next call tries again */
    if (rc == SQLITE_NOMEM)
        sqlite3_result_error_nomem(ctx);
    else if (rc == SQLITE_OK)
        redlock_result_error(
            ctx,
            "%s() found temp.redlock_xact to be another table than the extension's own; "
            "drop it (DROP TABLE temp.redlock_xact)",
            fname);
    else
        redlock_result_error(ctx,
                             "%s() could not make the transaction tell it when it ends (a write to "
                             "temp.redlock_xact): %s",
                             fname, sqlite3_errmsg(db));
    return -1;
}

/* (resource, ttl_ms [, wait_ms]): redlock_acquire_xact returns NULL when
 * the lock is held elsewhere, redlock_lock_xact (strict) raises. */
static void acquire_xact(sqlite3_context *ctx, int argc, sqlite3_value **argv, int strict) {
    const char *fname = strict ? "redlock_lock_xact" : "redlock_acquire_xact";
    size_t reslen;
    int64_t ttl, wait = 0;
    const char *res = redlock_arg_resource(ctx, argv[0], &reslen);
    if (!res || redlock_arg_ms(ctx, argv[1], "ttl_ms", 1, RL_TTL_MAX_MS, &ttl) != 0) return;
    if (argc > 2 && redlock_arg_ms(ctx, argv[2], "wait_ms", 0, RL_WAIT_MAX_MS, &wait) != 0) return;
    redlock_state *st = redlock_state_of(ctx);
    if (sqlite3_get_autocommit(sqlite3_context_db_handle(ctx))) {
        redlock_result_error(
            ctx,
            "%s() needs an open transaction, which owns the lock until its COMMIT or "
            "ROLLBACK: run BEGIN first (Python's sqlite3 opens one by itself only before "
            "INSERT, UPDATE or DELETE: execute \"BEGIN\"); for a lock of the connection, "
            "use redlock_acquire",
            fname);
        return;
    }
    if (join(ctx, st, fname) != 0) return;
    char token[RL_TOKEN_LEN + 1];
    rl_outcome o;
    rl_status rc = rl_session_acquire_xact(st->session, res, reslen, ttl, wait, token, &o);
    if (rc == RL_OK)
        sqlite3_result_text(ctx, token, RL_TOKEN_LEN, SQLITE_TRANSIENT);
    else if (rc == RL_REFUSED && strict)
        redlock_result_error(ctx, "could not lock '%s' within %lld ms: %s",
                             rl_text_excerpt((char[72]){0}, 72, res, reslen, 64), (long long)wait,
                             o.msg);
    else
        redlock_result_failure(ctx, "lock", res, &o);
}

static void fn_acquire_xact(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (redlock_guard_allows(ctx, REDLOCK_G_ACQUIRE_XACT, argc, argv))
        acquire_xact(ctx, argc, argv, 0);
}

static void fn_lock_xact(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (redlock_guard_allows(ctx, REDLOCK_G_LOCK_XACT, argc, argv))
        acquire_xact(ctx, argc, argv, 1);
}

int redlock_register_xact(sqlite3 *db, redlock_state *st) {
    int rc = sqlite3_create_module_v2(db, "redlock_xact", &xact_module, redlock_state_ref(st),
                                      redlock_state_unref);
    const int flags = SQLITE_UTF8 | SQLITE_DIRECTONLY; /* side effects: see redlock_functions.c */
    for (int nargs = 2; rc == SQLITE_OK && nargs <= 3; nargs++) {
        rc = sqlite3_create_function_v2(db, "redlock_acquire_xact", nargs, flags,
                                        redlock_state_ref(st), fn_acquire_xact, NULL, NULL,
                                        redlock_state_unref);
        if (rc == SQLITE_OK)
            rc = sqlite3_create_function_v2(db, "redlock_lock_xact", nargs, flags,
                                            redlock_state_ref(st), fn_lock_xact, NULL, NULL,
                                            redlock_state_unref);
    }
    return rc;
}
