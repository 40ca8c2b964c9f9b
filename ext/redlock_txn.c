/* redlock_txn: refuses a release before COMMIT (see redlock_txn.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_txn.h"

#include <string.h>

#include "rl_settings.h"

SQLITE_EXTENSION_INIT3

static int writing(sqlite3 *db, const char *zdb) {
    return sqlite3_txn_state(db, zdb) == SQLITE_TXN_WRITE;
}

int redlock_txn_writing(sqlite3 *db) {
    if (sqlite3_libversion_number() < 3034000) return 0; /* no sqlite3_txn_state */
    /* The highest state over every schema: no write anywhere is the common
     * case, answered without a look at each database. */
    if (sqlite3_txn_state(db, NULL) != SQLITE_TXN_WRITE) return 0;
    if (sqlite3_libversion_number() >= 3039000) { /* sqlite3_db_name is in the host's API table */
        const char *z;
        for (int i = 0; (z = sqlite3_db_name(db, i)) != NULL; i++)
            if (i != 1 && writing(db, z)) return 1;
        return 0;
    }
    sqlite3_stmt *st = NULL;
    int w = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA database_list", -1, &st, NULL) == SQLITE_OK) {
        while (!w && sqlite3_step(st) == SQLITE_ROW) {
            const char *z = (const char *)sqlite3_column_text(st, 1);
            if (sqlite3_column_int(st, 0) != 1 && z) w = writing(db, z);
        }
    } else {
        w = writing(db, "main"); /* at least the main database */
    }
    sqlite3_finalize(st);
    return w;
}

/* Whether ctx's connection has uncommitted writes that a lock given up
 * now would expose, release_in_write_txn not saying otherwise. */
static int writes_to_protect(sqlite3_context *ctx, redlock_state *st) {
    if (!redlock_txn_writing(sqlite3_context_db_handle(ctx))) return 0;
    rl_setting_value allow;
    rl_error err;
    return !(rl_setting_get(rl_session_client(st->session), "release_in_write_txn", &allow, &err) == 0 && allow.i);
}

int redlock_txn_extend_allowed(sqlite3_context *ctx, redlock_state *st, const char *res, size_t reslen,
                               const char *token, size_t toklen, int64_t ttl_ms) {
    if (!writes_to_protect(ctx, st)) return 1;
    int64_t left = rl_session_validity(st->session, res, reslen, token, toklen);
    if (ttl_ms >= left) return 1;
    redlock_result_error(ctx,
                         "redlock_extend() refused: this connection has uncommitted writes (an open write "
                         "transaction), and a TTL of %lld ms, shorter than the %lld ms the lock has left, could let "
                         "it go before COMMIT, so that the next holder reads the data as it was before them; give a "
                         "TTL of at least %lld ms, or COMMIT first (a lock that protects something other than this "
                         "database: SELECT redlock_config('release_in_write_txn', 1))",
                         (long long)ttl_ms, (long long)left, (long long)left);
    return 0;
}

int redlock_txn_release_allowed(sqlite3_context *ctx, redlock_state *st, const char *fname) {
    if (!writes_to_protect(ctx, st)) return 1;
    redlock_result_error(ctx,
                         "%s() refused: this connection has uncommitted writes (an open write transaction), and "
                         "letting go of the lock before COMMIT lets the next holder read the data as it was before them; "
                         "COMMIT first and call it after (a lock that protects something other than this database: "
                         "SELECT redlock_config('release_in_write_txn', 1))",
                         fname);
    return 0;
}
