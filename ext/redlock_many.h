/* redlock_many: redlock_acquire_many and redlock_release_many.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_MANY_H
#define REDLOCK_MANY_H

#include "redlock_state.h"

/* Registers redlock_acquire_many and redlock_release_many; SQLITE_OK or an error code. */
int redlock_register_many(sqlite3 *db, redlock_state *st);

#endif
