/* fuzz_nodes: the redlock_nodes INSERT and UPDATE paths, with the extension
 * linked into the fuzzer (compiled with -DSQLITE_CORE against libsqlite3)
 * and sqlite3_redlock_init called on a fresh in-memory database per input.
 * Fuzzed values are bound as parameters of
 *     INSERT INTO redlock_nodes(url) VALUES (?)
 *     INSERT INTO redlock_nodes(id, host, port, db, username, password, timeout_ms, url, state) VALUES (...)
 *     UPDATE redlock_nodes SET ... WHERE id = ?
 * with every SQL type (NULL, integer, real, text, blob).
 *
 * Invariants: no crash, leak or undefined behaviour; an error starts with
 * "redlock: "; the password column reads NULL or '********'; what the table
 * shows does not depend on the password's value (the same row inserted with
 * another password of the same length reads back the same); the url column
 * parses back to the row's host, port and db. No name is looked up in DNS
 * (no_dns.c) and no connection is made (no lock function is called).
 * SPDX-License-Identifier: BSD-3-Clause */
#include <sqlite3.h>
#include <string.h>

#include "fuzz_common.h"
#include "rl_endpoint.h"

int sqlite3_redlock_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

enum { V_NULL, V_INT, V_REAL, V_TEXT, V_BLOB, V_SMALLINT, V_ABSENT };

typedef struct fval {
    int kind;
    sqlite3_int64 i;
    double r;
    const uint8_t *p;
    size_t n;
} fval;

#define NCOLS 9
static const char *const col_names[NCOLS] = {"id", "host", "port", "db", "username", "password", "timeout_ms", "url",
                                             "state"};
enum { C_ID, C_HOST, C_PORT, C_DB, C_USER, C_PASSWORD, C_TIMEOUT, C_URL, C_STATE };

static fval take_value(fuzz_in *in) {
    fval v = {0};
    unsigned t = fuzz_byte(in);
    v.kind = (int)(t % 7);
    switch (v.kind) {
    case V_INT: v.i = (sqlite3_int64)fuzz_u64(in); break;
    case V_SMALLINT: v.kind = V_INT; v.i = (sqlite3_int64)(t >> 3) * 997 % 70001 - 2; break;
    case V_REAL: {
        uint64_t bits = fuzz_u64(in);
        memcpy(&v.r, &bits, sizeof v.r);
        break;
    }
    case V_TEXT:
    case V_BLOB: {
        size_t want = fuzz_byte(in);
        if (want == 255) want = 255 + 8 * (size_t)fuzz_byte(in); /* up to ~2300 bytes */
        v.p = fuzz_bytes(in, want, &v.n);
        break;
    }
    }
    return v;
}

static void bind(sqlite3_stmt *st, int idx, const fval *v) {
    switch (v->kind) {
    case V_INT: sqlite3_bind_int64(st, idx, v->i); break;
    case V_REAL: sqlite3_bind_double(st, idx, v->r); break;
    case V_TEXT: sqlite3_bind_text(st, idx, (const char *)v->p, (int)v->n, SQLITE_TRANSIENT); break;
    case V_BLOB: sqlite3_bind_blob(st, idx, v->p, (int)v->n, SQLITE_TRANSIENT); break;
    default: sqlite3_bind_null(st, idx); break;
    }
}

static sqlite3 *open_db(void) {
    sqlite3 *db = NULL;
    char *err = NULL;
    FUZZ_CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK, "open");
    FUZZ_CHECK(sqlite3_redlock_init(db, &err, NULL) == SQLITE_OK, "init: %s", err ? err : "?");
    sqlite3_free(err);
    return db;
}

/* Keeps the statement's error message in msg (empty on success). */
static void check_error(sqlite3 *db, int rc, char *msg, size_t msglen) {
    msg[0] = '\0';
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return;
    snprintf(msg, msglen, "%s", sqlite3_errmsg(db));
    /* Our refusals are SQLITE_ERROR; SQLite's own (a non-integer rowid) are a
     * mismatch or constraint. Nothing else (no NOMEM, no MISUSE). */
    FUZZ_CHECK(rc == SQLITE_ERROR || rc == SQLITE_CONSTRAINT || rc == SQLITE_MISMATCH, "unexpected result code %d: %s",
               rc, msg);
}

