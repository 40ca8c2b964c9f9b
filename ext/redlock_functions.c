/* redlock_functions: the SQL functions redlock_acquire, redlock_lock,
 * redlock_acquire_shared, redlock_release, redlock_release_all, redlock_extend, redlock_validity,
 * redlock_check, redlock_fence, redlock_config and redlock_version. Each checks its
 * arguments, calls the engine, and turns the outcome into a value, a NULL,
 * or an error that starts with "redlock: ".
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_functions.h"
#include "redlock_version.h"

#include <stdlib.h>
#include <string.h>

#include "redlock_guard.h"
#include "redlock_txn.h"
#include "rl_settings.h"

SQLITE_EXTENSION_INIT3

/* The text of argument v (its bytes in *len); NULL with an error set when v
 * is not text: msgs says why for NULL, a blob and a number, in that order. */
static const char *arg_text(sqlite3_context *ctx, sqlite3_value *v, size_t *len, const char *const msgs[3]) {
    int t = sqlite3_value_type(v);
    if (t != SQLITE_TEXT) {
        redlock_result_error(ctx, "%s", msgs[t == SQLITE_NULL ? 0 : t == SQLITE_BLOB ? 1 : 2]);
        return NULL;
    }
    const char *s = (const char *)sqlite3_value_text(v);
    if (!s) {
        sqlite3_result_error_nomem(ctx);
        return NULL;
    }
    *len = (size_t)sqlite3_value_bytes(v);
    return s;
}

/* Reads the resource argument; NULL (with an error set) when unusable. */
static const char *arg_resource(sqlite3_context *ctx, sqlite3_value *v, size_t *len) {
    static const char *const msgs[3] = {"resource is NULL; pass the lock's name as text",
                                        "resource must be text (got a blob)", "resource must be text (got a number)"};
    size_t n;
    const char *s = arg_text(ctx, v, &n, msgs);
    if (!s) return NULL;
    if (n == 0) redlock_result_error(ctx, "resource is empty; pass the lock's name as text");
    else if (memchr(s, '\0', n)) redlock_result_error(ctx, "resource must not contain NUL characters");
    else if (n > RL_RESOURCE_MAX) redlock_result_error(ctx, "resource is too long (%zu bytes; at most %d)", n, RL_RESOURCE_MAX);
    else {
        *len = n;
        return s;
    }
    return NULL;
}

int redlock_arg_ms(sqlite3_context *ctx, sqlite3_value *v, const char *name, int64_t lo, int64_t hi, int64_t *out) {
    int64_t n = 0;
    if (!redlock_value_whole(v, &n) || n < lo || n > hi) {
        redlock_result_error(ctx, "%s must be a whole number of milliseconds from %lld to %lld", name, (long long)lo,
                             (long long)hi);
        return -1;
    }
    *out = n;
    return 0;
}

/* Reads a token argument; NULL (error set) when unusable. */
static const char *arg_token(sqlite3_context *ctx, sqlite3_value *v, size_t *len) {
    static const char *const msgs[3] = {
        "token is NULL; pass the token redlock_acquire returned (NULL from acquire means the lock was not taken)",
        "token must be the text redlock_acquire returned", "token must be the text redlock_acquire returned"};
    size_t n;
    const char *s = arg_text(ctx, v, &n, msgs);
    if (!s) return NULL;
    if (n == 0 || n > RL_TOKEN_ARG_MAX || memchr(s, '\0', n)) {
        redlock_result_error(ctx, "token must be the text redlock_acquire returned (got %s)",
                             n == 0 ? "an empty text" : "something else");
        return NULL;
    }
    *len = n;
    return s;
}

/* The resource name as a message shows it: its first 64 bytes, cut at a
 * character boundary. */
#define NAME(res) rl_text_excerpt((char[72]){0}, 72, (res), strlen(res), 64)

