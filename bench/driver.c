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
 *   driver cycles EXT NODES FENCING PREFIX SECONDS split [SETTING=N ...]
 *     The same with a lap after each call:
 *       SELECT sum(bench_lap(redlock_release(P||i, bench_lap(redlock_acquire(P||i, 10000))))) FROM s
 *     so the laps alternate: an acquire (with the CTE's step before it) and
 *     a release, whose p50 and p99 go into the JSON line too (acq_*,
 *     rel_*). For nodes far away (bench/run.py's latency rows): a 20-cycle
 *     warm-up, at least 100 cycles.
 *
 *   driver handoff EXT NODES RESOURCE ID SHMFILE START_NS END_NS [FAIR]
 *     One of several processes contending for RESOURCE (with FAIR 1, as a
 *     fair connection: redlock_config('fair', 1)): between START_NS
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
#include <pthread.h>
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
    const char *was = getenv("REDLOCK_NODES");
    if (!was || strcmp(was, nodes) != 0) setenv("REDLOCK_NODES", nodes, 1); /* threads: set once, before them */
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

/* Runs the cycle statement for n rows; returns its wall time in ns.
 * kind: 0 exclusive, 1 shared, 2 exclusive with a lap after each call. */
static int64_t run_cycles(sqlite3 *db, laps *l, const char *prefix, int64_t n, int kind) {
    static const char excl_sql[] =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<?1) "
        "SELECT sum(bench_lap(redlock_release(?2||i, redlock_acquire(?2||i, 10000)))) FROM s";
    static const char shared_sql[] =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<?1) "
        "SELECT sum(bench_lap(redlock_release(?2||i, redlock_acquire_shared(?2||i, 10000)))) FROM s";
    static const char split_sql[] =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<?1) "
        "SELECT sum(bench_lap(redlock_release(?2||i, bench_lap(redlock_acquire(?2||i, 10000))))) FROM s";
    const char *sql = kind == 2 ? split_sql : kind ? shared_sql : excl_sql;
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

/* p50 and p99 of the n values at d[first], d[first + step], ... (sorts a copy). */
static void percentiles(const int64_t *d, size_t n, size_t first, size_t step, double *p50, double *p99) {
    size_t m = n > first ? (n - first + step - 1) / step : 0;
    int64_t *v = malloc((m ? m : 1) * sizeof *v);
    *p50 = *p99 = 0;
    if (!v) return;
    for (size_t i = 0; i < m; i++) v[i] = d[first + i * step];
    qsort(v, m, sizeof *v, cmp_i64);
    if (m) *p50 = v[m / 2] / 1e3, *p99 = v[(size_t)((double)m * 0.99)] / 1e3;
    free(v);
}

static int cmd_cycles(int argc, char **argv) {
    if (argc < 7) return 2;
    int shared = argc > 7 && strcmp(argv[7], "shared") == 0; /* redlock_acquire_shared cycles */
    int split = argc > 7 && strcmp(argv[7], "split") == 0;   /* a lap after each call */
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
    for (int i = 7 + shared + split; i < argc; i++) { /* more settings: name=whole number */
        const char *eq = strchr(argv[i], '=');
        if (!eq) return 2;
        snprintf(sql, sizeof sql, "SELECT redlock_config('%.*s', %s)", (int)(eq - argv[i]), argv[i], eq + 1);
        if (query_int(db, sql) != atoi(eq + 1)) fail(db, "setting");
    }
    char wprefix[200];
    snprintf(wprefix, sizeof wprefix, "%sw", prefix);
    const int64_t warm = split ? 20 : 300;
    int kind = split ? 2 : shared;
    int64_t wt = run_cycles(db, &l, wprefix, warm, kind);
    int64_t n = (int64_t)(seconds * 1e9 * (double)warm / (double)wt);
    if (n < (split ? 100 : 500)) n = split ? 100 : 500;
    if (n > 2000000) n = 2000000;
    double cpu0 = cpu_us(), user0 = user_cpu_us();
    int64_t t = run_cycles(db, &l, prefix, n, kind);
    double cpu = cpu_us() - cpu0, user = user_cpu_us() - user0;
    const char *dump = getenv("BENCH_LAPS_FILE"); /* every lap in order, in ns, for a closer look */
    FILE *df = dump ? fopen(dump, "w") : NULL;
    for (size_t i = 0; df && i < l.n; i++) fprintf(df, "%lld\n", (long long)l.d[i]);
    if (df) fclose(df);
    double secs = (double)t / 1e9, a50 = 0, a99 = 0, r50 = 0, r99 = 0;
    char more[200] = "";
    if (split) { /* acquire laps at 0, 2, ...; release laps at 1, 3, ...; a cycle is both */
        percentiles(l.d, l.n, 0, 2, &a50, &a99);
        percentiles(l.d, l.n, 1, 2, &r50, &r99);
        snprintf(more, sizeof more, ", \"acq_p50_us\": %.1f, \"acq_p99_us\": %.1f, \"rel_p50_us\": %.1f, \"rel_p99_us\": %.1f",
                 a50, a99, r50, r99);
        for (size_t i = 0; i + 1 < l.n; i += 2) l.d[i / 2] = l.d[i] + l.d[i + 1];
        l.n /= 2;
    }
    qsort(l.d, l.n, sizeof *l.d, cmp_i64);
    printf("{\"cycles\": %lld, \"seconds\": %.4f, \"rate\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, \"mean_us\": %.1f, \"cpu_us\": %.1f, \"user_us\": %.1f%s}\n",
           (long long)n, secs, (double)n / secs, l.d[l.n / 2] / 1e3, l.d[(size_t)((double)l.n * 0.99)] / 1e3,
           (double)t / (double)n / 1e3, cpu / (double)n, user / (double)n, more);
    sqlite3_close(db);
    free(l.d);
    return 0;
}