/* Runs one statement over cols (absent ones left out), returns the rc. */
static int run_write(sqlite3 *db, int update, const fval *cols, sqlite3_int64 where_id, char *msg, size_t msglen) {
    char sql[512];
    size_t used = 0;
    int n = 0;
    msg[0] = '\0';
    if (update) {
        used += (size_t)snprintf(sql + used, sizeof sql - used, "UPDATE redlock_nodes SET ");
        for (int i = 0; i < NCOLS; i++) {
            if (cols[i].kind == V_ABSENT) continue;
            used += (size_t)snprintf(sql + used, sizeof sql - used, "%s%s = ?%d", n ? ", " : "", col_names[i], i + 1);
            n++;
        }
        if (!n) return SQLITE_DONE;
        snprintf(sql + used, sizeof sql - used, " WHERE id = %lld", (long long)where_id);
    } else {
        char vals[256];
        size_t vused = 0;
        used += (size_t)snprintf(sql + used, sizeof sql - used, "INSERT INTO redlock_nodes(");
        for (int i = 0; i < NCOLS; i++) {
            if (cols[i].kind == V_ABSENT) continue;
            used += (size_t)snprintf(sql + used, sizeof sql - used, "%s%s", n ? ", " : "", col_names[i]);
            vused += (size_t)snprintf(vals + vused, sizeof vals - vused, "%s?%d", n ? ", " : "", i + 1);
            n++;
        }
        if (!n) return SQLITE_DONE;
        snprintf(sql + used, sizeof sql - used, ") VALUES (%s)", vals);
    }
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    FUZZ_CHECK(rc == SQLITE_OK, "prepare %s: %s", sql, sqlite3_errmsg(db));
    for (int i = 0; i < NCOLS; i++)
        if (cols[i].kind != V_ABSENT) bind(st, i + 1, &cols[i]);
    rc = sqlite3_step(st);
    check_error(db, rc, msg, msglen);
    sqlite3_finalize(st);
    return rc;
}

/* Everything the table shows, as one string; checks each row. */
static char *dump(sqlite3 *db) {
    sqlite3_stmt *st = NULL;
    FUZZ_CHECK(sqlite3_prepare_v2(db,
                                  "SELECT id, host, port, db, username, password, timeout_ms, state, last_error, url "
                                  "FROM redlock_nodes ORDER BY id",
                                  -1, &st, NULL) == SQLITE_OK,
               "prepare select");
    sqlite3_str *out = sqlite3_str_new(NULL);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < 10; i++) {
            const unsigned char *t = sqlite3_column_text(st, i);
            sqlite3_str_appendf(out, "%s|", t ? (const char *)t : "<null>");
        }
        sqlite3_str_appendchar(out, 1, '\n');
        const unsigned char *pw = sqlite3_column_text(st, 5);
        FUZZ_CHECK(!pw || strcmp((const char *)pw, "********") == 0, "password column reads '%s'", pw);
        const char *url = (const char *)sqlite3_column_text(st, 9);
        FUZZ_CHECK(url, "url column is NULL");
        rl_endpoint ep;
        rl_error err;
        FUZZ_CHECK(rl_endpoint_parse_url(url, strlen(url), &ep, &err) == 0, "url column '%s' does not parse: %s",
                   url, err.msg);
        FUZZ_CHECK(strcmp(ep.host, (const char *)sqlite3_column_text(st, 1)) == 0 && ep.port == sqlite3_column_int(st, 2) &&
                       ep.db == sqlite3_column_int(st, 3),
                   "url column '%s' is not the row's node", url);
        FUZZ_CHECK(!ep.password == !pw, "url column '%s' and password column disagree", url);
        rl_endpoint_clear(&ep);
    }
    FUZZ_CHECK(rc == SQLITE_DONE, "select: %s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return sqlite3_str_finish(out);
}

