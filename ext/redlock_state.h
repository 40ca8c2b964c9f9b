/* redlock_state: the per-connection state every SQL function and table of
 * the binding shares, and how their calls report errors. The binding opens
 * no socket; every network call goes through the engine in src/.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_STATE_H
#define REDLOCK_STATE_H

#include <sqlite3ext.h>

#include "rl_session.h"

/* One per SQLite connection, shared (reference-counted) by every function
 * and table registered on it; the last unref, at sqlite3_close, releases
 * every lock the connection still holds and frees the session. */
typedef struct redlock_state {
    int refs;
    rl_session *session;
    int default_nodes;  /* the node list is still the default 127.0.0.1:6379,
                           REDLOCK_NODES being unset */
    int xact_joined;    /* temp.redlock_xact takes part in the open transaction
                           (redlock_xact.c): set by its xBegin (or its xCreate in
                           a transaction), cleared at the transaction's end */
    int xact_joining;   /* redlock_acquire_xact is making it take part */
} redlock_state;

/* Added to a "too few nodes answered" error while the default node is all
 * there is: where nodes come from, and the way of setting them that works
 * in every host (Python's sqlite3 opens a transaction before the INSERT by
 * itself, so the change counts once it is committed). */
#define REDLOCK_DEFAULT_NODES_HINT                                                         \
    " (REDLOCK_NODES was not set when the extension was loaded, so the default node "       \
    "127.0.0.1:6379 is used: set REDLOCK_NODES, or DELETE FROM redlock_nodes and INSERT "   \
    "INTO redlock_nodes(url) VALUES ('redis://HOST:6379'), then COMMIT if a transaction "   \
    "is open (from Python: con.commit()) before taking a lock)"

/* A new state with a new session, one reference held by the caller; NULL
 * on OOM. */
redlock_state *redlock_state_new(void);

/* Takes one more reference and returns st. */
redlock_state *redlock_state_ref(redlock_state *st);

/* Drops one reference (a destructor for SQLite's registration calls). */
void redlock_state_unref(void *st);

/* Records that st is the state registered on db, until st is freed (at
 * sqlite3_close). Returns 0, or -1 without memory. */
int redlock_state_mark_loaded(redlock_state *st, sqlite3 *db);

/* Whether a state is registered on db (the extension is loaded there). */
int redlock_state_loaded_on(sqlite3 *db);

/* The state of the function's connection; first makes sure a forked child
 * does not act on its parent's locks or sockets (rl_session_check_fork). */
redlock_state *redlock_state_of(sqlite3_context *ctx);

/* Sets an error result "redlock: <msg>" on ctx, made safe to show
 * (rl_text_clean: whole UTF-8 characters, no control characters). */
void redlock_result_error(sqlite3_context *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets the virtual table's error message "redlock: <msg>", cleaned the same
 * way, and returns SQLITE_ERROR (for xUpdate, xBegin, ...). */
int redlock_vtab_error(sqlite3_vtab *vt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether v is a whole number: an INTEGER, or a REAL without a fraction
 * within the int64 range (some hosts, such as Node's better-sqlite3, bind
 * every number as REAL); 1 with *out set. */
int redlock_value_whole(sqlite3_value *v, int64_t *out);

#endif
