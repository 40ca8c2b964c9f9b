/* redlock_handover: the SQL functions redlock_detach and redlock_adopt,
 * which carry a lock from one connection (or process) to another by its
 * token, for jobs made of several steps: detach hands a lock over to its
 * TTL, adopt takes it into a connection again after checking it on a
 * quorum.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_handover.h"
#include "redlock_functions.h"

#include "redlock_guard.h"
#include "redlock_txn.h"

SQLITE_EXTENSION_INIT3

static void fn_detach(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_DETACH, argc, argv)) return;
    size_t reslen;
    const char *res = redlock_arg_resource(ctx, argv[0], &reslen);
    if (!res) return;
    /* Handed over to its TTL, the lock is no longer kept alive here: before
     * COMMIT that lets go of it as a release does. */
    if (!redlock_txn_release_allowed(ctx, redlock_state_of(ctx), "redlock_detach")) return;
    char token[RL_TOKEN_LEN + 1];
    int not_held;
    rl_outcome o;
    rl_status st = rl_session_detach(redlock_state_of(ctx)->session, res, reslen, token, &not_held, &o);
    if (not_held) sqlite3_result_null(ctx);
    else if (st == RL_OK) sqlite3_result_text(ctx, token, RL_TOKEN_LEN, SQLITE_TRANSIENT);
    else redlock_result_failure(ctx, "detach", res, &o);
}

static void fn_adopt(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_ADOPT, argc, argv)) return;
    size_t reslen, toklen;
    const char *res = redlock_arg_resource(ctx, argv[0], &reslen), *token;
    if (!res || !(token = redlock_arg_token(ctx, argv[1], &toklen))) return;
    rl_outcome o;
    rl_status st = rl_session_adopt(redlock_state_of(ctx)->session, res, reslen, token, toklen, &o);
    if (st == RL_OK) sqlite3_result_int64(ctx, o.validity_ms);
    else redlock_result_failure(ctx, "adopt", res, &o);
}

int redlock_register_handover_functions(sqlite3 *db, redlock_state *st) {
    /* Side effects (a lock's owner changes; adopt asks the nodes): never
     * deterministic, never from a view or trigger; a CHECK constraint is
     * kept out by redlock_guard. */
    const int flags = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    int rc = sqlite3_create_function_v2(db, "redlock_detach", 1, flags, redlock_state_ref(st), fn_detach, NULL, NULL,
                                        redlock_state_unref);
    if (rc == SQLITE_OK)
        rc = sqlite3_create_function_v2(db, "redlock_adopt", 2, flags, redlock_state_ref(st), fn_adopt, NULL, NULL,
                                        redlock_state_unref);
    return rc;
}