/* ---- handoff ---- */

static int cmd_handoff(int argc, char **argv) {
    if (argc != 9 && argc != 10) return 2;
    const char *ext = argv[2], *nodes = argv[3], *res = argv[4];
    int id = atoi(argv[5]);
    const char *shm = argv[6];
    int64_t start = atoll(argv[7]), end = atoll(argv[8]);
    int fd = open(shm, O_RDWR);
    if (fd < 0) fail(NULL, "open shm file");
    uint64_t *gen = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (gen == MAP_FAILED) fail(NULL, "mmap shm file");
    sqlite3 *db = open_with(ext, nodes);
    if (argc == 10 && atoi(argv[9]) == 1) query_int(db, "SELECT redlock_config('fair', 1)");
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

/* ---- keep ---- */

static long proc_status(const char *key);

/* driver keep EXT NODES PREFIX LOCKS TTL_MS SECONDS
 *   What keeping many locks alive costs the client: measures the CPU of one
 *   acquire+release cycle (2,000 cycles), then takes LOCKS locks with
 *   auto_extend on and TTL_MS, sleeps SECONDS while the keeper extends
 *   them, and prints the process's CPU (every thread, getrusage) per
 *   extension made meanwhile, its ratio to the cycle's, and how many locks
 *   are not held at the end. */
static int cmd_keep(int argc, char **argv) {
    if (argc != 8) return 2;
    const char *ext = argv[2], *nodes = argv[3], *prefix = argv[4];
    int64_t locks = atoll(argv[5]), ttl = atoll(argv[6]);
    double seconds = atof(argv[7]);
    sqlite3 *db = open_with(ext, nodes);
    laps l = {0};
    if (sqlite3_create_function_v2(db, "bench_lap", 1, SQLITE_UTF8, &l, fn_lap, NULL, NULL, NULL) != SQLITE_OK)
        fail(db, "create bench_lap");
    char cprefix[200];
    snprintf(cprefix, sizeof cprefix, "%sc", prefix);
    run_cycles(db, &l, cprefix, 300, 0); /* warm-up */
    const int64_t ncycles = 2000;
    double c0 = cpu_us();
    run_cycles(db, &l, cprefix, ncycles, 0);
    double cycle_cpu = (cpu_us() - c0) / (double)ncycles;
    if (query_int(db, "SELECT redlock_config('auto_extend', 1)") != 1) fail(db, "auto_extend setting");
    sqlite3_stmt *st;
    static const char take[] =
        "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM s WHERE i<?1) "
        "SELECT count(redlock_acquire(?2||i, ?3, 2000)) FROM s";
    if (sqlite3_prepare_v2(db, take, -1, &st, NULL) != SQLITE_OK) fail(db, "prepare take");
    sqlite3_bind_int64(st, 1, locks);
    sqlite3_bind_text(st, 2, prefix, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, ttl);
    long rss0 = proc_status("VmRSS:");
    int64_t t0 = now_ns();
    if (sqlite3_step(st) != SQLITE_ROW || sqlite3_column_int64(st, 0) != locks) fail(db, "taking the locks");
    long rss1 = proc_status("VmRSS:");
    double take_s = (double)(now_ns() - t0) / 1e9;
    sqlite3_finalize(st);
    int64_t e0 = query_int(db, "SELECT sum(extensions) FROM redlock_locks");
    double k0 = cpu_us();
    int64_t w0 = now_ns();
    sleep_ns((int64_t)(seconds * 1e9));
    double k1 = cpu_us();
    double waited = (double)(now_ns() - w0) / 1e9;
    int64_t e1 = query_int(db, "SELECT sum(extensions) FROM redlock_locks");
    int64_t lost = query_int(db, "SELECT count(*) FROM redlock_locks WHERE state <> 'held' OR validity_ms <= 0");
    int64_t held = query_int(db, "SELECT count(*) FROM redlock_locks");
    int64_t exts = e1 - e0;
    double per_ext = exts > 0 ? (k1 - k0) / (double)exts : -1;
    printf("{\"locks\": %lld, \"ttl_ms\": %lld, \"seconds\": %.2f, \"take_seconds\": %.2f, \"extensions\": %lld, "
           "\"cpu_s\": %.3f, \"cpu_per_ext_us\": %.3f, \"cycle_cpu_us\": %.2f, \"ratio\": %.4f, \"lost\": %lld, "
           "\"listed\": %lld, \"rss_bytes_per_lock\": %.0f}\n",
           (long long)locks, (long long)ttl, waited, take_s, (long long)exts, (k1 - k0) / 1e6, per_ext, cycle_cpu,
           per_ext > 0 ? per_ext / cycle_cpu : -1, (long long)(lost + (locks - held)), (long long)held,
           (double)(rss1 - rss0) * 1024.0 / (double)locks);
    query_int(db, "SELECT redlock_release_all()");
    sqlite3_close(db);
    free(l.d);
    return 0;
}

/* ---- conns ---- */

/* A line of /proc/self/status ("VmRSS:", "Threads:") as a number. */
static long proc_status(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t kl = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0) v = atol(line + kl);
    if (f) fclose(f);
    return v;
}

