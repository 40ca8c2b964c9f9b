/* redlock_vtab: what the two virtual tables (redlock_nodes, redlock_locks)
 * share: connecting with a declared schema, and a cursor over rows copied
 * when a scan starts.
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

/* SQLITE_OK when xConnect's argv names the table the extension made
 * itself (the module's own name, in main). A database file can declare
 * `CREATE VIRTUAL TABLE servers USING redlock_nodes` in its schema
 * (writable_schema) and SQLite then connects it whatever xCreate says:
 * the user's own statements on such a name would change the nodes or show
 * tokens. Otherwise SQLITE_ERROR with *err (sqlite3_malloc'ed) saying why. */
int redlock_vtab_own_name(int argc, const char *const *argv, char **err);

/* Declares schema, keeps the table out of views and triggers
 * (SQLITE_VTAB_DIRECTONLY), and allocates a zeroed table object of size
 * bytes (a struct whose first member is redlock_vtab) into *out, with
 * st (the module's aux) and db set. */
int redlock_vtab_connect(sqlite3 *db, void *st, const char *schema, size_t size, sqlite3_vtab **out);

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
