/* redlock_guard: refuses calls a database file's schema could make (see
 * redlock_guard.h). Each guarded call reads the schema rows of main and of
 * every attached database the connection has a transaction open on,
 * afresh: nothing is cached, because no key that
 * SQLite exposes is sure to change whenever the schema SQLite compiles from
 * does (a database detached and attached again starts its data version
 * anew, an in-memory one can be deserialized over).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_guard.h"

#include <stdio.h>
#include <string.h>

#include "redlock_state.h"

SQLITE_EXTENSION_INIT3

static const char *const guarded_names[REDLOCK_G_COUNT] = {
    [REDLOCK_G_ACQUIRE] = "redlock_acquire",         [REDLOCK_G_LOCK] = "redlock_lock",
    [REDLOCK_G_RELEASE] = "redlock_release",         [REDLOCK_G_RELEASE_ALL] = "redlock_release_all",
    [REDLOCK_G_EXTEND] = "redlock_extend",           [REDLOCK_G_CONFIG] = "redlock_config",
    [REDLOCK_G_ACQUIRE_SHARED] = "redlock_acquire_shared",
    [REDLOCK_G_ACQUIRE_MANY] = "redlock_acquire_many", [REDLOCK_G_RELEASE_MANY] = "redlock_release_many",
    [REDLOCK_G_DETACH] = "redlock_detach",           [REDLOCK_G_ADOPT] = "redlock_adopt",
    [REDLOCK_G_PING] = "redlock_ping",               [REDLOCK_G_HOLDER] = "redlock_holder",
    [REDLOCK_G_ACQUIRE_XACT] = "redlock_acquire_xact", [REDLOCK_G_LOCK_XACT] = "redlock_lock_xact",
};

#define GUARD_PREFIX "redlock_" /* every guarded name starts so */

#ifdef REDLOCK_GUARD_HOOK
void (*redlock_guard_hook)(redlock_guarded fn, int argc, sqlite3_value **argv);
#endif

const char *redlock_guard_name(redlock_guarded fn) {
    return guarded_names[fn];
}

/* A byte SQLite's tokenizer takes as part of an identifier. */
static int ident_byte(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c >= 0x80;
}

/* ASCII-only case folding, as SQLite's own name comparison does. */
static int same_folded(const unsigned char *s, const char *lower, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 'A' && c <= 'Z') c = (unsigned char)(c - 'A' + 'a');
        if (c != (unsigned char)lower[i]) return 0;
    }
    return 1;
}

unsigned redlock_guard_mentions(const char *text, size_t n) {
    const unsigned char *s = (const unsigned char *)text;
    const size_t pl = sizeof GUARD_PREFIX - 1;
    unsigned found = 0;
    for (size_t i = 0; i + pl <= n; i++) {
        if ((s[i] | 0x20) != 'r' || (i > 0 && ident_byte(s[i - 1])) || !same_folded(s + i, GUARD_PREFIX, pl)) continue;
        for (int f = 0; f < REDLOCK_G_COUNT; f++) {
            size_t k = strlen(guarded_names[f]);
            if (i + k <= n && same_folded(s + i + pl, guarded_names[f] + pl, k - pl) &&
                (i + k == n || !ident_byte(s[i + k])))
                found |= 1u << f;
        }
    }
    return found;
}

/* What the scan found: the offending row, or why it could not look. */
typedef struct verdict {
    int rc;           /* SQLite's code when a schema could not be read */
    int db_index;     /* which database (0 main, 2.. attached) */
    char db[68];      /* printable copies: names come from the file */
    char type[20];
    char obj[68];
    char why[RL_ERR_REASON_MAX]; /* SQLite's message when a schema could not be read */
} verdict;

/* Copies at most outlen - 1 bytes of in, printable ASCII only ('?' for the
 * rest, "..." when cut), so an error never carries a control character or
 * broken UTF-8 from a database file. */
