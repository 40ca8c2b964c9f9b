/* redlock_ext: the extension's entry point. It creates the per-connection
 * state, seeds redlock_nodes from REDLOCK_NODES (or 127.0.0.1:6379), and
 * registers the SQL functions and tables.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_ext.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

SQLITE_EXTENSION_INIT1

redlock_state *redlock_state_ref(redlock_state *st) {
    st->refs++;
    return st;
}

void redlock_state_unref(void *p) {
    redlock_state *st = p;
    if (!st || --st->refs > 0) return;
    rl_session_free(st->session);
    free(st);
}

void redlock_result_error(sqlite3_context *ctx, const char *fmt, ...) {
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(msg, sizeof msg, "redlock: ");
    vsnprintf(msg + k, sizeof msg - (size_t)k, fmt, ap);
    va_end(ap);
    sqlite3_result_error(ctx, msg, -1);
}

/* Adds the nodes listed in REDLOCK_NODES, or the default node. */
static int seed_nodes(rl_client *c, char **pzErrMsg) {
    const char *env = getenv("REDLOCK_NODES");
    char err[300];
    if (!env) {
        rl_endpoint ep = {.host = "127.0.0.1", .port = 6379};
        if (rl_client_add_node(c, &ep, 0, err, sizeof err) > 0) return SQLITE_OK;
        *pzErrMsg = sqlite3_mprintf("redlock: default node 127.0.0.1:6379: %s", err);
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
            if (rl_endpoint_parse_url(s, n, &ep, err, sizeof err) != 0 || rl_client_add_node(c, &ep, 0, err, sizeof err) < 0) {
                rl_endpoint_clear(&ep);
                *pzErrMsg = sqlite3_mprintf("redlock: REDLOCK_NODES: %s", err);
                return SQLITE_ERROR;
            }
            rl_endpoint_clear(&ep);
        }
        p += len;
        if (*p == ',') p++;
    }
    return SQLITE_OK;
}

/* The entry point SQLite looks for when loading "redlock". */
__attribute__((visibility("default"))) int sqlite3_redlock_init(sqlite3 *db, char **pzErrMsg,
                                                                const sqlite3_api_routines *pApi);

__attribute__((visibility("default"))) int sqlite3_redlock_init(sqlite3 *db, char **pzErrMsg,
                                                                const sqlite3_api_routines *pApi) {
    SQLITE_EXTENSION_INIT2(pApi);
    redlock_state *st = calloc(1, sizeof *st);
    if (!st) return SQLITE_NOMEM;
    st->refs = 1;
    st->session = rl_session_new();
    if (!st->session) {
        free(st);
        return SQLITE_NOMEM;
    }
    int rc = seed_nodes(st->session->client, pzErrMsg);
    if (rc == SQLITE_OK) rc = redlock_register_functions(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_nodes_table(db, st);
    if (rc == SQLITE_OK) rc = redlock_register_locks_table(db, st);
    if (rc != SQLITE_OK && !*pzErrMsg) *pzErrMsg = sqlite3_mprintf("redlock: could not register: %s", sqlite3_errstr(rc));
    redlock_state_unref(st);
    return rc;
}