/* Turns a failed outcome into the SQL result: NULL for a refusal, an error otherwise. */
static void result_failure(sqlite3_context *ctx, const char *what, const char *res, const rl_outcome *o) {
    switch (o->status) {
    case RL_REFUSED: sqlite3_result_null(ctx); break;
    case RL_NOMEM: sqlite3_result_error_nomem(ctx); break;
    case RL_MISUSE: redlock_result_error(ctx, "%s", o->msg); break;
    case RL_INTERRUPTED:
        redlock_result_error(ctx, "interrupted (sqlite3_interrupt) while waiting to %s '%s': %s", what, NAME(res), o->msg);
        sqlite3_result_error_code(ctx, SQLITE_INTERRUPT);
        break;
    default:
        redlock_result_error(ctx, "could not %s '%s': %s%s", what, NAME(res), o->msg,
                             ((redlock_state *)sqlite3_user_data(ctx))->default_nodes && o->status == RL_NO_QUORUM
                                 ? REDLOCK_DEFAULT_NODES_HINT
                                 : "");
        break;
    }
}

/* Shared by redlock_acquire and redlock_lock: (resource, ttl_ms [, wait_ms]).
 * A refusal is NULL for acquire and an error for lock, so a script run with
 * .bail on stops instead of going on unprotected. */
static void acquire_common(sqlite3_context *ctx, int argc, sqlite3_value **argv, int strict) {
    size_t reslen;
    int64_t ttl, wait = 0;
    const char *res = arg_resource(ctx, argv[0], &reslen);
    if (!res || redlock_arg_ms(ctx, argv[1], "ttl_ms", 1, RL_TTL_MAX_MS, &ttl) != 0) return;
    if (argc > 2 && redlock_arg_ms(ctx, argv[2], "wait_ms", 0, RL_WAIT_MAX_MS, &wait) != 0) return;
    char token[RL_TOKEN_LEN + 1];
    rl_outcome o;
    rl_status st = rl_session_acquire(redlock_state_of(ctx)->session, res, reslen, ttl, wait, token, &o);
    if (st == RL_OK) sqlite3_result_text(ctx, token, RL_TOKEN_LEN, SQLITE_TRANSIENT);
    else if (st == RL_REFUSED && strict)
        redlock_result_error(ctx, "could not lock '%s' within %lld ms: %s", NAME(res), (long long)wait, o.msg);
    else result_failure(ctx, "lock", res, &o);
}

const char *redlock_arg_resource(sqlite3_context *ctx, sqlite3_value *v, size_t *len) {
    return arg_resource(ctx, v, len);
}

const char *redlock_arg_token(sqlite3_context *ctx, sqlite3_value *v, size_t *len) {
    return arg_token(ctx, v, len);
}

void redlock_result_failure(sqlite3_context *ctx, const char *what, const char *res, const rl_outcome *o) {
    result_failure(ctx, what, res, o);
}

static void fn_acquire(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (redlock_guard_allows(ctx, REDLOCK_G_ACQUIRE, argc, argv)) acquire_common(ctx, argc, argv, 0);
}

static void fn_lock(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (redlock_guard_allows(ctx, REDLOCK_G_LOCK, argc, argv)) acquire_common(ctx, argc, argv, 1);
}

/* redlock_acquire_shared(resource, ttl_ms [, wait_ms [, max_holders]]):
 * the token of a shared hold, NULL when held exclusively, full, or an
 * exclusive acquirer waits. */
static void fn_acquire_shared(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_ACQUIRE_SHARED, argc, argv)) return;
    size_t reslen;
    int64_t ttl, wait = 0, max_holders = 0;
    const char *res = arg_resource(ctx, argv[0], &reslen);
    if (!res || redlock_arg_ms(ctx, argv[1], "ttl_ms", 1, RL_TTL_MAX_MS, &ttl) != 0) return;
    if (argc > 2 && redlock_arg_ms(ctx, argv[2], "wait_ms", 0, RL_WAIT_MAX_MS, &wait) != 0) return;
    if (argc > 3 && sqlite3_value_type(argv[3]) != SQLITE_NULL) {
        if (!redlock_value_whole(argv[3], &max_holders) || max_holders < 0 || max_holders > RL_SHARED_MAX_HOLDERS) {
            redlock_result_error(ctx, "max_holders must be a whole number from 1 to %d, or 0 or NULL for no limit",
                                 RL_SHARED_MAX_HOLDERS);
            return;
        }
    }
    char token[RL_TOKEN_LEN + 1];
    rl_outcome o;
    rl_status st = rl_session_acquire_shared(redlock_state_of(ctx)->session, res, reslen, ttl, wait, max_holders, token, &o);
    if (st == RL_OK) sqlite3_result_text(ctx, token, RL_TOKEN_LEN, SQLITE_TRANSIENT);
    else result_failure(ctx, "lock", res, &o);
}

