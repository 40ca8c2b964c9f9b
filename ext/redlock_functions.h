/* redlock_functions: the single-lock SQL functions (acquire, lock, release,
 * extend, validity, fence, config, version) and the argument readers and
 * outcome reporting the other function files share.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_FUNCTIONS_H
#define REDLOCK_FUNCTIONS_H

#include "redlock_state.h"

/* Registers the SQL functions; SQLITE_OK or an error code. */
int redlock_register_functions(sqlite3 *db, redlock_state *st);

/* Argument readers: each sets an error on ctx and returns NULL when the
 * value is unusable. */
const char *redlock_arg_resource(sqlite3_context *ctx, sqlite3_value *v, size_t *len);
const char *redlock_arg_token(sqlite3_context *ctx, sqlite3_value *v, size_t *len);

/* Reads a whole number of milliseconds in [lo, hi] (an INTEGER or a whole
 * REAL) into *out; -1 with an error set on ctx otherwise. */
int redlock_arg_ms(sqlite3_context *ctx, sqlite3_value *v, const char *name, int64_t lo, int64_t hi, int64_t *out);

/* NULL for a refusal, an error for anything else ("could not <what> ..."). */
void redlock_result_failure(sqlite3_context *ctx, const char *what, const char *res, const rl_outcome *o);

#endif
