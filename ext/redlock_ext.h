/* redlock_ext: what the files of the SQLite binding share: the
 * per-connection state object and the registration functions. The binding
 * opens no socket; every network call goes through the engine in src/.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_EXT_H
#define REDLOCK_EXT_H

#include <sqlite3ext.h>

#include "rl_session.h"
#include "rl_text.h"

#define REDLOCK_VERSION "0.1.0"

/* One per SQLite connection, shared (reference-counted) by every function
 * and table registered on it; the last unref, at sqlite3_close, releases
 * every lock the connection still holds and frees the session. */
typedef struct redlock_state {
    int refs;
    rl_session *session;
    int default_nodes;  /* the node list is still the default 127.0.0.1:6379,
                           REDLOCK_NODES being unset */
} redlock_state;

/* Takes one more reference and returns st. */
redlock_state *redlock_state_ref(redlock_state *st);

/* Drops one reference (a destructor for SQLite's registration calls). */
void redlock_state_unref(void *st);

/* Registers the SQL functions; SQLITE_OK or an error code. */
int redlock_register_functions(sqlite3 *db, redlock_state *st);

/* Registers redlock_acquire_many and redlock_release_many; SQLITE_OK or an error code. */
int redlock_register_many(sqlite3 *db, redlock_state *st);
/* Registers redlock_detach and redlock_adopt; SQLITE_OK or an error code. */
int redlock_register_handover_functions(sqlite3 *db, redlock_state *st);

/* Argument readers and outcome reporting shared by the SQL functions
 * (redlock_functions.c): each sets an error on ctx and returns NULL when
 * the value is unusable. */
const char *redlock_arg_resource(sqlite3_context *ctx, sqlite3_value *v, size_t *len);
const char *redlock_arg_token(sqlite3_context *ctx, sqlite3_value *v, size_t *len);
/* NULL for a refusal, an error for anything else ("could not <what> ..."). */
void redlock_result_failure(sqlite3_context *ctx, const char *what, const char *res, const rl_outcome *o);
/* The connection's state, after rl_session_check_fork. */
redlock_state *redlock_state_of(sqlite3_context *ctx);

/* Registers the redlock_nodes table; SQLITE_OK or an error code. */
int redlock_register_nodes_table(sqlite3 *db, redlock_state *st);

/* Registers the redlock_locks table; SQLITE_OK or an error code. */
int redlock_register_locks_table(sqlite3 *db, redlock_state *st);

/* Registers redlock_stats and redlock_lock_stats; SQLITE_OK or an error code. */
int redlock_register_stats_tables(sqlite3 *db, redlock_state *st);

/* Sets an error result "redlock: <msg>" on ctx, made safe to show
 * (rl_text_clean: whole UTF-8 characters, no control characters). */
void redlock_result_error(sqlite3_context *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets the virtual table's error message "redlock: <msg>", cleaned the same
 * way, and returns SQLITE_ERROR (for xUpdate, xBegin, ...). */
int redlock_vtab_error(sqlite3_vtab *vt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