static void fn_release(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_RELEASE, argc, argv)) return;
    size_t reslen, toklen = 0;
    const char *res = arg_resource(ctx, argv[0], &reslen), *token = NULL;
    if (!res) return;
    if (argc > 1 && !(token = arg_token(ctx, argv[1], &toklen))) return;
    if (!redlock_txn_release_allowed(ctx, redlock_state_of(ctx), "redlock_release")) return;
    int not_held;
    rl_outcome o;
    rl_status st = rl_session_release(redlock_state_of(ctx)->session, res, reslen, token, toklen, &not_held, &o);
    if (not_held) sqlite3_result_null(ctx);
    else if (st == RL_OK) sqlite3_result_int(ctx, 1);
    else if (st == RL_REFUSED) sqlite3_result_int(ctx, 0);
    else result_failure(ctx, "release", res, &o);
}

static void fn_extend(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_EXTEND, argc, argv)) return;
    size_t reslen, toklen = 0;
    int64_t ttl;
    const char *res = arg_resource(ctx, argv[0], &reslen), *token = NULL;
    if (!res || redlock_arg_ms(ctx, argv[1], "ttl_ms", 1, RL_TTL_MAX_MS, &ttl) != 0) return;
    if (argc > 2 && !(token = arg_token(ctx, argv[2], &toklen))) return;
    if (!redlock_txn_extend_allowed(ctx, redlock_state_of(ctx), res, reslen, token, toklen, ttl)) return;
    rl_session *s = redlock_state_of(ctx)->session;
    /* A lock of this connection's taken with on_lost: found lost, the
     * statement stops (it is interrupted too) with the reason, instead of
     * a NULL that a script would go past. */
    rl_held h;
    int watched = rl_session_find(s, res, reslen, &h) == 0 && h.on_lost &&
                  (!token || (toklen == RL_TOKEN_LEN && memcmp(h.token, token, toklen) == 0));
    int not_held;
    rl_outcome o;
    rl_status st = rl_session_extend(s, res, reslen, token, toklen, ttl, &not_held, &o);
    if (not_held) sqlite3_result_null(ctx);
    else if (st == RL_OK) sqlite3_result_int64(ctx, o.validity_ms);
    else if (st == RL_REFUSED && watched)
        redlock_result_error(ctx, "lock '%s' was not extended: %s (it was taken with on_lost 1: the statement "
                                  "stops instead of returning NULL; take the lock again and start over)",
                             NAME(res), o.msg);
    else result_failure(ctx, "extend", res, &o);
}

static void fn_release_all(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_RELEASE_ALL, argc, argv)) return;
    if (!redlock_txn_release_allowed(ctx, redlock_state_of(ctx), "redlock_release_all")) return;
    sqlite3_result_int(ctx, rl_session_release_all(redlock_state_of(ctx)->session));
}

static void fn_validity(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    size_t reslen, toklen = 0;
    const char *res = arg_resource(ctx, argv[0], &reslen), *token = NULL;
    if (!res) return;
    if (argc > 1 && !(token = arg_token(ctx, argv[1], &toklen))) return;
    /* NULL when not held with validity left, as extend and fence answer
     * for a lock this connection does not hold. */
    int64_t left = rl_session_validity(redlock_state_of(ctx)->session, res, reslen, token, toklen);
    if (left > 0) sqlite3_result_int64(ctx, left);
    else sqlite3_result_null(ctx);
}

