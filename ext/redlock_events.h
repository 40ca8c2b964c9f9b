/* redlock_events: the read-only table of this connection's recent events
 * (what sqlite3_log carries: nodes down, up and refused, acquisitions
 * without a quorum, locks lost or expired, extensions to be tried again),
 * for the shell, Python and Node, which cannot see that log.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_EVENTS_H
#define REDLOCK_EVENTS_H

#include "redlock_state.h"

/* Registers the redlock_events table; SQLITE_OK or an error code. */
int redlock_register_events_table(sqlite3 *db, redlock_state *st);

#endif
