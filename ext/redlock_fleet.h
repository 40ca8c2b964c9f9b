/* redlock_fleet: the read-only tables redlock_fleet_locks (the locks held
 * on the nodes, whoever took them) and redlock_fleet_waiters (the traces
 * of waiters on the nodes), read with SCAN under the key prefix.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_FLEET_H
#define REDLOCK_FLEET_H

#include "redlock_state.h"

/* Registers redlock_fleet_locks and redlock_fleet_waiters; SQLITE_OK or an
 * error code. */
int redlock_register_fleet_tables(sqlite3 *db, redlock_state *st);

#endif