/* redlock_check(resource [, min_validity_ms]): the ms of validity left
 * when this connection holds resource with more than min_validity_ms (0
 * by default) left; else an error naming the lock and saying why, so a
 * script run with .bail on stops where redlock_validity would say 0. */
static void fn_check(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    size_t reslen;
    int64_t margin = 0;
    const char *res = arg_resource(ctx, argv[0], &reslen);
    if (!res) return;
    if (argc > 1 && redlock_arg_ms(ctx, argv[1], "min_validity_ms", 0, RL_TTL_MAX_MS, &margin) != 0) return;
    rl_held h;
    if (rl_session_find(redlock_state_of(ctx)->session, res, reslen, &h) != 0)
        redlock_result_error(ctx, "lock '%s' is not held by this connection (not taken here, released, or "
                                  "detached); take it first, e.g. SELECT redlock_lock('%s', ttl_ms)", NAME(res), NAME(res));
    else if (h.lost)
        redlock_result_error(ctx, "lock '%s' was lost: %s; stop the work it protects, then take it again and start "
                                  "over", NAME(res), h.lost_why);
    else if (h.validity_ms == 0)
        redlock_result_error(ctx, "lock '%s' has expired: its validity ran out while it was held; take it again and "
                                  "start over (extend it in time with redlock_extend, or set auto_extend to 1 before "
                                  "taking it)", NAME(res));
    else if (h.validity_ms <= margin)
        redlock_result_error(ctx, "lock '%s' has %lld ms of validity left, not more than the %lld ms asked; extend it "
                                  "first (redlock_extend) or ask for less", NAME(res), (long long)h.validity_ms,
                             (long long)margin);
    else sqlite3_result_int64(ctx, h.validity_ms);
}

static void fn_fence(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    size_t reslen;
    const char *res = arg_resource(ctx, argv[0], &reslen);
    if (!res) return;
    rl_held h;
    /* An expired or lost lock keeps its number while it is listed: the
     * protected resource's own check makes a stale number harmless. */
    if (rl_session_find(redlock_state_of(ctx)->session, res, reslen, &h) == 0 && h.fence > 0)
        sqlite3_result_int64(ctx, h.fence);
    else sqlite3_result_null(ctx);
}

/* 1 when setting name to v would make fewer yes votes enough than now
 * (unsafe_test_quorum 0 means a majority of the nodes). */
static int fewer_votes(rl_client *c, const char *name, sqlite3_value *v) {
    rl_setting_value old;
    rl_error err;
    int64_t want = 0;
    if (strcmp(name, "unsafe_test_quorum") != 0 || !redlock_value_whole(v, &want) ||
        rl_setting_get(c, name, &old, &err) != 0)
        return 0;
    int64_t majority = rl_client_node_count(c) / 2 + 1;
    return (want > 0 ? want : majority) < (old.i > 0 ? old.i : majority);
}

