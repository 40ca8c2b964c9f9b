/* redlock_nodes: the writable table of this connection's Redis nodes.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_NODES_H
#define REDLOCK_NODES_H

#include "redlock_state.h"

/* Registers the redlock_nodes table; SQLITE_OK or an error code. */
int redlock_register_nodes_table(sqlite3 *db, redlock_state *st);

#endif
