/* redlock_txn: whether a release, or an extend that shortens a lock, may
 * run now. Releasing a lock while this connection's writes are not yet
 * committed lets the next holder read the data as it was before them, so a
 * release inside a write transaction is refused unless the setting
 * release_in_write_txn is 1 (for locks that protect something other than
 * this database), and so is an extend that could let the lock expire
 * first. Writes to TEMP tables do not count: no other connection can read
 * them.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_TXN_H
#define REDLOCK_TXN_H

#include <sqlite3ext.h>
#include <stddef.h>
#include <stdint.h>

#include "redlock_state.h"

/* 1 when db has a write transaction open on main or an attached database
 * (the statement's own write, as in an UPDATE that calls the function,
 * counts), else 0. Hosts before 3.34 cannot say: 0. */
int redlock_txn_writing(sqlite3 *db);

/* 1 when fname (e.g. "redlock_release") may release locks now; else 0
 * with an error set on ctx that says to COMMIT first. */
int redlock_txn_release_allowed(sqlite3_context *ctx, redlock_state *st, const char *fname);

/* 1 when redlock_extend may give res (held by this session, with token
 * when not NULL) a TTL of ttl_ms now: always, but for a TTL shorter than the
 * validity it has left while writes are uncommitted, which could let the
 * lock go before COMMIT as a release would; else 0 with an error on ctx
 * that gives the TTL to use. */
int redlock_txn_extend_allowed(sqlite3_context *ctx, redlock_state *st, const char *res, size_t reslen,
                               const char *token, size_t toklen, int64_t ttl_ms);

#endif