static void fn_config(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_CONFIG, argc, argv)) return;
    rl_client *c = rl_session_client(redlock_state_of(ctx)->session);
    rl_error err;
    if (sqlite3_value_type(argv[0]) != SQLITE_TEXT) {
        redlock_result_error(ctx, "the setting name must be text, as in redlock_config('timeout_ms')");
        return;
    }
    const char *name = (const char *)sqlite3_value_text(argv[0]);
    if (!name) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    if (memchr(name, '\0', (size_t)sqlite3_value_bytes(argv[0]))) {
        redlock_result_error(ctx, "the setting name must not contain NUL characters");
        return;
    }
    int type = rl_setting_type(name);
    rl_setting_value v = {.type = type};
    /* Held locks were taken with the key prefix and the quorum in force now;
     * they are released and extended the same way, never with fewer votes. */
    if (argc > 1 && (strcmp(name, "key_prefix") == 0 || fewer_votes(c, name, argv[1])) &&
        rl_session_holds_any(redlock_state_of(ctx)->session)) {
        redlock_result_error(ctx, "%s cannot %s while this connection holds locks (even lost or expired ones: "
                                  "they were taken with the value in force now); release them first, e.g. SELECT "
                                  "redlock_release_all()", name, strcmp(name, "key_prefix") == 0 ? "change" : "lower the votes needed");
        return;
    }
    /* The TLS settings are checked against the nodes with a password that
     * take them; a ROLLBACK of an open change of redlock_nodes would bring
     * back nodes (with their passwords) not checked against a new value. */
    if (argc > 1 && strncmp(name, "tls_", 4) == 0 && rl_session_nodes_open(redlock_state_of(ctx)->session)) {
        redlock_result_error(ctx, "%s cannot change while changes to redlock_nodes are not committed (a ROLLBACK "
                                  "would bring back nodes that were not checked against it); COMMIT or ROLLBACK "
                                  "first", name);
        return;
    }
    if (argc > 1) {
        int t = sqlite3_value_type(argv[1]);
        if (type == RL_SETTING_INT && redlock_value_whole(argv[1], &v.i)) {}
        else if (type == RL_SETTING_REAL && (t == SQLITE_INTEGER || t == SQLITE_FLOAT)) v.r = sqlite3_value_double(argv[1]);
        else if (type == RL_SETTING_TEXT && t == SQLITE_TEXT) v.text = (char *)sqlite3_value_text(argv[1]);
        else {
            /* wrong SQL type: rl_setting_set says what is expected */
            static const char *const got[] = {"?", "a whole number", "a real number", "text", "a blob", "NULL"};
            v.type = -1;
            v.got = got[t >= 1 && t <= 5 ? t : 0];
        }
        if (type == RL_SETTING_TEXT && v.text && memchr(v.text, '\0', (size_t)sqlite3_value_bytes(argv[1]))) {
            redlock_result_error(ctx, "%s must not contain NUL characters", name);
            return;
        }
        if (rl_setting_set(c, name, &v, &err) != 0) {
            redlock_result_error(ctx, "%s", err.msg);
            return;
        }
    }
    if (rl_setting_get(c, name, &v, &err) != 0) {
        redlock_result_error(ctx, "%s", err.msg);
        return;
    }
    if (v.type == RL_SETTING_INT) sqlite3_result_int64(ctx, v.i);
    else if (v.type == RL_SETTING_REAL) sqlite3_result_double(ctx, v.r);
    else sqlite3_result_text(ctx, v.text, -1, free);
}

static void fn_ping(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_PING, argc, argv)) return;
    int n = rl_lock_ping(rl_session_client(redlock_state_of(ctx)->session));
    if (n < 0) sqlite3_result_error_nomem(ctx);
    else sqlite3_result_int(ctx, n);
}

/* A JSON string of text that is valid UTF-8 without control characters
 * (rl_text_clean made it so): only the quote and the backslash need escaping. */
static void json_text(sqlite3_str *js, const char *s) {
    sqlite3_str_appendchar(js, 1, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') sqlite3_str_appendchar(js, 1, '\\');
        sqlite3_str_appendchar(js, 1, *s);
    }
    sqlite3_str_appendchar(js, 1, '"');
}

