/* redlock_ext: the extension's entry point. It creates the per-connection
 * state, seeds redlock_nodes from REDLOCK_NODES (or 127.0.0.1:6379),
 * registers the SQL functions and tables, and connects the engine's
 * callbacks (cancel, on_lost, log) to the connection.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_ext.h"
#include "redlock_events.h"
#include "redlock_fleet.h"
#include "redlock_functions.h"
#include "redlock_handover.h"
#include "redlock_locks.h"
#include "redlock_log.h"
#include "redlock_many.h"
#include "redlock_nodes.h"
#include "redlock_state.h"
#include "redlock_stats.h"
#include "redlock_xact.h"
#include "rl_text.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT1

/* Adds the nodes listed in REDLOCK_NODES, or the default node. */
static int seed_nodes(redlock_state *st, char **pzErrMsg) {
    const char *env = getenv("REDLOCK_NODES");
    rl_client *c = rl_session_client(st->session);
    rl_error err;
    if (!env) {
        rl_endpoint ep = {.host = "127.0.0.1", .port = 6379};
        st->default_nodes = 1;
        if (rl_client_add_node(c, &ep, 0, &err) > 0) return SQLITE_OK;
        *pzErrMsg = sqlite3_mprintf("redlock: default node 127.0.0.1:6379: %s", err.msg);
        return SQLITE_ERROR;
    }
    const char *p = env;
    while (*p) {
        size_t len = strcspn(p, ",");
        const char *s = p;
        size_t n = len;
        while (n && (*s == ' ' || *s == '\t')) s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
        if (n) {
            rl_endpoint ep;
            if (rl_endpoint_parse_url(s, n, &ep, &err) != 0 || rl_client_add_node(c, &ep, 0, &err) < 0) {
                rl_endpoint_clear(&ep);
                *pzErrMsg = sqlite3_mprintf("redlock: REDLOCK_NODES: %s", err.msg);
                return SQLITE_ERROR;
            }
            rl_endpoint_clear(&ep);
        }
        p += len;
        if (*p == ',') p++;
    }
    return SQLITE_OK;
}

/* The engine's cancel callback: whether sqlite3_interrupt() was called on
 * the connection (ctx) while the statement that waits runs. The host may
 * be older than sqlite3_is_interrupted (3.41), but every version stops
 * preparing at the first space while the flag is set, and the flag stays
 * set as long as a statement is active: preparing " " answers in about a
 * microsecond and compiles nothing. */
static int interrupted(void *ctx) {
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2((sqlite3 *)ctx, " ", 1, &st, NULL);
    sqlite3_finalize(st);
    return rc == SQLITE_INTERRUPT;
}

/* The session's on_lost callback: a lock taken with the on_lost setting
 * is lost or ran out of validity, so the statement running on the
 * connection (ctx) must not write on as if it held it. Called on the
 * keeper's thread or the caller's with the session's mutex held:
 * sqlite3_interrupt only sets a flag, is safe from any thread, and does
 * nothing when no statement runs. The db is never closed under it: the
 * session is freed by the last destructor sqlite3_close runs, before the
 * db itself, and its keeper is joined first thing there. */
static void interrupt_on_lost(void *ctx, const char *res, size_t reslen, const char *why) {
    (void)res;
    (void)reslen;
    (void)why;
    sqlite3_interrupt((sqlite3 *)ctx);
}

/* SQLITE_EXTENSION_INIT2 writes the API pointer on every load, while
 * other threads may be reading it through connections loaded before: a
 * data race, if one that writes the same value. It is written once here
 * instead: every load reads it atomically first (so a thread that uses the
 * extension is ordered after the write), and only the first loads take the
 * mutex (held for one store; once set, a fork never finds it taken). */
static void set_api(const sqlite3_api_routines *api) {
#ifdef SQLITE_CORE
    (void)api; /* built into SQLite itself (the fuzz targets): no API pointer */
#else
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    if (__atomic_load_n(&sqlite3_api, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&mu);
    if (!__atomic_load_n(&sqlite3_api, __ATOMIC_RELAXED)) __atomic_store_n(&sqlite3_api, api, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
#endif
}

/* The entry point SQLite looks for when loading "redlock". */
__attribute__((visibility("default"))) int sqlite3_redlock_init(sqlite3 *db, char **pzErrMsg,
                                                                const sqlite3_api_routines *pApi);

__attribute__((visibility("default"))) int sqlite3_redlock_init(sqlite3 *db, char **pzErrMsg,
                                                                const sqlite3_api_routines *pApi) {
    set_api(pApi);
    /* A second load would replace the state: every lock the connection
     * holds given back, the nodes it was given forgotten. */
    if (redlock_state_loaded_on(db)) return SQLITE_OK;
    redlock_state *st = redlock_state_new();
    if (!st) return SQLITE_NOMEM;
    rl_client_set_cancel(rl_session_client(st->session), interrupted, db);
    rl_session_set_on_lost(st->session, interrupt_on_lost, db);
    redlock_log_install(rl_session_client(st->session));
    int rc = seed_nodes(st, pzErrMsg);
    if (rc == SQLITE_OK) rc = redlock_register_functions(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_many(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_handover_functions(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_nodes_table(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_locks_table(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_stats_tables(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_events_table(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_fleet_tables(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_xact(db, st);
    if (rc == SQLITE_OK) redlock_state_mark_loaded(st, db); /* without memory, a second load replaces it */
    if (rc != SQLITE_OK && !*pzErrMsg) *pzErrMsg = sqlite3_mprintf("redlock: could not register: %s", sqlite3_errstr(rc));
    if (*pzErrMsg) rl_text_clean_inplace(*pzErrMsg, strlen(*pzErrMsg) + 1); /* a host name from REDLOCK_NODES */
    redlock_state_unref(st);
    return rc;
}