/* Runs the whole scenario on a fresh database; returns what the table shows. */
static char *scenario(const fval *ins, const fval *upd, int do_update, int *rcs, char msgs[2][512]) {
    sqlite3 *db = open_db();
    rcs[0] = run_write(db, 0, ins, 0, msgs[0], sizeof msgs[0]);
    sqlite3_int64 id = sqlite3_last_insert_rowid(db);
    msgs[1][0] = '\0';
    rcs[1] = do_update ? run_write(db, 1, upd, id ? id : 1, msgs[1], sizeof msgs[1]) : SQLITE_DONE;
    char *shown = dump(db);
    FUZZ_CHECK(sqlite3_close(db) == SQLITE_OK, "close: statements left open");
    return shown;
}

/* The same value with every byte of a text password replaced (up to its
 * first NUL, which is where the C string the engine sees ends). */
static void other_password(const fval *v, fval *out, uint8_t *buf) {
    *out = *v;
    if (v->kind != V_TEXT) return;
    /* '********' in an UPDATE means "keep the password": not a password. */
    if (v->n >= 8 && memcmp(v->p, "********", 8) == 0 && (v->n == 8 || v->p[8] == 0)) return;
    for (size_t i = 0; i < v->n; i++) buf[i] = v->p[i] ? (uint8_t)(v->p[i] == 'Q' ? 'R' : 'Q') : 0;
    out->p = buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int env_done;
    if (!env_done) {
        setenv("REDLOCK_NODES", "redis://127.0.0.1:6379", 1);
        env_done = 1;
    }
    fuzz_in in = {data, size};
    unsigned mode = fuzz_byte(&in);
    fval ins[NCOLS] = {{0}}, upd[NCOLS] = {{0}};
    for (int i = 0; i < NCOLS; i++) ins[i].kind = upd[i].kind = V_ABSENT;
    if ((mode & 3) == 0) {
        /* The URL form: the rest of the input is the url. */
        ins[C_URL].kind = (mode & 4) ? V_BLOB : V_TEXT;
        ins[C_URL].p = fuzz_bytes(&in, in.n, &ins[C_URL].n);
    } else {
        unsigned present = fuzz_byte(&in) | (fuzz_byte(&in) << 8);
        for (int i = 0; i < NCOLS; i++)
            if (present & (1u << i) || i == C_HOST) ins[i] = take_value(&in);
        if (mode & 2) {
            unsigned upresent = fuzz_byte(&in) | (fuzz_byte(&in) << 8);
            for (int i = 0; i < NCOLS; i++)
                if (upresent & (1u << i)) upd[i] = take_value(&in);
        }
    }
    int rcs[2], rcs2[2];
    char msgs[2][512], msgs2[2][512];
    char *shown = scenario(ins, upd, (mode & 2) != 0, rcs, msgs);

    /* The same with other passwords of the same length: the table must read
     * the same, and the statements succeed or fail alike. */
    if (ins[C_PASSWORD].kind == V_TEXT || upd[C_PASSWORD].kind == V_TEXT) {
        fval ins2[NCOLS], upd2[NCOLS];
        uint8_t *b1 = malloc(ins[C_PASSWORD].n + 1), *b2 = malloc(upd[C_PASSWORD].n + 1);
        FUZZ_CHECK(b1 && b2, "malloc");
        memcpy(ins2, ins, sizeof ins2);
        memcpy(upd2, upd, sizeof upd2);
        other_password(&ins[C_PASSWORD], &ins2[C_PASSWORD], b1);
        other_password(&upd[C_PASSWORD], &upd2[C_PASSWORD], b2);
        char *shown2 = scenario(ins2, upd2, (mode & 2) != 0, rcs2, msgs2);
        FUZZ_CHECK(rcs[0] == rcs2[0] && rcs[1] == rcs2[1], "the outcome depends on the password: %d/%d vs %d/%d", rcs[0],
                   rcs[1], rcs2[0], rcs2[1]);
        FUZZ_CHECK(strcmp(msgs[0], msgs2[0]) == 0 && strcmp(msgs[1], msgs2[1]) == 0,
                   "an error message depends on the password: '%s' / '%s' vs '%s' / '%s'", msgs[0], msgs[1], msgs2[0],
                   msgs2[1]);
        FUZZ_CHECK(strcmp(shown, shown2) == 0, "the table shows the password:\n%s\nvs\n%s", shown, shown2);
        sqlite3_free(shown2);
        free(b1);
        free(b2);
    }
    sqlite3_free(shown);
    return 0;
}
