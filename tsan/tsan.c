/* tsan: runs redlock.so (built with -fsanitize=thread) from many threads
 * inside the system SQLite, so ThreadSanitizer sees every path where the
 * extension's threads meet: the keeper extending while its owner acquires,
 * extends, lists and releases; acquires waiting for a lock another thread
 * holds and woken by its release; connections closed while their keeper
 * is extending; a lock taken with on_lost left to run out, the keeper
 * writing its event and interrupting the connection while this thread
 * reads redlock_events or closes it.
 *
 *   tsan conns SECONDS   THREADS threads, one connection each
 *   tsan shared SECONDS  THREADS threads sharing one connection opened with
 *                        SQLITE_OPEN_FULLMUTEX (SQLite serializes the calls;
 *                        the keeper still runs beside them)
 *
 * REDLOCK_NODES names the nodes, REDLOCK_TSAN_EXT the extension (without
 * .so). Prints one "N passed, N failed" line: a step fails when a call did
 * not do what healthy nodes make certain. Races are ThreadSanitizer's to
 * report (the runner fails on any report).
 * SPDX-License-Identifier: BSD-3-Clause */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sqlite3.h>

#define THREADS 8

static const char *ext_path;
static double run_seconds;
static int failures;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

static void failed(const char *what, sqlite3 *db) {
    pthread_mutex_lock(&fail_mu);
    failures++;
    if (failures <= 20) fprintf(stderr, "tsan: %s: %s\n", what, db ? sqlite3_errmsg(db) : "");
    pthread_mutex_unlock(&fail_mu);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static sqlite3 *open_db(int flags) {
    sqlite3 *db = NULL;
    char *err = NULL;
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | flags, NULL) != SQLITE_OK) {
        failed("open", db);
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_enable_load_extension(db, 1);
    if (sqlite3_load_extension(db, ext_path, "sqlite3_redlock_init", &err) != SQLITE_OK) {
        fprintf(stderr, "tsan: load %s: %s\n", ext_path, err ? err : "?");
        sqlite3_free(err);
        sqlite3_close(db);
        exit(2);
    }
    return db;
}

/* Runs sql with text parameters; the first column of its one row as an
 * integer (*is_null set when NULL), or -1 after an error. */
static long long q(sqlite3 *db, const char *sql, const char *a, const char *b, int *is_null) {
    sqlite3_stmt *st;
    long long v = -1;
    if (is_null) *is_null = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        failed(sql, db);
        return -1;
    }
    if (a) sqlite3_bind_text(st, 1, a, -1, SQLITE_TRANSIENT);
    if (b) sqlite3_bind_text(st, 2, b, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        if (is_null) *is_null = sqlite3_column_type(st, 0) == SQLITE_NULL;
        v = sqlite3_column_int64(st, 0);
    } else if (rc != SQLITE_DONE) {
        failed(sql, db);
    }
    sqlite3_finalize(st);
    return v;
}

/* One round of work on db under names made from tag: locks the keeper
 * extends while this thread lists, extends and releases them. */
static void own_locks(sqlite3 *db, const char *tag, int round) {
    char a[64], b[64];
    snprintf(a, sizeof a, "tsan:%s:a", tag);
    snprintf(b, sizeof b, "tsan:%s:b:%d", tag, round % 4);
    int nul;
    q(db, "SELECT redlock_acquire(?1, 1500)", a, NULL, &nul);
    if (nul) failed("acquire of a free lock", NULL);
    q(db, "SELECT redlock_acquire(?1, 1800)", b, NULL, &nul);
    if (nul) failed("acquire of a free lock", NULL);
    /* Past a keeper period, asking all along: the keeper extends while this
     * thread reads what it writes. (TTLs leave room for a host made slow by
     * ThreadSanitizer and other work: a lock that expired is no race.) */
    double until = now_s() + 0.55;
    while (now_s() < until)
        if (q(db, "SELECT redlock_validity(?1) > 0", a, NULL, NULL) != 1) failed("validity of a held lock", db);
    if (q(db, "SELECT count(*) FROM redlock_locks WHERE state = 'held'", NULL, NULL, NULL) < 2)
        failed("two locks listed as held", db);
    if (q(db, "SELECT redlock_validity(?1) > 0", a, NULL, NULL) != 1) failed("validity of a held lock", db);
    q(db, "SELECT redlock_extend(?1, 1600)", a, NULL, &nul);
    if (nul) failed("extend of a held lock", NULL);
    if (q(db, "SELECT redlock_release(?1)", b, NULL, NULL) != 1) failed("release", db);
    if (round % 3 == 0 && q(db, "SELECT redlock_release(?1)", a, NULL, NULL) != 1) failed("release", db);
}

/* Waits for a lock the other threads take too: the wait, its wake-up on
 * their release, and a hand-off. */
