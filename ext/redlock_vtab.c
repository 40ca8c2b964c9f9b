/* redlock_vtab: the pieces the extension's virtual tables share (see redlock_vtab.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_vtab.h"

#include <string.h>

#include "rl_text.h"

SQLITE_EXTENSION_INIT3

/* A copy of name that is safe to show: the file chose it, and may have put
 * escape sequences or bytes that are not UTF-8 in it. */
static const char *shown(char *out, size_t outlen, int argc, const char *const *argv, int i) {
    const char *name = i < argc && argv[i] ? argv[i] : "?";
    rl_text_clean(out, outlen, name, strlen(name));
    return out;
}

/* Whether xConnect's argv names the table the extension made itself (see
 * redlock_vtab_connect). */
static int own_name(int argc, const char *const *argv, char **err) {
    if (argc == 3 && sqlite3_stricmp(argv[0], argv[2]) == 0 && sqlite3_stricmp(argv[1], "main") == 0) return SQLITE_OK;
    char schema[128], table[128], module[64];
    shown(module, sizeof module, argc, argv, 0);
    *err = sqlite3_mprintf("redlock: the table %s.%s is declared by a database file as USING %s; the extension's "
                           "tables are used only under their own names, so a file cannot give them another (use "
                           "main.%s, or open the database without that file)",
                           shown(schema, sizeof schema, argc, argv, 1), shown(table, sizeof table, argc, argv, 2),
                           module, module);
    return SQLITE_ERROR;
}

int redlock_vtab_connect(sqlite3 *db, void *st, int argc, const char *const *argv, char **err, const char *schema,
                         size_t size, sqlite3_vtab **out) {
    int rc = own_name(argc, argv, err);
    if (rc != SQLITE_OK) return rc;
    rc = sqlite3_declare_vtab(db, schema);
    if (rc != SQLITE_OK) return rc;
    sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
    redlock_vtab *vt = sqlite3_malloc64(size);
    if (!vt) return SQLITE_NOMEM;
    memset(vt, 0, size);
    vt->st = st;
    vt->db = db;
    *out = &vt->base;
    return SQLITE_OK;
}

int redlock_vtab_disconnect(sqlite3_vtab *vt) {
    sqlite3_free(vt);
    return SQLITE_OK;
}

int redlock_vtab_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) {
    (void)vt;
    info->estimatedCost = 10;
    info->estimatedRows = 10;
    return SQLITE_OK;
}

int redlock_cursor_open(size_t size, sqlite3_vtab_cursor **out) {
    sqlite3_vtab_cursor *cur = sqlite3_malloc64(size);
    if (!cur) return SQLITE_NOMEM;
    memset(cur, 0, size);
    *out = cur;
    return SQLITE_OK;
}

int redlock_cursor_next(sqlite3_vtab_cursor *c) {
    ((redlock_cursor *)c)->i++;
    return SQLITE_OK;
}

int redlock_cursor_eof(sqlite3_vtab_cursor *c) {
    const redlock_cursor *cur = (const redlock_cursor *)c;
    return cur->i >= cur->n;
}