static void fn_holder(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    if (!redlock_guard_allows(ctx, REDLOCK_G_HOLDER, argc, argv)) return;
    size_t reslen;
    const char *res = arg_resource(ctx, argv[0], &reslen);
    if (!res) return;
    rl_holder h;
    rl_outcome o;
    if (rl_lock_holder(rl_session_client(redlock_state_of(ctx)->session), res, reslen, &h, &o) != RL_OK) {
        if (o.status == RL_NOMEM) sqlite3_result_error_nomem(ctx);
        else if (o.status == RL_MISUSE) redlock_result_error(ctx, "%s", o.msg);
        else redlock_result_error(ctx, "could not tell who holds '%s': %s", NAME(res), o.msg);
        return;
    }
    if (!h.held) {
        rl_holder_clear(&h);
        sqlite3_result_null(ctx);
        return;
    }
    sqlite3_str *js = sqlite3_str_new(NULL);
    sqlite3_str_appendall(js, "{\"ttl_ms\":");
    if (h.ttl_ms >= 0) sqlite3_str_appendf(js, "%lld", (long long)h.ttl_ms);
    else sqlite3_str_appendall(js, "null");
    sqlite3_str_appendall(js, ",\"nodes\":[");
    for (int i = 0; i < h.nnodes; i++) sqlite3_str_appendf(js, "%s%lld", i ? "," : "", (long long)h.node_ids[i]);
    sqlite3_str_appendall(js, "]");
    if (h.holders >= 0) {
        sqlite3_str_appendf(js, ",\"kind\":\"shared\",\"holders\":%lld,\"holder_list\":[", h.holders);
        for (int i = 0; i < h.nlist; i++) {
            const rl_holder_entry *e = &h.list[i];
            sqlite3_str_appendall(js, i ? ",{\"host\":" : "{\"host\":");
            json_text(js, e->host);
            sqlite3_str_appendf(js, ",\"pid\":%lld,\"app\":", e->pid);
            json_text(js, e->app);
            sqlite3_str_appendf(js, ",\"since\":%lld,\"ttl_ms\":%lld}", e->since_ms, (long long)e->ttl_ms);
        }
        sqlite3_str_appendall(js, "]");
    } else if (h.has_details) {
        sqlite3_str_appendall(js, ",\"kind\":");
        json_text(js, h.kind);
        sqlite3_str_appendall(js, ",\"host\":");
        json_text(js, h.host);
        sqlite3_str_appendf(js, ",\"pid\":%lld,\"app\":", h.pid);
        json_text(js, h.app);
        sqlite3_str_appendf(js, ",\"since\":%lld", h.since_ms);
    }
    sqlite3_str_appendall(js, "}");
    rl_holder_clear(&h);
    int len = sqlite3_str_length(js);
    char *text = sqlite3_str_finish(js);
    if (!text) sqlite3_result_error_nomem(ctx);
    else sqlite3_result_text(ctx, text, len, sqlite3_free);
}

static void fn_version(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    (void)argv;
    sqlite3_result_text(ctx, REDLOCK_VERSION, -1, SQLITE_STATIC);
}

int redlock_register_functions(sqlite3 *db, redlock_state *st) {
    static const struct {
        const char *name;
        int nargs;
        void (*fn)(sqlite3_context *, int, sqlite3_value **);
    } fns[] = {
        {"redlock_acquire", 2, fn_acquire}, {"redlock_acquire", 3, fn_acquire},
        {"redlock_release", 1, fn_release}, {"redlock_release", 2, fn_release},
        {"redlock_extend", 2, fn_extend},   {"redlock_extend", 3, fn_extend},
        {"redlock_config", 1, fn_config},   {"redlock_config", 2, fn_config},
        {"redlock_lock", 2, fn_lock},       {"redlock_lock", 3, fn_lock},
        {"redlock_release_all", 0, fn_release_all},
        {"redlock_validity", 1, fn_validity}, {"redlock_validity", 2, fn_validity},
        {"redlock_check", 1, fn_check},       {"redlock_check", 2, fn_check},
        {"redlock_fence", 1, fn_fence},
        {"redlock_ping", 0, fn_ping},
        {"redlock_holder", 1, fn_holder},
        {"redlock_acquire_shared", 2, fn_acquire_shared}, {"redlock_acquire_shared", 3, fn_acquire_shared},
        {"redlock_acquire_shared", 4, fn_acquire_shared},
    };
    /* Side effects on the network: never deterministic (SQLite could
     * factor a call out), never from a view or trigger (DIRECTONLY); a
     * CHECK constraint is kept out by redlock_guard. */
    const int flags = SQLITE_UTF8 | SQLITE_DIRECTONLY;
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        int rc = sqlite3_create_function_v2(db, fns[i].name, fns[i].nargs, flags, redlock_state_ref(st), fns[i].fn,
                                            NULL, NULL, redlock_state_unref);
        if (rc != SQLITE_OK) return rc;
    }
    return sqlite3_create_function_v2(db, "redlock_version", 0, SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS,
                                      NULL, fn_version, NULL, NULL, NULL);
}
