/* redlock_many: the SQL functions redlock_acquire_many and
 * redlock_release_many. The names come as a JSON array of strings (as
 * json_group_array builds it), read directly when it is a plain one and
 * otherwise with SQLite's own JSON functions on the calling connection;
 * each function checks its arguments, calls the session, and turns the
 * outcome into a value, a NULL, or an error that starts with "redlock: ".
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_many.h"

#include <stdlib.h>
#include <string.h>

#include "redlock_functions.h"
#include "redlock_guard.h"
#include "redlock_txn.h"

SQLITE_EXTENSION_INIT3

#define EXAMPLE "e.g. json_array('a', 'b') or (SELECT json_group_array(name) FROM t)"

/* The names read from resources_json, freed by names_free: each its own
 * copy, or (read by read_plain_names) pointers into one copy of the text. */
typedef struct names {
    int n, cap;
    char **s;
    size_t *len;
    char *text; /* the copy the names point into; NULL: each s[i] is its own */
} names;

static void names_free(names *nm) {
    if (!nm->text)
        for (int i = 0; i < nm->n; i++) free(nm->s[i]);
    free(nm->text);
    free(nm->s);
    free(nm->len);
    memset(nm, 0, sizeof *nm);
}

static int names_grow(names *nm) {
    int cap = nm->cap ? nm->cap * 2 : 16;
    char **ns = realloc(nm->s, (size_t)cap * sizeof *ns);
    if (!ns) return -1;
    nm->s = ns;
    size_t *nl = realloc(nm->len, (size_t)cap * sizeof *nl);
    if (!nl) return -1;
    nm->len = nl;
    nm->cap = cap;
    return 0;
}

static int names_add(names *nm, const char *s, size_t len) {
    if (nm->n == nm->cap && names_grow(nm) != 0) return -1;
    char *copy = malloc(len + 1);
    if (!copy) return -1;
    memcpy(copy, s, len);
    copy[len] = '\0';
    nm->s[nm->n] = copy;
    nm->len[nm->n++] = len;
    return 0;
}