/* driver conns EXT NODES PREFIX CONNS SECONDS
 *   What a connection with auto-extension costs: opens CONNS connections
 *   (one thread), each with auto_extend on and one lock (TTL 3 s) taken, so
 *   each runs its keeper; then idles SECONDS. Prints threads, RSS and CPU
 *   (all threads) per connection, and locks lost. */
static int cmd_conns(int argc, char **argv) {
    if (argc != 7) return 2;
    const char *ext = argv[2], *nodes = argv[3], *prefix = argv[4];
    int n = atoi(argv[5]);
    double seconds = atof(argv[6]);
    if (n < 1) return 2;
    sqlite3 **dbs = calloc((size_t)n, sizeof *dbs);
    if (!dbs) fail(NULL, "out of memory");
    long rss0 = proc_status("VmRSS:"), thr0 = proc_status("Threads:");
    for (int i = 0; i < n; i++) {
        dbs[i] = open_with(ext, nodes);
        if (query_int(dbs[i], "SELECT redlock_config('auto_extend', 1)") != 1) fail(dbs[i], "auto_extend");
        char sql[300];
        snprintf(sql, sizeof sql, "SELECT redlock_acquire('%s%d', 3000, 2000) IS NOT NULL", prefix, i);
        if (query_int(dbs[i], sql) != 1) fail(dbs[i], "acquire");
    }
    long rss1 = proc_status("VmRSS:"), thr1 = proc_status("Threads:");
    double c0 = cpu_us();
    int64_t w0 = now_ns();
    sleep_ns((int64_t)(seconds * 1e9));
    double cpu = cpu_us() - c0, waited = (double)(now_ns() - w0) / 1e9;
    long rss2 = proc_status("VmRSS:");
    int64_t lost = 0, exts = 0;
    for (int i = 0; i < n; i++) {
        lost += query_int(dbs[i], "SELECT count(*) FROM redlock_locks WHERE state <> 'held'");
        exts += query_int(dbs[i], "SELECT sum(extensions) FROM redlock_locks");
    }
    for (int i = 0; i < n; i++) sqlite3_close(dbs[i]);
    free(dbs);
    printf("{\"conns\": %d, \"threads_per_conn\": %.2f, \"rss_kib_per_conn\": %.1f, \"rss_growth_kib\": %ld, "
           "\"cpu_pct\": %.3f, \"cpu_us_per_conn_s\": %.2f, \"extensions\": %lld, \"lost\": %lld, \"seconds\": %.1f}\n",
           n, (double)(thr1 - thr0) / n, (double)(rss1 - rss0) / n, rss2 - rss1, cpu / waited / 1e4,
           cpu / waited / n, (long long)exts, (long long)lost, waited);
    return 0;
}

/* ---- threads ---- */

typedef struct cthread {
    const char *ext, *nodes;
    char prefix[200];
    double seconds;
    int64_t start_ns;
    int64_t cycles;
    laps l;
} cthread;

