/* redlock_stats: the read-only tables redlock_stats (per node) and
 * redlock_lock_stats (per name used by this connection).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_STATS_H
#define REDLOCK_STATS_H

#include "redlock_state.h"

/* Registers redlock_stats and redlock_lock_stats; SQLITE_OK or an error code. */
int redlock_register_stats_tables(sqlite3 *db, redlock_state *st);

#endif
