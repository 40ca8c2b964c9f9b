/* redlock_txn: whether a release may run now. Releasing a lock while this
 * connection's writes are not yet committed lets the next holder read the
 * data as it was before them, so a release inside a write transaction is
 * refused unless the setting release_in_write_txn is 1 (for locks that
 * protect something other than this database). Writes to TEMP tables do
 * not count: no other connection can read them.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_TXN_H
#define REDLOCK_TXN_H

#include <sqlite3ext.h>

#include "redlock_state.h"

/* 1 when db has a write transaction open on main or an attached database
 * (the statement's own write, as in an UPDATE that calls the function,
 * counts), else 0. Hosts before 3.34 cannot say: 0. */
int redlock_txn_writing(sqlite3 *db);

/* 1 when fname (e.g. "redlock_release") may release locks now; else 0
 * with an error set on ctx that says to COMMIT first. */
int redlock_txn_release_allowed(sqlite3_context *ctx, redlock_state *st, const char *fname);

#endif
