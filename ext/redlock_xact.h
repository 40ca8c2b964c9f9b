/* redlock_xact: locks that belong to the open transaction
 * (redlock_acquire_xact, redlock_lock_xact), released right after its
 * COMMIT or ROLLBACK, and the COMMIT guard that rolls back a transaction
 * whose lock was lost.
 *
 * SQLite tells an extension that a transaction ended only through a
 * virtual table that took part in it: after the b-tree commit it calls
 * xCommit (the writes are durable and visible to other connections by
 * then), on any rollback (ROLLBACK, one an error forces, sqlite3_close)
 * xRollback, and before the commit xSync, whose error fails the COMMIT
 * with its message and rolls the transaction back. So the first acquire
 * of a transaction makes the connection's own table temp.redlock_xact
 * take part (a write of no rows to it, which creates it when missing):
 * TEMP, so no lock of any database file is taken. The commit hook is not
 * used: the hook slot is the application's, and the API gives back only
 * the previous hook's argument, never its function, so it cannot be
 * chained.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_XACT_H
#define REDLOCK_XACT_H

#include "redlock_state.h"

/* Registers the functions and the module of temp.redlock_xact; SQLITE_OK
 * or an error code. */
int redlock_register_xact(sqlite3 *db, redlock_state *st);

#endif
