/* redlock_log: the engine's events (rl_client_set_events) as sqlite3_log lines, each
 * with an extended error code of its own, so an application that installs
 * SQLITE_CONFIG_LOG sees them; without one, SQLite drops them.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_LOG_H
#define REDLOCK_LOG_H

#include <sqlite3ext.h>

#include "rl_client.h"

/* The codes: SQLITE_WARNING or SQLITE_NOTICE with a sub-code from 101 up,
 * far from the few SQLite uses itself (1 to 3). */
#define REDLOCK_LOG_NODE_DOWN    (SQLITE_WARNING | (101 << 8))
#define REDLOCK_LOG_NODE_UP      (SQLITE_NOTICE | (102 << 8))
#define REDLOCK_LOG_LOCK_LOST    (SQLITE_WARNING | (103 << 8))
#define REDLOCK_LOG_NO_QUORUM    (SQLITE_WARNING | (104 << 8))
#define REDLOCK_LOG_NODE_REFUSED (SQLITE_WARNING | (105 << 8))
#define REDLOCK_LOG_EXTEND_FAILED (SQLITE_WARNING | (106 << 8))
#define REDLOCK_LOG_LOCK_EXPIRED  (SQLITE_WARNING | (107 << 8))

/* Bytes of a message kept (longer ones end in "..."). */
#define REDLOCK_LOG_MAX 200

/* Makes client c report its events through sqlite3_log. */
void redlock_log_install(rl_client *c);

#endif