static void printable(char *out, size_t outlen, const char *in) {
    size_t i = 0;
    for (; in && in[i] && i + 1 < outlen; i++) {
        unsigned char c = (unsigned char)in[i];
        out[i] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    out[i] = '\0';
    if (in && in[i] && outlen > 4) memcpy(out + outlen - 4, "...", 4);
}

/* Scans the schema rows of database zdb (index idx). Returns 0 when none
 * names a function in want, 1 when one does, -1 when they could not be
 * read; *v says which or why. */
static int scan_db(sqlite3 *db, int idx, const char *zdb, unsigned want, verdict *v) {
    /* sqlite_master, not sqlite_schema: a file may hold an object of its
     * own named sqlite_schema, which SQLite would find first. */
    char *sql = sqlite3_mprintf("SELECT type, name, sql FROM \"%w\".sqlite_master", zdb);
    sqlite3_stmt *st = NULL;
    int rc = sql ? sqlite3_prepare_v2(db, sql, -1, &st, NULL) : SQLITE_NOMEM;
    sqlite3_free(sql);
    int found = 0;
    while (rc == SQLITE_OK || rc == SQLITE_ROW) {
        if ((rc = sqlite3_step(st)) != SQLITE_ROW) break;
        const char *text = (const char *)sqlite3_column_text(st, 2);
        int n = sqlite3_column_bytes(st, 2);
        if (!text && sqlite3_column_type(st, 2) != SQLITE_NULL) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (text && (redlock_guard_mentions(text, (size_t)n) & want)) {
            printable(v->type, sizeof v->type, (const char *)sqlite3_column_text(st, 0));
            printable(v->obj, sizeof v->obj, (const char *)sqlite3_column_text(st, 1));
            found = 1;
            break;
        }
    }
    sqlite3_finalize(st);
    if (!found && rc == SQLITE_DONE) return 0;
    v->db_index = idx;
    printable(v->db, sizeof v->db, zdb);
    if (found) return 1;
    v->rc = rc;
    printable(v->why, sizeof v->why, sqlite3_errmsg(db)); /* may quote the file's schema */
    return -1;
}

/* Whether database zdb must be scanned: the connection has a transaction
 * open on it. Code from a database's schema runs only in a statement that
 * reads or writes a table of that database, and SQLite opens a transaction
 * on it (checking its schema cookie) before such a statement runs; the one
 * exception, a view over no table, SQLite refuses by itself. Skipping the
 * others keeps the guard from opening a read transaction of its own, which
 * would hold a lock on the file until the calling statement ends (for the
 * whole of a waiting acquire) and block writers in other processes. Hosts
 * before 3.34 lack sqlite3_txn_state: there every database is scanned. */
static int in_use(sqlite3 *db, const char *zdb) {
    return sqlite3_libversion_number() < 3034000 || sqlite3_txn_state(db, zdb) != SQLITE_TXN_NONE;
}

/* Scans every database in use but temp; the first finding ends it. */
static int scan_all(sqlite3 *db, unsigned want, verdict *v) {
    /* No transaction on any database (the highest state over all of them):
     * none is in use, answered without a look at each. */
    if (sqlite3_libversion_number() >= 3034000 && sqlite3_txn_state(db, NULL) == SQLITE_TXN_NONE) return 0;
    if (sqlite3_libversion_number() >= 3039000) { /* sqlite3_db_name is in the host's API table */
        const char *z;
        for (int i = 0; (z = sqlite3_db_name(db, i)) != NULL; i++) {
            int r = i == 1 || !in_use(db, z) ? 0 : scan_db(db, i, z, want, v);
            if (r != 0) return r;
        }
        return 0;
    }
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, "PRAGMA database_list", -1, &st, NULL), r = 0;
    while (r == 0 && (rc == SQLITE_OK || rc == SQLITE_ROW)) {
        if ((rc = sqlite3_step(st)) != SQLITE_ROW) break;
        int i = sqlite3_column_int(st, 0);
        const char *z = (const char *)sqlite3_column_text(st, 1);
        if (i != 1 && (!z || in_use(db, z))) r = z ? scan_db(db, i, z, want, v) : (v->rc = SQLITE_NOMEM, -1);
    }
    sqlite3_finalize(st);
    if (r == 0 && rc != SQLITE_DONE) {
        v->rc = rc;
        snprintf(v->db, sizeof v->db, "(list of databases)");
        printable(v->why, sizeof v->why, sqlite3_errmsg(db));
        r = -1;
    }
    return r;
}

int redlock_guard_allows(sqlite3_context *ctx, redlock_guarded fn, int argc, sqlite3_value **argv) {
    verdict v = {0};
    const char *name = guarded_names[fn];
    int r = scan_all(sqlite3_context_db_handle(ctx), 1u << fn, &v);
    if (r == 0) {
#ifdef REDLOCK_GUARD_HOOK
        if (redlock_guard_hook) redlock_guard_hook(fn, argc, argv);
#else
        (void)argc;
        (void)argv;
#endif
        return 1;
    }
    if (r < 0 && v.rc == SQLITE_NOMEM) {
        sqlite3_result_error_nomem(ctx);
    } else if (r < 0) {
        redlock_result_error(ctx,
                             "%s() refused: could not read the schema of database '%s' to check that nothing there "
                             "names it (%s); try again, or DETACH that database",
                             name, v.db, v.why[0] ? v.why : sqlite3_errstr(v.rc));
    } else if (v.db_index == 0) {
        redlock_result_error(ctx,
                             "%s() refused: this statement uses the main database, whose %s '%s' names it, and SQLite "
                             "before 3.50 lets a CHECK constraint there call it as if your statement had; drop or "
                             "redefine that %s, or open another database file",
                             name, v.type, v.obj, v.type);
    } else {
        redlock_result_error(ctx,
                             "%s() refused: this statement uses attached database '%s', whose %s '%s' names it, and "
                             "SQLite before 3.50 lets a CHECK constraint there call it as if your statement had; "
                             "call it in a statement that does not use '%s', or DETACH it (or drop or redefine that "
                             "%s)",
                             name, v.db, v.type, v.obj, v.db, v.type);
    }
    return 0;
}
