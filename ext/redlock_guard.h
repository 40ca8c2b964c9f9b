/* redlock_guard: refuses a call of a function with side effects while a
 * database the running statements use has a schema that names it.
 *
 * SQLite refuses a SQLITE_DIRECTONLY function in schema code only where its
 * resolver marks the call as coming from DDL; before 3.50.0 it marks only
 * deterministic functions there, so a CHECK constraint in a database file
 * can call ours. No SQL API tells a function which expression called it, so
 * the guard looks at what could call it: a function is refused while the
 * stored `sql` of any schema row of main or an attached database that the
 * connection has a transaction open on names it (any mention, quoted or
 * not, case-insensitive), whatever the statement that is running says.
 * TEMP objects are left out, as SQLite leaves them out: only this
 * connection's own SQL can create them.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_GUARD_H
#define REDLOCK_GUARD_H

#include <stddef.h>

#include <sqlite3ext.h>

/* The guarded functions (index into redlock_guard_name). */
typedef enum {
    REDLOCK_G_ACQUIRE,
    REDLOCK_G_LOCK,
    REDLOCK_G_RELEASE,
    REDLOCK_G_RELEASE_ALL,
    REDLOCK_G_EXTEND,
    REDLOCK_G_CONFIG,
    REDLOCK_G_ACQUIRE_SHARED,
    REDLOCK_G_ACQUIRE_MANY,
    REDLOCK_G_RELEASE_MANY,
    REDLOCK_G_DETACH,
    REDLOCK_G_ADOPT,
    REDLOCK_G_PING,
    REDLOCK_G_HOLDER,
    REDLOCK_G_ACQUIRE_XACT,
    REDLOCK_G_LOCK_XACT,
    REDLOCK_G_COUNT
} redlock_guarded;

/* The SQL name of a guarded function. */
const char *redlock_guard_name(redlock_guarded fn);

/* Which guarded names text (n bytes, NULs included) mentions: bit 1 << fn
 * for each. A mention is the name in any letter case with no identifier
 * byte (A-Z a-z 0-9 _ $ or any byte >= 0x80) right before or after it, so
 * it is found bare, quoted ("x", [x], `x`) and inside strings alike. */
unsigned redlock_guard_mentions(const char *text, size_t n);

/* 1 when fn may run on ctx's connection; else 0 with an error set on ctx
 * (which database and object name it, or why a schema could not be read:
 * the guard fails closed). */
int redlock_guard_allows(sqlite3_context *ctx, redlock_guarded fn, int argc, sqlite3_value **argv);

#ifdef REDLOCK_GUARD_HOOK
/* Fuzz builds only: called with every call the guard lets through. */
extern void (*redlock_guard_hook)(redlock_guarded fn, int argc, sqlite3_value **argv);
#endif

#endif
