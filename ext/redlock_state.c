/* redlock_state: the per-connection state shared by the binding's
 * functions and tables, and their error reporting.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_state.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_text.h"

SQLITE_EXTENSION_INIT3

/* The connections the extension is registered on, and their states: a
 * process has few connections, so a list will do. */
typedef struct loaded_entry {
    sqlite3 *db;
    redlock_state *st;
    struct loaded_entry *next;
} loaded_entry;
static loaded_entry *loaded_list;
static pthread_mutex_t loaded_mu = PTHREAD_MUTEX_INITIALIZER;

int redlock_state_mark_loaded(redlock_state *st, sqlite3 *db) {
    loaded_entry *e = malloc(sizeof *e);
    if (!e) return -1;
    e->db = db;
    e->st = st;
    pthread_mutex_lock(&loaded_mu);
    e->next = loaded_list;
    loaded_list = e;
    pthread_mutex_unlock(&loaded_mu);
    return 0;
}

int redlock_state_loaded_on(sqlite3 *db) {
    pthread_mutex_lock(&loaded_mu);
    const loaded_entry *e = loaded_list;
    while (e && e->db != db) e = e->next;
    pthread_mutex_unlock(&loaded_mu);
    return e != NULL;
}

/* st is freed: its connection is closing, and its pointer may come back
 * as another connection's. */
static void forget_loaded(const redlock_state *st) {
    pthread_mutex_lock(&loaded_mu);
    for (loaded_entry **p = &loaded_list; *p;) {
        loaded_entry *e = *p;
        if (e->st == st) {
            *p = e->next;
            free(e);
        } else {
            p = &e->next;
        }
    }
    pthread_mutex_unlock(&loaded_mu);
}

redlock_state *redlock_state_new(void) {
    redlock_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->refs = 1;
    st->session = rl_session_new();
    if (!st->session) {
        free(st);
        return NULL;
    }
    return st;
}

redlock_state *redlock_state_ref(redlock_state *st) {
    st->refs++;
    return st;
}

void redlock_state_unref(void *p) {
    redlock_state *st = p;
    if (!st || --st->refs > 0) return;
    forget_loaded(st);
    rl_session_free(st->session);
    free(st);
}

void redlock_result_error(sqlite3_context *ctx, const char *fmt, ...) {
    char msg[RL_ERR_MAX + 200]; /* "redlock: ", a context, and an engine message */
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(msg, sizeof msg, "redlock: ");
    vsnprintf(msg + k, sizeof msg - (size_t)k, fmt, ap);
    va_end(ap);
    rl_text_clean_inplace(msg, sizeof msg);
    sqlite3_result_error(ctx, msg, -1);
}

int redlock_vtab_error(sqlite3_vtab *vt, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *msg = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_free(vt->zErrMsg);
    vt->zErrMsg = msg ? sqlite3_mprintf("redlock: %s", msg) : NULL;
    sqlite3_free(msg);
    if (vt->zErrMsg) rl_text_clean_inplace(vt->zErrMsg, strlen(vt->zErrMsg) + 1);
    return SQLITE_ERROR;
}

int redlock_value_whole(sqlite3_value *v, int64_t *out) {
    if (sqlite3_value_type(v) == SQLITE_INTEGER) {
        *out = sqlite3_value_int64(v);
        return 1;
    }
    double d = sqlite3_value_double(v);
    if (sqlite3_value_type(v) != SQLITE_FLOAT || !(d >= -9.0e18 && d <= 9.0e18) || (double)(int64_t)d != d) return 0;
    *out = (int64_t)d;
    return 1;
}

redlock_state *redlock_state_of(sqlite3_context *ctx) {
    redlock_state *st = sqlite3_user_data(ctx);
    rl_session_check_fork(st->session);
    return st;
}