static void *cycles_thread(void *arg) {
    cthread *t = arg;
    sqlite3 *db = open_with(t->ext, t->nodes);
    laps one = {0};
    if (sqlite3_create_function_v2(db, "bench_lap", 1, SQLITE_UTF8, &one, fn_lap, NULL, NULL, NULL) != SQLITE_OK)
        fail(db, "create bench_lap");
    run_cycles(db, &one, t->prefix, 50, 0); /* connect and warm up */
    while (now_ns() < t->start_ns) sleep_ns(100000);
    int64_t end = t->start_ns + (int64_t)(t->seconds * 1e9);
    char p[220];
    for (int k = 0; now_ns() < end; k++) {
        snprintf(p, sizeof p, "%s%d:", t->prefix, k);
        run_cycles(db, &one, p, 100, 0);
        /* keep every lap (run_cycles reuses the buffer) */
        if (t->l.n + one.n > t->l.cap) {
            size_t cap = (t->l.n + one.n) * 2;
            int64_t *d = realloc(t->l.d, cap * sizeof *d);
            if (!d) fail(NULL, "out of memory");
            t->l.d = d;
            t->l.cap = cap;
        }
        memcpy(t->l.d + t->l.n, one.d, one.n * sizeof *one.d);
        t->l.n += one.n;
        t->cycles += (int64_t)one.n;
    }
    sqlite3_close(db);
    free(one.d);
    return NULL;
}

/* driver threads EXT NODES PREFIX THREADS SECONDS
 *   THREADS threads of one process, a connection each, run cycles for
 *   SECONDS from a common start; prints the aggregate cycles/s and the p50
 *   and p99 of every lap. */
static int cmd_threads(int argc, char **argv) {
    if (argc != 7) return 2;
    int n = atoi(argv[5]);
    double seconds = atof(argv[6]);
    if (n < 1) return 2;
    cthread *t = calloc((size_t)n, sizeof *t);
    pthread_t *tid = calloc((size_t)n, sizeof *tid);
    if (!t || !tid) fail(NULL, "out of memory");
    setenv("REDLOCK_NODES", argv[3], 1); /* before any thread reads it */
    int64_t start = now_ns() + 300000000 + (int64_t)n * 20000000;
    for (int i = 0; i < n; i++) {
        t[i].ext = argv[2];
        t[i].nodes = argv[3];
        snprintf(t[i].prefix, sizeof t[i].prefix, "%st%d:", argv[4], i);
        t[i].seconds = seconds;
        t[i].start_ns = start;
        if (pthread_create(&tid[i], NULL, cycles_thread, &t[i]) != 0) fail(NULL, "pthread_create");
    }
    laps all = {0};
    int64_t cycles = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(tid[i], NULL);
        cycles += t[i].cycles;
        int64_t *d = realloc(all.d, (all.n + t[i].l.n + 1) * sizeof *d);
        if (!d) fail(NULL, "out of memory");
        all.d = d;
        memcpy(all.d + all.n, t[i].l.d, t[i].l.n * sizeof *d);
        all.n += t[i].l.n;
        free(t[i].l.d);
    }
    double secs = (double)(now_ns() - start) / 1e9;
    qsort(all.d, all.n, sizeof *all.d, cmp_i64);
    printf("{\"threads\": %d, \"cycles\": %lld, \"rate\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f}\n", n,
           (long long)cycles, (double)cycles / secs, all.n ? all.d[all.n / 2] / 1e3 : 0,
           all.n ? all.d[(size_t)((double)all.n * 0.99)] / 1e3 : 0);
    free(all.d);
    free(t);
    free(tid);
    return 0;
}

int main(int argc, char **argv) {
    int rc = 2;
    if (argc > 1 && strcmp(argv[1], "cycles") == 0) rc = cmd_cycles(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "handoff") == 0) rc = cmd_handoff(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "keep") == 0) rc = cmd_keep(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "conns") == 0) rc = cmd_conns(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "threads") == 0) rc = cmd_threads(argc, argv);
    if (rc == 2)
        fprintf(stderr, "usage: driver cycles EXT NODES FENCING PREFIX SECONDS\n"
                        "       driver handoff EXT NODES RESOURCE ID SHMFILE START_NS END_NS [FAIR]\n"
                        "       driver keep EXT NODES PREFIX LOCKS TTL_MS SECONDS\n"
                        "       driver conns EXT NODES PREFIX CONNS SECONDS\n"
                        "       driver threads EXT NODES PREFIX THREADS SECONDS\n");
    return rc;
}