/* JSON's whitespace, as SQLite's JSON parser takes it. */
static int json_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The value of the 4 hex digits at s, or -1. */
static long hex4(const char *s) {
    long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes the JSON string whose body starts at t[*i] (after its opening
 * quote) in place, into t[*out...], as SQLite's JSON functions would give
 * it; stops after the closing quote. Returns the decoded length, or -1 for
 * anything SQLite alone should judge: a raw control character, an unknown
 * escape, \u0000, a surrogate that is not part of a pair (SQLite gives
 * those bytes of its own), or no closing quote. Decoding only shrinks, so
 * writing behind the reader is safe. */
static long decode_string(char *t, size_t bytes, size_t *i, size_t out) {
    size_t start = out;
    while (*i < bytes) {
        unsigned char c = (unsigned char)t[(*i)++];
        if (c == '"') return (long)(out - start);
        if (c < 0x20) return -1;
        if (c != '\\') {
            t[out++] = (char)c;
            continue;
        }
        if (*i >= bytes) return -1;
        char e = t[(*i)++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            t[out++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u' || *i + 4 > bytes) return -1;
        long cp = hex4(t + *i);
        *i += 4;
        if (cp <= 0) return -1;
        if (cp >= 0xdc00 && cp <= 0xdfff) return -1;
        if (cp >= 0xd800 && cp <= 0xdbff) {
            if (*i + 6 > bytes || t[*i] != '\\' || t[*i + 1] != 'u') return -1;
            long lo = hex4(t + *i + 2);
            if (lo < 0xdc00 || lo > 0xdfff) return -1;
            *i += 6;
            cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        }
        if (cp < 0x80) t[out++] = (char)cp;
        else if (cp < 0x800) {
            t[out++] = (char)(0xc0 | cp >> 6);
            t[out++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            t[out++] = (char)(0xe0 | cp >> 12);
            t[out++] = (char)(0x80 | (cp >> 6 & 0x3f));
            t[out++] = (char)(0x80 | (cp & 0x3f));
        } else {
            t[out++] = (char)(0xf0 | cp >> 18);
            t[out++] = (char)(0x80 | (cp >> 12 & 0x3f));
            t[out++] = (char)(0x80 | (cp >> 6 & 0x3f));
            t[out++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    return -1;
}

/* Reads text (bytes long, no NUL byte) without SQL when it is a JSON
 * array of 1 to RL_MANY_MAX non-empty strings, decoding their escapes as
 * SQLite's JSON functions would. 1: read into *nm; 0: text is anything
 * else (*nm left empty: read_names then asks SQLite, which says what is
 * wrong); -1: out of memory. Reading it here costs neither a statement
 * step and a copy per name (most of what the call costs the client for a
 * large set) nor a table: json_each is a name that any table of a database
 * the connection has open would hide. */
static int read_plain_names(const char *text, size_t bytes, names *nm) {
    char *t = malloc(bytes + 1);
    if (!t) return -1;
    memcpy(t, text, bytes + 1);
    nm->text = t;
    size_t i = 0;
    while (i < bytes && json_space(t[i])) i++;
    if (i == bytes || t[i++] != '[') goto other;
    for (;;) {
        while (i < bytes && json_space(t[i])) i++;
        if (i == bytes || t[i++] != '"') goto other;
        size_t start = i;
        long len = decode_string(t, bytes, &i, start);
        if (len <= 0 || nm->n == RL_MANY_MAX) goto other;
        if (nm->n == nm->cap && names_grow(nm) != 0) {
            names_free(nm);
            return -1;
        }
        t[start + (size_t)len] = '\0'; /* at or before the closing quote: the name ends there */
        nm->s[nm->n] = t + start;
        nm->len[nm->n++] = (size_t)len;
        while (i < bytes && json_space(t[i])) i++;
        if (i == bytes) goto other;
        if (t[i] == ',') {
            i++;
            continue;
        }
        if (t[i++] != ']') goto other;
        while (i < bytes && json_space(t[i])) i++;
        if (i != bytes) goto other;
        return 1;
    }
other:
    names_free(nm);
    return 0;
}

/* Runs sql (one parameter, v) on the caller's connection; *st is ready to
 * step, or an error is set on ctx and NULL returned. */
static sqlite3_stmt *run_json(sqlite3_context *ctx, const char *sql, sqlite3_value *v) {
    sqlite3 *db = sqlite3_context_db_handle(ctx);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_value(st, 1, v);
    if (rc == SQLITE_OK) return st;
    if (rc == SQLITE_NOMEM) sqlite3_result_error_nomem(ctx);
    else
        redlock_result_error(ctx, "resources_json could not be read with SQLite's JSON functions (%s); this SQLite "
                                  "needs JSON support (built in since 3.38)", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return NULL;
}

/* 1 when JSON text (n bytes) holds the escape \u0000 (a NUL character in a
 * string), which SQLite's JSON functions before 3.42 cut the string at. */
static int has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 6 <= n; i++) {
        if (s[i] != '\\' || s[i + 1] != 'u' || memcmp(s + i + 2, "0000", 4) != 0) continue;
        size_t bs = 0; /* backslashes ending at i: odd means this one escapes the u */
        while (bs <= i && s[i - bs] == '\\') bs++;
        if (bs % 2 == 1) return 1;
    }
    return 0;
}

/* Reads resources_json into *nm; 0, or -1 with an error set on ctx. */
static int read_names(sqlite3_context *ctx, sqlite3_value *v, names *nm) {
    memset(nm, 0, sizeof *nm);
    int t = sqlite3_value_type(v);
    if (t == SQLITE_NULL) {
        redlock_result_error(ctx, "resources_json is NULL; pass a JSON array of names, " EXAMPLE);
        return -1;
    }
    if (t != SQLITE_TEXT) {
        redlock_result_error(ctx, "resources_json must be text holding a JSON array of names (got %s), " EXAMPLE,
                             t == SQLITE_BLOB ? "a blob" : "a number");
        return -1;
    }
    const char *text = (const char *)sqlite3_value_text(v);
    if (!text) {
        sqlite3_result_error_nomem(ctx);
        return -1;
    }
    size_t bytes = (size_t)sqlite3_value_bytes(v);
    /* SQLite's JSON functions stop at a NUL byte: the names after it would
     * be left out of the set without a word. */
    if (memchr(text, '\0', bytes)) {
        redlock_result_error(ctx, "resources_json contains a NUL byte; pass a JSON array of names as text without one, "
                                  EXAMPLE);
        return -1;
    }
    int plain = read_plain_names(text, bytes, nm);
    if (plain != 0) {
        if (plain < 0) sqlite3_result_error_nomem(ctx);
        return plain > 0 ? 0 : -1;
    }
    if (has_nul_escape(text, bytes)) {
        redlock_result_error(ctx, "resources_json contains \\u0000 (a NUL character); names must not contain one");
        return -1;
    }
    sqlite3_stmt *st = run_json(ctx, "SELECT json_type(?1)", v);
    if (!st) return -1;
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        if (rc == SQLITE_NOMEM) sqlite3_result_error_nomem(ctx);
        else
            redlock_result_error(ctx, "resources_json is not valid JSON (%s); pass a JSON array of names, " EXAMPLE,
                                 sqlite3_errmsg(sqlite3_context_db_handle(ctx)));
        sqlite3_finalize(st);
        return -1;
    }
    const char *type = (const char *)sqlite3_column_text(st, 0);
    if (!type || strcmp(type, "array") != 0) {
        redlock_result_error(ctx, "resources_json must be a JSON array of names, not a JSON %s; " EXAMPLE,
                             type ? type : "value");
        sqlite3_finalize(st);
        return -1;
    }
    sqlite3_finalize(st);
    /* Element by element through scalar functions, which no table of a
     * database file can hide (json_each can): only sets read_plain_names
     * left, to refuse or with a lone surrogate, come here. */
    if (!(st = run_json(ctx,
                        "WITH RECURSIVE redlock_i(k) AS (SELECT 0 WHERE json_array_length(?1) > 0 "
                        "UNION ALL SELECT k + 1 FROM redlock_i WHERE k + 1 < json_array_length(?1)) "
                        "SELECT json_type(?1, '$[' || k || ']'), json_extract(?1, '$[' || k || ']') FROM redlock_i",
                        v)))
        return -1;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int k = nm->n + 1;
        const char *et = (const char *)sqlite3_column_text(st, 0);
        if (!et || strcmp(et, "text") != 0) {
            redlock_result_error(ctx, "element %d of resources_json is a JSON %s; every name must be a JSON string", k,
                                 et ? et : "value");
            goto fail;
        }
        if (nm->n == RL_MANY_MAX) {
            redlock_result_error(ctx, "resources_json has more than %d names; at most %d can be taken at once: split "
                                      "the set, or protect it with one coarser lock name", RL_MANY_MAX, RL_MANY_MAX);
            goto fail;
        }
        const char *s = (const char *)sqlite3_column_text(st, 1);
        int len = sqlite3_column_bytes(st, 1);
        if (!s && len > 0) {
            rc = SQLITE_NOMEM;
            break;
        }
        if (len == 0) {
            redlock_result_error(ctx, "element %d of resources_json is an empty name; every name must be non-empty", k);
            goto fail;
        }
        if (memchr(s, '\0', (size_t)len)) {
            redlock_result_error(ctx, "element %d of resources_json contains a NUL character (\\u0000); names must not", k);
            goto fail;
        }
        if (names_add(nm, s, (size_t)len) != 0) {
            rc = SQLITE_NOMEM;
            break;
        }
    }
    if (rc != SQLITE_DONE) {
        if (rc == SQLITE_NOMEM) sqlite3_result_error_nomem(ctx);
        else
            redlock_result_error(ctx, "resources_json could not be read (%s); pass a JSON array of names, " EXAMPLE,
                                 sqlite3_errmsg(sqlite3_context_db_handle(ctx)));
        goto fail;
    }
    sqlite3_finalize(st);
    if (nm->n == 0) {
        redlock_result_error(ctx, "resources_json is an empty array; give at least one name, " EXAMPLE);
        names_free(nm);
        return -1;
    }
    return 0;
fail:
    sqlite3_finalize(st);
    names_free(nm);
    return -1;
}

/* A failed outcome as the SQL result: NULL for a refusal, an error otherwise. */
static void result_failure(sqlite3_context *ctx, const char *what, int n, const rl_outcome *o) {
    switch (o->status) {
    case RL_REFUSED: sqlite3_result_null(ctx); break;
    case RL_NOMEM: sqlite3_result_error_nomem(ctx); break;
    case RL_MISUSE: redlock_result_error(ctx, "%s", o->msg); break;
    case RL_INTERRUPTED:
        redlock_result_error(ctx, "interrupted (sqlite3_interrupt) while waiting to %s %d names: %s", what, n, o->msg);
        sqlite3_result_error_code(ctx, SQLITE_INTERRUPT);
        break;
    default:
        redlock_result_error(ctx, "could not %s %d names: %s%s", what, n, o->msg,
                             ((redlock_state *)sqlite3_user_data(ctx))->default_nodes && o->status == RL_NO_QUORUM
                                 ? REDLOCK_DEFAULT_NODES_HINT
                                 : "");
        break;
    }
}

/* redlock_acquire_many(resources_json, ttl_ms [, wait_ms]) */
static void fn_acquire_many(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_ACQUIRE_MANY, argc, argv)) return;
    int64_t ttl, wait = 0;
    if (redlock_arg_ms(ctx, argv[1], "ttl_ms", 1, RL_TTL_MAX_MS, &ttl) != 0) return;
    if (argc > 2 && redlock_arg_ms(ctx, argv[2], "wait_ms", 0, RL_WAIT_MAX_MS, &wait) != 0) return;
    names nm;
    if (read_names(ctx, argv[0], &nm) != 0) return;
    char token[RL_TOKEN_LEN + 1];
    rl_outcome o;
    rl_status st = rl_session_acquire_many(redlock_state_of(ctx)->session, nm.n, (const char *const *)nm.s, nm.len, ttl, wait,
                                           token, &o);
    if (st == RL_OK) sqlite3_result_text(ctx, token, RL_TOKEN_LEN, SQLITE_TRANSIENT);
    else result_failure(ctx, "lock", nm.n, &o);
    names_free(&nm);
}

/* redlock_release_many(resources_json [, token]) */
static void fn_release_many(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_RELEASE_MANY, argc, argv)) return;
    const char *token = NULL;
    size_t toklen = 0;
    if (argc > 1) {
        int t = sqlite3_value_type(argv[1]);
        token = t == SQLITE_TEXT ? (const char *)sqlite3_value_text(argv[1]) : NULL;
        int n = sqlite3_value_bytes(argv[1]);
        if (t == SQLITE_NULL) {
            redlock_result_error(ctx, "token is NULL; pass the token redlock_acquire_many returned (NULL from acquire "
                                      "means the locks were not taken), or leave it out");
            return;
        }
        if (t == SQLITE_TEXT && !token) {
            sqlite3_result_error_nomem(ctx);
            return;
        }
        if (!token || n == 0 || n > 1024 || memchr(token, '\0', (size_t)n)) {
            redlock_result_error(ctx, "token must be the text redlock_acquire_many returned");
            return;
        }
        toklen = (size_t)n;
    }
    names nm;
    if (read_names(ctx, argv[0], &nm) != 0) return;
    /* As redlock_release: not before this connection's writes are committed. */
    if (!redlock_txn_release_allowed(ctx, redlock_state_of(ctx), "redlock_release_many")) {
        names_free(&nm);
        return;
    }
    int released, none_held;
    rl_outcome o;
    rl_status st = rl_session_release_many(redlock_state_of(ctx)->session, nm.n, (const char *const *)nm.s, nm.len, token,
                                           toklen, &released, &none_held, &o);
    if (none_held) sqlite3_result_null(ctx);
    else if (st == RL_OK) sqlite3_result_int(ctx, released);
    else result_failure(ctx, "release", nm.n, &o);
    names_free(&nm);
}

int redlock_register_many(sqlite3 *db, redlock_state *st) {
    static const struct {
        const char *name;
        int nargs;
        void (*fn)(sqlite3_context *, int, sqlite3_value **);
    } fns[] = {
        {"redlock_acquire_many", 2, fn_acquire_many},
        {"redlock_acquire_many", 3, fn_acquire_many},
        {"redlock_release_many", 1, fn_release_many},
        {"redlock_release_many", 2, fn_release_many},
    };
    /* As every lock function: never deterministic, never from a view or
     * trigger; a CHECK constraint is kept out by redlock_guard. */
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        int rc = sqlite3_create_function_v2(db, fns[i].name, fns[i].nargs, SQLITE_UTF8 | SQLITE_DIRECTONLY,
                                            redlock_state_ref(st), fns[i].fn, NULL, NULL, redlock_state_unref);
        if (rc != SQLITE_OK) return rc;
    }
    return SQLITE_OK;
}
