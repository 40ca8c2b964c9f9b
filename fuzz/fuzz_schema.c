/* fuzz_schema: hostile schemas around the functions with side effects. Per
 * input, a plain connection (no extension; deterministic stand-ins under
 * the guarded names, so SQLite accepts the DDL) writes a schema that calls
 * a guarded function for the "attacker" (first argument 'atk') in the place
 * the input chooses (CHECK, DEFAULT, generated column, expression or partial
 * index, trigger body or WHEN, view, or a raw view row written through
 * writable_schema), spelled as the input says (letter case, quoting) and
 * wrapped in text from the input. The database is serialized and
 * deserialized into a connection with the extension (compiled with
 * -DSQLITE_CORE -DREDLOCK_GUARD_HOOK) as main or as an attached database,
 * whose user statements call the same function themselves (first argument
 * 'usr').
 *
 * Input: place, function, quoting, case mask, main/attached, then the
 * wrapping text: the bytes before the call, a NUL, the bytes after it.
 *
 * Invariants: no crash, leak or undefined behaviour; no call with the
 * attacker's argument ever gets past the guard (redlock_guard_hook sees
 * every call it lets through); and when the stored schema mentions the
 * function (redlock_guard_mentions), no call of it gets through in a
 * statement that uses the hostile database (has a transaction open on it).
 * No node is configured, so nothing touches the network.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <sqlite3.h>
#include <string.h>

#include "fuzz_common.h"
#include "redlock_guard.h"

int sqlite3_redlock_init(sqlite3 *db, char **pzErrMsg, const sqlite3_api_routines *pApi);

static const char *const places[] = {
    "CREATE TABLE joblog(tok CHECK (@E@))",
    "CREATE TABLE joblog(tok, extra DEFAULT (@E@))",
    "CREATE TABLE joblog(tok, g AS (@E@) VIRTUAL)",
    "CREATE TABLE joblog(tok, g AS (@E@) STORED)",
    "CREATE TABLE joblog(tok);CREATE INDEX ji ON joblog((@E@))",
    "CREATE TABLE joblog(tok);CREATE INDEX ji ON joblog(tok) WHERE @E@",
    "CREATE TABLE joblog(tok);CREATE TRIGGER tr AFTER INSERT ON joblog BEGIN SELECT @E@; END",
    "CREATE TABLE joblog(tok);CREATE TRIGGER tr BEFORE INSERT ON joblog WHEN @E@ BEGIN SELECT 1; END",
    "CREATE TABLE joblog(tok);CREATE TRIGGER tr AFTER INSERT ON joblog BEGIN "
    "UPDATE joblog SET tok = @E@ WHERE rowid = new.rowid; END",
    "CREATE TABLE joblog(tok);CREATE VIEW jobs AS SELECT @E@ AS t",
    "CREATE TABLE joblog(tok);CREATE TABLE other(x CHECK (@E@));"
    "CREATE TRIGGER tr AFTER INSERT ON joblog BEGIN INSERT INTO other VALUES (1); END",
    "RAW", /* a view row whose sql is written through writable_schema */
};
#define NPLACES (sizeof places / sizeof places[0])

/* The functions tried and their arguments after the marker. */
static const struct {
    redlock_guarded fn;
    const char *rest;
} fns[] = {
    {REDLOCK_G_ACQUIRE, ", 1000)"}, {REDLOCK_G_LOCK, ", 1000)"}, {REDLOCK_G_RELEASE, ")"},
    {REDLOCK_G_EXTEND, ", 1000)"},  {REDLOCK_G_CONFIG, ")"},      {REDLOCK_G_DETACH, ")"},
    {REDLOCK_G_ADOPT, ", 'x')"},    {REDLOCK_G_ACQUIRE_MANY, ", 1000)"}, {REDLOCK_G_RELEASE_MANY, ")"},
};
#define NFNS (sizeof fns / sizeof fns[0])

static int attacker_ran, calls_passed;
static redlock_guarded current;
static sqlite3 *victim;
static const char *victim_schema; /* where the hostile database is */

static void on_allow(redlock_guarded fn, int argc, sqlite3_value **argv) {
    if (fn == current && sqlite3_txn_state(victim, victim_schema) != SQLITE_TXN_NONE) calls_passed++;
    if (argc > 0 && sqlite3_value_type(argv[0]) == SQLITE_TEXT &&
        strcmp((const char *)sqlite3_value_text(argv[0]), "atk") == 0)
        attacker_ran = 1;
}

static void stand_in(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    (void)argv;
    sqlite3_result_int(ctx, 1);
}

/* A growing text buffer (sqlite3_str). */
static void spell(sqlite3_str *s, const char *name, unsigned quote, unsigned mask) {
    static const char open[] = " \"[`", close[] = " \"]`";
    if (quote) sqlite3_str_appendchar(s, 1, open[quote]);
    for (size_t i = 0; name[i]; i++) {
        char c = name[i];
        if (c >= 'a' && c <= 'z' && ((mask >> (i % 8)) & 1)) c = (char)(c - 'a' + 'A');
        sqlite3_str_appendchar(s, 1, c);
    }
    if (quote) sqlite3_str_appendchar(s, 1, close[quote]);
}

/* The schema text with the wrapped attacker call in place of @E@. */
static char *make_ddl(const char *tmpl, const char *call, const uint8_t *pre, size_t npre, const uint8_t *post,
                      size_t npost) {
    sqlite3_str *s = sqlite3_str_new(NULL);
    const char *at = strstr(tmpl, "@E@");
    sqlite3_str_append(s, tmpl, (int)(at - tmpl));
    sqlite3_str_append(s, (const char *)pre, (int)npre);
    sqlite3_str_appendall(s, call);
    sqlite3_str_append(s, (const char *)post, (int)npost);
    sqlite3_str_appendall(s, at + 3);
    return sqlite3_str_finish(s);
}

