/* redlock_locks: the read-only table of the locks this connection holds.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_LOCKS_H
#define REDLOCK_LOCKS_H

#include "redlock_state.h"

/* Registers the redlock_locks table; SQLITE_OK or an error code. */
int redlock_register_locks_table(sqlite3 *db, redlock_state *st);

#endif
