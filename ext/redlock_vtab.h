/* redlock_vtab: what the extension's virtual tables share: connecting
 * (only under their own names) with a declared schema, and, for
 * redlock_nodes and redlock_locks, a cursor over rows copied when a scan
 * starts.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_VTAB_H
#define REDLOCK_VTAB_H

#include <stddef.h>

#include <sqlite3ext.h>

#include "redlock_state.h"

/* The first member of each table object: the connection's state and db. */
typedef struct redlock_vtab {
    sqlite3_vtab base;
    redlock_state *st;
    sqlite3 *db;
} redlock_vtab;

/* The first member of each table's cursor: the row count and position. */
typedef struct redlock_cursor {
    sqlite3_vtab_cursor base;
    int n, i;
} redlock_cursor;

/* xConnect of every table of the extension: refuses (SQLITE_ERROR, *err
 * saying why) a table other than the one the extension made itself, under
 * the module's own name in main (argc, argv as xConnect has them): a
 * database file can declare `CREATE VIRTUAL TABLE servers USING
 * redlock_nodes` in its schema (writable_schema), and SQLite connects it
 * whatever xCreate says, so the user's own statements on that name would
 * change the nodes or show tokens. Then declares schema, keeps the table
 * out of views and triggers (SQLITE_VTAB_DIRECTONLY), and allocates a
 * zeroed table object of size bytes (a struct whose first member is
 * redlock_vtab) into *out, with st (the module's aux) and db set. */
int redlock_vtab_connect(sqlite3 *db, void *st, int argc, const char *const *argv, char **err, const char *schema,
                         size_t size, sqlite3_vtab **out);

/* xDisconnect and xDestroy of a table that owns nothing else. */
int redlock_vtab_disconnect(sqlite3_vtab *vt);

/* xBestIndex: a full scan of a few rows. */
int redlock_vtab_best_index(sqlite3_vtab *vt, sqlite3_index_info *info);

/* Allocates a zeroed cursor of size bytes (a struct whose first member is
 * redlock_cursor) into *out. */
int redlock_cursor_open(size_t size, sqlite3_vtab_cursor **out);

int redlock_cursor_next(sqlite3_vtab_cursor *c);
int redlock_cursor_eof(sqlite3_vtab_cursor *c);

#endif
