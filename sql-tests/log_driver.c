/* log_driver: a host application that installs SQLITE_CONFIG_LOG, loads
 * the extension and runs SQL read from stdin, one statement per line. It
 * prints "log <code> <message>" for every sqlite3_log line (from any
 * thread), "row <values|...>" per result row, "error <message>" and then
 * "ok" after each statement, so a test can drive it step by step.
 *   cc -o log_driver log_driver.c -lsqlite3 -lpthread
 *   log_driver ./redlock.so < statements
 * SPDX-License-Identifier: BSD-3-Clause */
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;

static void on_log(void *arg, int code, const char *msg) {
    (void)arg;
    pthread_mutex_lock(&out_mu);
    printf("log %d %s\n", code, msg);
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
}

static void say(const char *what, const char *text) {
    pthread_mutex_lock(&out_mu);
    printf("%s %s\n", what, text ? text : "");
    fflush(stdout);
    pthread_mutex_unlock(&out_mu);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: log_driver EXTENSION < statements\n");
        return 2;
    }
    sqlite3_config(SQLITE_CONFIG_LOG, on_log, NULL);
    sqlite3 *db;
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) return 1;
    sqlite3_enable_load_extension(db, 1);
    char *err = NULL;
    if (sqlite3_load_extension(db, argv[1], NULL, &err) != SQLITE_OK) {
        say("error", err);
        return 1;
    }
    say("loaded", "");
    char line[4096];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = '\0';
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, line, -1, &st, NULL) != SQLITE_OK) {
            say("error", sqlite3_errmsg(db));
            say("ok", "");
            continue;
        }
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
            char row[4096] = "";
            for (int i = 0; i < sqlite3_column_count(st); i++) {
                const char *v = (const char *)sqlite3_column_text(st, i);
                size_t k = strlen(row);
                snprintf(row + k, sizeof row - k, "%s%s", i ? "|" : "", v ? v : "NULL");
            }
            say("row", row);
        }
        if (rc != SQLITE_DONE) say("error", sqlite3_errmsg(db));
        sqlite3_finalize(st);
        say("ok", "");
    }
    sqlite3_close(db);
    return 0;
}
