/* redlock_ext: the extension's entry point. It
 * creates the connection's state (redlock_state.h) and registers each
 * file's SQL functions and tables; nothing calls back into it.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef REDLOCK_EXT_H
#define REDLOCK_EXT_H

#include <sqlite3ext.h>

/* The entry point SQLite looks for when loading "redlock". */
__attribute__((visibility("default"))) int sqlite3_redlock_init(sqlite3 *db, char **pzErrMsg,
                                                                const sqlite3_api_routines *pApi);

#endif
