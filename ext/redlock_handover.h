/* redlock_handover: redlock_detach and redlock_adopt, which hand a lock
 * from one connection (or process) to another.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_HANDOVER_H
#define REDLOCK_HANDOVER_H

#include "redlock_state.h"

/* Registers redlock_detach and redlock_adopt; SQLITE_OK or an error code. */
int redlock_register_handover_functions(sqlite3 *db, redlock_state *st);

#endif