static void contend(sqlite3 *db) {
    int nul;
    q(db, "SELECT redlock_acquire('tsan:hot', 2000, 3000)", NULL, NULL, &nul);
    if (nul) {
        failed("a 3 s wait for a lock held 5 ms at a time", NULL);
        return;
    }
    sleep_ms(5);
    if (q(db, "SELECT redlock_release('tsan:hot')", NULL, NULL, NULL) != 1) failed("release of the hot lock", db);
}

/* Like q, for statements that the keeper may interrupt (on_lost): errors
 * are not failures. */
static void q_quiet(sqlite3 *db, const char *sql, const char *a) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return;
    if (a) sqlite3_bind_text(st, 1, a, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW) {
    }
    sqlite3_finalize(st);
}

/* A lock taken with on_lost and no auto-extension, left to run out (its
 * TTL varies with round, so the keeper's interrupt comes before, during or
 * after the reads of redlock_events, or the close that follows). Nothing
 * after it but the close, which an interrupt cannot fail. */
static void run_out(sqlite3 *db, const char *tag, int round) {
    char res[64], sql[128];
    snprintf(res, sizeof res, "tsan:out:%s", tag);
    q_quiet(db, "SELECT redlock_config('on_lost', 1), redlock_config('auto_extend', 0)", NULL);
    snprintf(sql, sizeof sql, "SELECT redlock_acquire(?1, %d)", 100 + (round % 4) * 100);
    q_quiet(db, sql, res);
    double until = now_s() + 0.2;
    while (now_s() < until) q_quiet(db, "SELECT count(*), max(id) FROM redlock_events", NULL);
}

static void *conn_thread(void *arg) {
    int id = (int)(long)arg;
    double end = now_s() + run_seconds;
    for (int round = 0; now_s() < end; round++) {
        sqlite3 *db = open_db(SQLITE_OPEN_NOMUTEX);
        if (!db) return NULL;
        q(db, "SELECT redlock_config('auto_extend', 1)", NULL, NULL, NULL);
        char tag[32];
        snprintf(tag, sizeof tag, "c%d", id);
        for (int k = 0; k < 3 && now_s() < end; k++) {
            own_locks(db, tag, round * 3 + k);
            contend(db);
        }
        /* closed with locks held and the keeper running: it must stop
         * first, then they are given back */
        q(db, "SELECT redlock_acquire('tsan:close:' || ?1, 600)", tag, NULL, NULL);
        run_out(db, tag, round);
        sleep_ms(50);
        sqlite3_close(db);
    }
    return NULL;
}

typedef struct shared_arg {
    sqlite3 *db;
    int id;
} shared_arg;

static void *shared_thread(void *arg) {
    shared_arg *sa = arg;
    char tag[32];
    snprintf(tag, sizeof tag, "s%d", sa->id);
    double end = now_s() + run_seconds;
    for (int round = 0; now_s() < end; round++) {
        own_locks(sa->db, tag, round);
        q(sa->db, "SELECT count(*) FROM redlock_nodes", NULL, NULL, NULL);
    }
    return NULL;
}

static int run(int shared) {
    pthread_t t[THREADS];
    shared_arg sa[THREADS];
    sqlite3 *db = NULL;
    if (shared) {
        db = open_db(SQLITE_OPEN_FULLMUTEX);
        if (!db) return 1;
        q(db, "SELECT redlock_config('auto_extend', 1)", NULL, NULL, NULL);
    }
    for (int i = 0; i < THREADS; i++) {
        sa[i] = (shared_arg){db, i};
        int rc = shared ? pthread_create(&t[i], NULL, shared_thread, &sa[i])
                        : pthread_create(&t[i], NULL, conn_thread, (void *)(long)i);
        if (rc != 0) {
            failed("pthread_create", NULL);
            return 1;
        }
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    if (shared) {
        if (q(db, "SELECT redlock_release_all() >= 0", NULL, NULL, NULL) != 1) failed("release_all", db);
        sqlite3_close(db);
    }
    return 0;
}

int main(int argc, char **argv) {
    ext_path = getenv("REDLOCK_TSAN_EXT");
    if (argc != 3 || !ext_path || !getenv("REDLOCK_NODES") ||
        (strcmp(argv[1], "conns") != 0 && strcmp(argv[1], "shared") != 0)) {
        fprintf(stderr, "usage: REDLOCK_NODES=... REDLOCK_TSAN_EXT=path tsan conns|shared SECONDS\n");
        return 2;
    }
    run_seconds = atof(argv[2]);
    if (sqlite3_threadsafe() == 0) {
        fprintf(stderr, "tsan: this libsqlite3 is built without thread support\n");
        return 2;
    }
    run(strcmp(argv[1], "shared") == 0);
    printf("tsan %s: %d threads, %.0f s: %s\n", argv[1], THREADS, run_seconds, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
