/* driver: runs redlock.so inside real SQLite (the system libsqlite3) and
 * times it.
 *
 *   driver cycles EXT NODES FENCING PREFIX SECONDS
 *     One SQL statement loops over a recursive CTE (the library has no
 *     generate_series; the sqlite3 shell's is used by the memory test):
 *
 *       WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<N)
 *       SELECT sum(bench_lap(redlock_release(P||i, redlock_acquire(P||i, 10000)))) FROM s
 *
 *     redlock_release gets the very token redlock_acquire returned (a NULL
 *     token would raise an error), and the sum must equal N: every lock was
 *     taken and then deleted on a quorum. bench_lap(x) is a function of ours
 *     that returns x and records CLOCK_MONOTONIC minus its previous call, so
 *     each row's lap is one full cycle as SQLite runs it (acquire, release,
 *     the CTE step and the aggregate), with no extra round trip to the
 *     driver. N is set from a 300-cycle warm-up statement so that the timed
 *     statement lasts about SECONDS. Prints one JSON line.
 *
 *   driver handoff EXT NODES RESOURCE ID SHMFILE START_NS END_NS
 *     One of several processes contending for RESOURCE: between START_NS
 *     and END_NS (CLOCK_MONOTONIC) it loops
 *       SELECT redlock_acquire(RESOURCE, 10000, 5000)   -- waits up to 5 s
 *       (holds it 1 ms)
 *       SELECT redlock_release(RESOURCE)
 *     and prints "A id t_call t_got" and "R id t_call t_done" lines (ns).
 *     After a release it does not compete again until another process has
 *     taken the lock (a generation counter in SHMFILE), so every hand-off is
 *     to a process that was already waiting, never back to itself.
 *
 * NODES is a comma-separated list of redis:// URLs (REDLOCK_NODES).
 * SPDX-License-Identifier: BSD-3-Clause */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "measure.h"

static void sleep_ns(int64_t ns) {
    struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    nanosleep(&ts, NULL);
}

static void fail(sqlite3 *db, const char *what) {
    fprintf(stderr, "driver: %s: %s\n", what, db ? sqlite3_errmsg(db) : "");
    exit(1);
}

static sqlite3 *open_with(const char *ext, const char *nodes) {
    sqlite3 *db;
    char *err = NULL;
    setenv("REDLOCK_NODES", nodes, 1);
    if (sqlite3_open(":memory:", &db) != SQLITE_OK) fail(db, "open");
    sqlite3_enable_load_extension(db, 1);
    if (sqlite3_load_extension(db, ext, "sqlite3_redlock_init", &err) != SQLITE_OK) {
        fprintf(stderr, "driver: load %s: %s\n", ext, err ? err : "?");
        exit(1);
    }
    return db;
}

static int64_t query_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) fail(db, sql);
    if (sqlite3_step(st) != SQLITE_ROW) fail(db, sql);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* ---- bench_lap ---- */

typedef struct laps {
    int64_t last;
    int64_t *d;
    size_t n, cap;
} laps;

static void fn_lap(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    laps *l = sqlite3_user_data(ctx);
    int64_t t = now_ns();
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 65536;
        int64_t *d = realloc(l->d, cap * sizeof *d);
        if (!d) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
        l->d = d;
        l->cap = cap;
    }
    l->d[l->n++] = t - l->last;
    l->last = t;
    sqlite3_result_value(ctx, argv[0]);
}

/* Runs the cycle statement for n rows; returns its wall time in ns. */
static int64_t run_cycles(sqlite3 *db, laps *l, const char *prefix, int64_t n, int shared) {
    static const char excl_sql[] =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<?1) "
        "SELECT sum(bench_lap(redlock_release(?2||i, redlock_acquire(?2||i, 10000)))) FROM s";
    static const char shared_sql[] =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<?1) "
        "SELECT sum(bench_lap(redlock_release(?2||i, redlock_acquire_shared(?2||i, 10000)))) FROM s";
    const char *sql = shared ? shared_sql : excl_sql;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) fail(db, "prepare cycles");
    sqlite3_bind_int64(st, 1, n);
    sqlite3_bind_text(st, 2, prefix, -1, SQLITE_TRANSIENT);
    l->n = 0;
    int64_t t0 = now_ns();
    l->last = t0;
    if (sqlite3_step(st) != SQLITE_ROW) fail(db, "cycle statement");
    int64_t t1 = now_ns();
    int64_t sum = sqlite3_column_int64(st, 0);
    if (sum != n) {
        fprintf(stderr, "driver: %lld of %lld releases returned 1\n", (long long)sum, (long long)n);
        exit(1);
    }
    sqlite3_finalize(st);
    return t1 - t0;
}