/* Builds the hostile database; its serialized bytes (sqlite3_malloc'ed) or
 * NULL. *stored gets the sql of every schema row (what the guard reads). */
static unsigned char *build(const char *ddl, int raw, sqlite3_int64 *size, char **stored) {
    sqlite3 *db = NULL;
    unsigned char *bytes = NULL;
    FUZZ_CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK, "open");
    for (size_t i = 0; i < NFNS; i++)
        sqlite3_create_function(db, redlock_guard_name(fns[i].fn), -1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, NULL,
                                stand_in, NULL, NULL);
    int rc;
    if (raw) {
        sqlite3_stmt *st = NULL;
        rc = sqlite3_exec(db, "PRAGMA writable_schema=ON", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            rc = sqlite3_prepare_v2(db, "INSERT INTO sqlite_master VALUES ('view', 'jobs', 'jobs', 0, ?)", -1, &st,
                                    NULL);
        if (rc == SQLITE_OK) {
            sqlite3_bind_text(st, 1, ddl, -1, SQLITE_STATIC);
            rc = sqlite3_step(st) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
        }
        sqlite3_finalize(st);
    } else {
        rc = sqlite3_exec(db, ddl, NULL, NULL, NULL);
    }
    sqlite3_stmt *st = NULL;
    if (rc == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT group_concat(sql, ' ') FROM sqlite_master", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)) {
        *stored = sqlite3_mprintf("%s", (const char *)sqlite3_column_text(st, 0));
        if (*stored) bytes = sqlite3_serialize(db, "main", size, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return bytes;
}

static void run(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK)
        while (sqlite3_step(st) == SQLITE_ROW) {
        }
    sqlite3_finalize(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    unsigned place = fuzz_byte(&in) % NPLACES, f = fuzz_byte(&in) % NFNS, quote = fuzz_byte(&in) % 4,
             mask = fuzz_byte(&in), attached = fuzz_byte(&in) & 1;
    const uint8_t *pre = in.p, *nul = memchr(in.p, 0, in.n);
    size_t npre = nul ? (size_t)(nul - in.p) : in.n;
    const uint8_t *post = nul ? nul + 1 : in.p + in.n;
    size_t npost = nul ? in.n - npre - 1 : 0;
    if (npre > 512 || npost > 512) return 0;

    const char *name = redlock_guard_name(fns[f].fn);
    sqlite3_str *cs = sqlite3_str_new(NULL);
    spell(cs, name, quote, mask);
    sqlite3_str_appendall(cs, "('atk'");
    sqlite3_str_appendall(cs, fns[f].rest);
    char *call = sqlite3_str_finish(cs);
    int raw = strcmp(places[place], "RAW") == 0;
    char *ddl = make_ddl(raw ? "CREATE VIEW jobs AS SELECT @E@ AS t" : places[place], call, pre, npre, post, npost);
    sqlite3_int64 dbsize = 0;
    char *stored = NULL;
    unsigned char *bytes = ddl && call ? build(ddl, raw, &dbsize, &stored) : NULL;
    if (!bytes) {
        sqlite3_free(stored);
        sqlite3_free(ddl);
        sqlite3_free(call);
        return 0;
    }

    sqlite3 *db = NULL;
    char *err = NULL;
    FUZZ_CHECK(sqlite3_open(":memory:", &db) == SQLITE_OK, "open");
    FUZZ_CHECK(sqlite3_redlock_init(db, &err, NULL) == SQLITE_OK, "init: %s", err ? err : "?");
    sqlite3_free(err);
    run(db, "DELETE FROM redlock_nodes"); /* no node: a call that passes fails before any network */
    if (attached) run(db, "ATTACH ':memory:' AS aux");
    int rc = sqlite3_deserialize(db, attached ? "aux" : "main", bytes, dbsize, dbsize,
                                 SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_RESIZEABLE);
    FUZZ_CHECK(rc == SQLITE_OK, "deserialize: %d", rc);

    current = fns[f].fn;
    victim = db;
    victim_schema = attached ? "aux" : "main";
    attacker_ran = calls_passed = 0;
    redlock_guard_hook = on_allow;
    char *user = sqlite3_mprintf("%s('usr'%s", name, fns[f].rest);
    const char *const stmts[] = {"INSERT INTO joblog(tok) VALUES (%s)", "INSERT INTO joblog DEFAULT VALUES",
                                 "SELECT %s, * FROM jobs", "UPDATE joblog SET tok = %s",
                                 "SELECT * FROM joblog WHERE tok = %s", "SELECT %s"};
    for (size_t i = 0; user && i < sizeof stmts / sizeof stmts[0]; i++) {
        char *sql = sqlite3_mprintf(stmts[i], user);
        if (sql) run(db, sql);
        sqlite3_free(sql);
    }
    redlock_guard_hook = NULL;

    FUZZ_CHECK(!attacker_ran, "the schema's call of %s ran: %s", name, ddl);
    if (redlock_guard_mentions(stored, strlen(stored)) & (1u << fns[f].fn))
        FUZZ_CHECK(calls_passed == 0, "%d calls of %s passed while the schema names it: %s", calls_passed, name,
                   stored);

    sqlite3_free(user);
    FUZZ_CHECK(sqlite3_close(db) == SQLITE_OK, "close: unfinalized statements");
    sqlite3_free(stored);
    sqlite3_free(ddl);
    sqlite3_free(call);
    return 0;
}