static int cmd_cycles(int argc, char **argv) {
    if (argc < 7) return 2;
    int shared = argc > 7 && strcmp(argv[7], "shared") == 0; /* redlock_acquire_shared cycles */
    const char *ext = argv[2], *nodes = argv[3], *prefix = argv[5];
    int fencing = atoi(argv[4]);
    double seconds = atof(argv[6]);
    sqlite3 *db = open_with(ext, nodes);
    laps l = {0};
    if (sqlite3_create_function_v2(db, "bench_lap", 1, SQLITE_UTF8, &l, fn_lap, NULL, NULL, NULL) != SQLITE_OK)
        fail(db, "create bench_lap");
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT redlock_config('fencing', %d)", fencing);
    if (query_int(db, sql) != fencing) fail(db, "fencing setting");
    for (int i = 7 + shared; i < argc; i++) { /* more settings: name=whole number */
        const char *eq = strchr(argv[i], '=');
        if (!eq) return 2;
        snprintf(sql, sizeof sql, "SELECT redlock_config('%.*s', %s)", (int)(eq - argv[i]), argv[i], eq + 1);
        if (query_int(db, sql) != atoi(eq + 1)) fail(db, "setting");
    }
    char wprefix[200];
    snprintf(wprefix, sizeof wprefix, "%sw", prefix);
    const int64_t warm = 300;
    int64_t wt = run_cycles(db, &l, wprefix, warm, shared);
    int64_t n = (int64_t)(seconds * 1e9 * (double)warm / (double)wt);
    if (n < 500) n = 500;
    if (n > 2000000) n = 2000000;
    double cpu0 = cpu_us();
    int64_t t = run_cycles(db, &l, prefix, n, shared);
    double cpu = cpu_us() - cpu0;
    const char *dump = getenv("BENCH_LAPS_FILE"); /* every lap in order, in ns, for a closer look */
    FILE *df = dump ? fopen(dump, "w") : NULL;
    for (size_t i = 0; df && i < l.n; i++) fprintf(df, "%lld\n", (long long)l.d[i]);
    if (df) fclose(df);
    qsort(l.d, l.n, sizeof *l.d, cmp_i64);
    double secs = (double)t / 1e9;
    printf("{\"cycles\": %lld, \"seconds\": %.4f, \"rate\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"cpu_us\": %.1f}\n",
           (long long)n, secs, (double)n / secs, l.d[l.n / 2] / 1e3, l.d[(size_t)((double)l.n * 0.99)] / 1e3,
           (double)t / (double)n / 1e3, cpu / (double)n);
    sqlite3_close(db);
    free(l.d);
    return 0;
}

/* ---- handoff ---- */

static int cmd_handoff(int argc, char **argv) {
    if (argc != 9) return 2;
    const char *ext = argv[2], *nodes = argv[3], *res = argv[4];
    int id = atoi(argv[5]);
    const char *shm = argv[6];
    int64_t start = atoll(argv[7]), end = atoll(argv[8]);
    int fd = open(shm, O_RDWR);
    if (fd < 0) fail(NULL, "open shm file");
    uint64_t *gen = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (gen == MAP_FAILED) fail(NULL, "mmap shm file");
    sqlite3 *db = open_with(ext, nodes);
    sqlite3_stmt *acq, *rel;
    if (sqlite3_prepare_v2(db, "SELECT redlock_acquire(?1, 10000, 5000)", -1, &acq, NULL) != SQLITE_OK) fail(db, "prepare");
    if (sqlite3_prepare_v2(db, "SELECT redlock_release(?1)", -1, &rel, NULL) != SQLITE_OK) fail(db, "prepare");
    sqlite3_bind_text(acq, 1, res, -1, SQLITE_STATIC);
    sqlite3_bind_text(rel, 1, res, -1, SQLITE_STATIC);
    /* connect before the start line, so set-up is not measured */
    query_int(db, "SELECT count(*) FROM redlock_nodes");
    while (now_ns() < start) sleep_ns(100000);
    while (now_ns() < end) {
        int64_t a0 = now_ns();
        if (sqlite3_step(acq) != SQLITE_ROW) fail(db, "acquire");
        int64_t a1 = now_ns();
        int got = sqlite3_column_type(acq, 0) == SQLITE_TEXT;
        sqlite3_reset(acq);
        if (!got) continue; /* waited 5 s in vain; try again */
        uint64_t mine = __atomic_add_fetch(gen, 1, __ATOMIC_SEQ_CST);
        printf("A %d %lld %lld\n", id, (long long)a0, (long long)a1);
        sleep_ns(1000000);
        int64_t r0 = now_ns();
        if (sqlite3_step(rel) != SQLITE_ROW) fail(db, "release");
        int64_t r1 = now_ns();
        int64_t ok = sqlite3_column_int64(rel, 0);
        sqlite3_reset(rel);
        printf("R %d %lld %lld %lld\n", id, (long long)r0, (long long)r1, (long long)ok);
        while (__atomic_load_n(gen, __ATOMIC_SEQ_CST) == mine && now_ns() < end) sleep_ns(20000);
    }
    fflush(stdout);
    sqlite3_finalize(acq);
    sqlite3_finalize(rel);
    sqlite3_close(db);
    return 0;
}

int main(int argc, char **argv) {
    int rc = 2;
    if (argc > 1 && strcmp(argv[1], "cycles") == 0) rc = cmd_cycles(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "handoff") == 0) rc = cmd_handoff(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: driver cycles EXT NODES FENCING PREFIX SECONDS\n"
                        "       driver handoff EXT NODES RESOURCE ID SHMFILE START_NS END_NS\n");
    return rc;
}
