/* unit: table-driven tests of the engine's pure modules, the parts whose
 * exact bytes no SQL test can see: URL parsing and formatting (rl_endpoint),
 * the RESP command formatter and reply reader (rl_resp), reply
 * classification into votes (rl_vote), the ACL probe's answers (rl_acl),
 * the text cleaning and secret masking of everything shown to users
 * (rl_text), and the ring of recent events (rl_events). Each table row is one
 * case; a failing row prints its table, row and what differed.
 *
 *   make unit              build/unit/unit (ASan+UBSan with SANITIZE=1)
 * SPDX-License-Identifier: BSD-3-Clause */
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_acl.h"
#include "rl_endpoint.h"
#include "rl_evalsha.h"
#include "rl_events.h"
#include "rl_floor.h"
#include "rl_nameindex.h"
#include "rl_resp.h"
#include "rl_scripts.h"
#include "rl_text.h"
#include "rl_vote.h"

static int cases, failures;

__attribute__((format(printf, 3, 4))) static void expect(int ok, const char *table, const char *fmt, ...) {
    cases++;
    if (ok) return;
    failures++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s: ", table);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *or_null(const char *s) { return s ? s : "(null)"; }

static int same(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* ---- rl_endpoint: URL parsing -------------------------------------------- */

static const struct url_case {
    const char *url;
    int ok;
    const char *host;
    int port, db;
    const char *user, *pass;
    int tls, timeout_ms;
    const char *error;  /* for !ok: a piece of the message */
} url_cases[] = {
    {"redis://127.0.0.1", 1, "127.0.0.1", 6379, 0, NULL, NULL, 0, 0, NULL},
    {"redis://h:6380/3", 1, "h", 6380, 3, NULL, NULL, 0, 0, NULL},
    {"redis://u:p@h", 1, "h", 6379, 0, "u", "p", 0, 0, NULL},
    {"redis://:secret@h", 1, "h", 6379, 0, NULL, "secret", 0, 0, NULL},
    {"redis://u%40x:p%3Aw@h", 1, "h", 6379, 0, "u@x", "p:w", 0, 0, NULL},
    {"redis://a@b@h", 1, "h", 6379, 0, "a@b", NULL, 0, 0, NULL},
    {"redis://[::1]:7000/1", 1, "::1", 7000, 1, NULL, NULL, 0, 0, NULL},
    {"rediss://h?tls_verify=0", 1, "h", 6379, 0, NULL, NULL, 1, 0, NULL},
    {"redis://h?timeout_ms=25", 1, "h", 6379, 0, NULL, NULL, 0, 25, NULL},
    {"redis://h/", 1, "h", 6379, 0, NULL, NULL, 0, 0, NULL},
    {"http://h", 0, NULL, 0, 0, NULL, NULL, 0, 0, "must start with redis://"},
    {"redis://", 0, NULL, 0, 0, NULL, NULL, 0, 0, "empty host"},
    {"redis://h:0", 0, NULL, 0, 0, NULL, NULL, 0, 0, "port must be a number from 1 to 65535"},
    {"redis://h:65536", 0, NULL, 0, 0, NULL, NULL, 0, 0, "port"},
    {"redis://h:", 0, NULL, 0, 0, NULL, NULL, 0, 0, "port"},
    {"redis://h/x", 0, NULL, 0, 0, NULL, NULL, 0, 0, "database number"},
    {"redis://h/1000001", 0, NULL, 0, 0, NULL, NULL, 0, 0, "database number"},
    {"redis://[::1", 0, NULL, 0, 0, NULL, NULL, 0, 0, "no closing ']'"},
    {"redis://[::1]x", 0, NULL, 0, 0, NULL, NULL, 0, 0, "after ']'"},
    {"redis://h h", 0, NULL, 0, 0, NULL, NULL, 0, 0, "not allowed in a host name"},
    {"redis://u%4:p@h", 0, NULL, 0, 0, NULL, NULL, 0, 0, "bad percent-escape"},
    {"redis://u%00:p@h", 0, NULL, 0, 0, NULL, NULL, 0, 0, "bad percent-escape"},
    {"redis://h?timeout_ms=0", 0, NULL, 0, 0, NULL, NULL, 0, 0, "timeout_ms must be a number from 1 to 600000"},
    {"redis://h?timeout_ms=600001", 0, NULL, 0, 0, NULL, NULL, 0, 0, "timeout_ms"},
    {"redis://h?timeout_ms=1&timeout_ms=2", 0, NULL, 0, 0, NULL, NULL, 0, 0, "given twice"},
    {"redis://h?nope=1", 0, NULL, 0, 0, NULL, NULL, 0, 0, "unknown option"},
    {"redis://h?timeout_ms", 0, NULL, 0, 0, NULL, NULL, 0, 0, "name=value"},
    {"redis://h?tls_verify=1", 0, NULL, 0, 0, NULL, NULL, 0, 0, "needs rediss://"},
    {"rediss://h?tls_ca_file=", 0, NULL, 0, 0, NULL, NULL, 0, 0, "file path of 1 to 1024 bytes"},
};

static void test_url_parse(void) {
    for (size_t i = 0; i < sizeof url_cases / sizeof url_cases[0]; i++) {
        const struct url_case *t = &url_cases[i];
        rl_endpoint ep;
        rl_error err = {0};
        int rc = rl_endpoint_parse_url(t->url, strlen(t->url), &ep, &err);
        if (!t->ok) {
            expect(rc == -1 && err.kind == RL_ERR_INVALID && strstr(err.msg, t->error), "url_parse",
                   "'%s': rc %d kind %d message '%s', want an error with '%s'", t->url, rc, (int)err.kind, err.msg,
                   t->error);
            /* cleared on failure: nothing left to free, nothing half set */
            expect(!ep.host && !ep.username && !ep.password && !ep.tls_opts.ca_file, "url_parse",
                   "'%s': output not cleared after the failure", t->url);
            continue;
        }
        expect(rc == 0 && same(ep.host, t->host) && ep.port == t->port && ep.db == t->db && same(ep.username, t->user) &&
                   same(ep.password, t->pass) && ep.tls == t->tls && ep.timeout_ms == t->timeout_ms,
               "url_parse", "'%s': rc %d (%s) host %s port %d db %d user %s pass %s tls %d timeout %d", t->url, rc,
               err.msg, or_null(ep.host), ep.port, ep.db, or_null(ep.username), or_null(ep.password), ep.tls,
               ep.timeout_ms);
        if (rc == 0) {
            /* what redlock_nodes.url shows parses back to the same node, password masked */
            char shown[RL_URL_MAX];
            rl_endpoint again;
            rl_endpoint_format_url(&ep, shown, sizeof shown);
            int rc2 = rl_endpoint_parse_url(shown, strlen(shown), &again, &err);
            expect(rc2 == 0 && same(again.host, ep.host) && again.port == ep.port && again.db == ep.db &&
                       same(again.username, ep.username) && (!ep.password || same(again.password, RL_TEXT_MASK)),
                   "url_format", "'%s' shown as '%s' (%s)", t->url, shown, rc2 ? err.msg : "parses differently");
            if (rc2 == 0) rl_endpoint_clear(&again);
        }
        rl_endpoint_clear(&ep);
    }
    /* the length limit and a NUL inside */
    char longurl[RL_URL_MAX + 16];
    memset(longurl, 'a', sizeof longurl);
    memcpy(longurl, "redis://", 8);
    rl_endpoint ep;
    rl_error err = {0};
    char limit[48];
    snprintf(limit, sizeof limit, "at most %d bytes", RL_URL_MAX);
    expect(rl_endpoint_parse_url(longurl, sizeof longurl, &ep, &err) == -1 && strstr(err.msg, limit),
           "url_parse", "a %zu-byte URL: '%s'", sizeof longurl, err.msg);
    expect(rl_endpoint_parse_url("redis://h\0x", 11, &ep, &err) == -1 && strstr(err.msg, "NUL"), "url_parse",
           "a URL with a NUL: '%s'", err.msg);
}

/* ---- rl_resp: command formatting and reply reading ------------------------ */

static void test_resp_format(void) {
    static const struct {
        int argc;
        const char *argv[4];
        size_t lens[4];
        const char *want;
        size_t wantlen;
    } t[] = {
        {1, {"PING"}, {4}, "*1\r\n$4\r\nPING\r\n", 14},
        {3, {"SET", "k", "v"}, {3, 1, 1}, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n", 27},
        {2, {"GET", ""}, {3, 0}, "*2\r\n$3\r\nGET\r\n$0\r\n\r\n", 19},
        {2, {"GET", "a\0\r\nb"}, {3, 5}, "*2\r\n$3\r\nGET\r\n$5\r\na\0\r\nb\r\n", 24},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rl_buf b = {0};
        int rc = rl_buf_append_command(&b, t[i].argc, t[i].argv, t[i].lens);
        expect(rc == 0 && b.len == t[i].wantlen && memcmp(b.data, t[i].want, b.len) == 0, "resp_format",
               "row %zu: %zu bytes, want %zu", i, b.len, t[i].wantlen);
        rl_buf_consume(&b, b.len);
        expect(b.off == b.len, "resp_format", "row %zu: consume left %zu unsent", i, b.len - b.off);
        rl_buf_free(&b);
    }
}

/* rl_resp_decimal: every digit count, and the largest value. */
static void test_resp_decimal(void) {
    static const struct {
        unsigned long long v;
        const char *want;
    } t[] = {{0, "0"}, {9, "9"}, {10, "10"}, {604800000, "604800000"}, {18446744073709551615ULL, "18446744073709551615"}};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char buf[RL_DECIMAL_MAX];
        size_t n = rl_resp_decimal(buf, t[i].v);
        expect(n == strlen(t[i].want) && strcmp(buf, t[i].want) == 0, "resp_decimal", "%llu: '%s'", t[i].v, buf);
    }
}

static void test_resp_read(void) {
    static const struct {
        const char *bytes;
        int ok;      /* 1 a reply, 0 incomplete, -1 protocol error */
        int type;
        long long integer;
        const char *str;
        size_t elements;
    } t[] = {
        {"+OK\r\n", 1, REDIS_REPLY_STATUS, 0, "OK", 0},
        {"-ERR bad\r\n", 1, REDIS_REPLY_ERROR, 0, "ERR bad", 0},
        {":42\r\n", 1, REDIS_REPLY_INTEGER, 42, NULL, 0},
        {":-7\r\n", 1, REDIS_REPLY_INTEGER, -7, NULL, 0},
        {":0\r\n", 1, REDIS_REPLY_INTEGER, 0, NULL, 0},
        {":9223372036854775807\r\n", 1, REDIS_REPLY_INTEGER, LLONG_MAX, NULL, 0},
        {":-9223372036854775808\r\n", 1, REDIS_REPLY_INTEGER, LLONG_MIN, NULL, 0},
        {":007\r\n", -1, 0, 0, NULL, 0}, /* left by the quick path to hiredis, which refuses it */
        {":-0\r\n", -1, 0, 0, NULL, 0},
        {":12\r", 0, 0, 0, NULL, 0},
        {":12", 0, 0, 0, NULL, 0},
        {"$3\r\nabc\r\n", 1, REDIS_REPLY_STRING, 0, "abc", 0},
        {"$-1\r\n", 1, REDIS_REPLY_NIL, 0, NULL, 0},
        {"*2\r\n$1\r\na\r\n:1\r\n", 1, REDIS_REPLY_ARRAY, 0, NULL, 2},
        {"*0\r\n", 1, REDIS_REPLY_ARRAY, 0, NULL, 0},
        {"$3\r\nab", 0, 0, 0, NULL, 0},
        {"*2\r\n:1\r\n", 0, 0, 0, NULL, 0},
        {"?what\r\n", -1, 0, 0, NULL, 0},
        {"*2000000000\r\n", -1, 0, 0, NULL, 0}, /* more elements than RL_REPLY_MAX_ELEMENTS */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        redisReader *r = rl_reader_new();
        if (!r) {
            expect(0, "resp_read", "no reader");
            return;
        }
        rl_reply *out = NULL;
        rl_buf pending = {0};
        int fed = rl_buf_append(&pending, t[i].bytes, strlen(t[i].bytes));
        int rc = fed == 0 ? rl_resp_next_reply(r, &pending, &out) : REDIS_ERR;
        rl_buf_free(&pending);
        int got = rc != REDIS_OK ? -1 : out ? 1 : 0;
        const rl_reply *rep = out;
        int ok = got == t[i].ok;
        if (ok && got == 1)
            ok = rep->type == t[i].type && rep->integer == t[i].integer && same(rep->str, t[i].str) &&
                 rep->elements == t[i].elements && (!rep->str || rep->len == strlen(rep->str));
        expect(ok, "resp_read", "row %zu: got %d (type %d), want %d (type %d)", i, got, rep ? rep->type : -1, t[i].ok,
               t[i].type);
        if (i + 1 == sizeof t / sizeof t[0])
            expect(rl_reader_too_big(r), "resp_read", "a huge array is not reported as too big");
        rl_reply_free(out);
        rl_reader_free(r);
    }
}

/* Feeds "*<n>\r\n" and n strings of len bytes, one at a time (so the
 * bytes still to parse never pass one string); returns what the last
 * rl_resp_next_reply said: 1 a reply, 0 none yet, -1 the reader failed. */
static int feed_long_strings(redisReader *r, int n, size_t len) {
    char head[64];
    rl_buf pending = {0};
    rl_reply *out = NULL;
    int got = 0;
    snprintf(head, sizeof head, "*%d\r\n", n);
    if (rl_buf_append(&pending, head, strlen(head)) != 0) return -2;
    char *body = malloc(len);
    if (!body) return -2;
    memset(body, 'x', len);
    for (int k = 0; k < n && got == 0; k++) {
        snprintf(head, sizeof head, "$%zu\r\n", len);
        if (rl_buf_append(&pending, head, strlen(head)) != 0 || rl_buf_append(&pending, body, len) != 0 ||
            rl_buf_append(&pending, "\r\n", 2) != 0) {
            got = -2;
            break;
        }
        int rc = rl_resp_next_reply(r, &pending, &out);
        got = rc != REDIS_OK ? -1 : out ? 1 : 0;
    }
    free(body);
    rl_buf_free(&pending);
    rl_reply_free(out);
    return got;
}

/* hiredis drops what it parsed even inside a reply, so a reply of many
 * long strings never has many bytes waiting: the strings' copies must be
 * what is bounded (RL_REPLY_MAX_BYTES together). */
static void test_resp_reply_bytes_bounded(void) {
    const size_t six_mib = 6u << 20;
    redisReader *r = rl_reader_new();
    expect(r && feed_long_strings(r, 2, six_mib) == 1, "resp_bytes", "two strings of 6 MiB: one reply");
    rl_reader_free(r);
    r = rl_reader_new();
    expect(r && feed_long_strings(r, 3, six_mib) == -1, "resp_bytes", "three strings of 6 MiB: refused");
    expect(r && rl_reader_too_big(r) == RL_REPLY_TOO_LONG, "resp_bytes", "reported as too long");
    rl_reader_free(r);
}

/* Reads every reply of bytes fed in chunks of chunk bytes with
 * rl_resp_next_reply (quick) or hiredis alone, described into out. */
static void replies_of(const char *bytes, size_t n, size_t chunk, int quick, char *out, size_t outlen) {
    redisReader *r = rl_reader_new();
    rl_buf pending = {0};
    size_t used = 0;
    out[0] = '\0';
    int failed = 0; /* a failed reader reads nothing more */
    for (size_t at = 0; r && !failed && at < n; at += chunk) {
        size_t len = n - at < chunk ? n - at : chunk;
        if (quick ? rl_buf_append(&pending, bytes + at, len) != 0 : redisReaderFeed(r, bytes + at, len) != REDIS_OK)
            break;
        for (;;) {
            rl_reply *rep = NULL;
            void *raw = NULL;
            int rc = quick ? rl_resp_next_reply(r, &pending, &rep) : redisReaderGetReply(r, &raw);
            if (!quick) rep = raw;
            if (rc != REDIS_OK || !rep) {
                if (rc != REDIS_OK) used += (size_t)snprintf(out + used, outlen - used, "error;"), failed = 1;
                break;
            }
            used += (size_t)snprintf(out + used, outlen - used, "%d:%lld:%s;", rep->type, rep->integer,
                                     rep->str ? rep->str : "");
            rl_reply_free(rep);
            if (used >= outlen) used = outlen - 1;
        }
    }
    rl_reader_free(r);
    rl_buf_free(&pending);
}

/* The quick path reads what hiredis reads, reply for reply, whatever the
 * chunks, past the 1 KiB hiredis trims at. */
static void test_resp_quick_matches_hiredis(void) {
    char stream[4096];
    size_t n = 0;
    static const char *const parts[] = {":1\r\n", ":-12\r\n", "$-1\r\n", "+OK\r\n", ":0\r\n", ":-90\r\n",
                                        "*2\r\n:1\r\n:2\r\n", "-ERR x\r\n", ":9223372036854775807\r\n"};
    for (int i = 0; n + 32 < sizeof stream; i++) {
        const char *p = parts[(i * 7 + i / 3) % (sizeof parts / sizeof parts[0])];
        memcpy(stream + n, p, strlen(p));
        n += strlen(p);
    }
    static char a[16384], b[16384];
    const size_t chunks[] = {1, 2, 3, 5, 7, 64, 1000, sizeof stream};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        replies_of(stream, n, chunks[i], 1, a, sizeof a);
        replies_of(stream, n, chunks[i], 0, b, sizeof b);
        expect(strcmp(a, b) == 0 && strlen(a) > 1000, "resp_quick", "chunks of %zu: the replies differ", chunks[i]);
    }
    replies_of(":1\r\n:x\r\n:2\r\n", 14, 3, 1, a, sizeof a); /* a bad integer: hiredis's answer, whatever it is */
    replies_of(":1\r\n:x\r\n:2\r\n", 14, 3, 0, b, sizeof b);
    expect(strcmp(a, b) == 0, "resp_quick", "a bad integer: '%s' against hiredis's '%s'", a, b);
}

/* ---- rl_vote: what a reply means ------------------------------------------ */

static void test_vote_classify(void) {
    static const struct {
        int kind;
        int type;
        long long integer;
        const char *str;
        int want;
        long long value;
    } t[] = {
        {RL_K_ACQUIRE, REDIS_REPLY_STATUS, 0, "OK", RL_V_YES, 0},
        {RL_K_ACQUIRE, REDIS_REPLY_NIL, 0, NULL, RL_V_NO, 0},
        {RL_K_ACQUIRE, REDIS_REPLY_STATUS, 0, "QUEUED", RL_V_FAIL, 0},
        {RL_K_ACQUIRE, REDIS_REPLY_STRING, 0, "OK", RL_V_FAIL, 0},    /* a bulk "OK" is not SET's answer */
        {RL_K_ACQUIRE, REDIS_REPLY_INTEGER, 1, NULL, RL_V_FAIL, 0},
        {RL_K_ACQUIRE, REDIS_REPLY_ERROR, 0, "OOM command not allowed", RL_V_FAIL, 0},
        {RL_K_ACQUIRE_FENCED, REDIS_REPLY_INTEGER, 17, NULL, RL_V_YES, 17},
        {RL_K_ACQUIRE_FENCED, REDIS_REPLY_INTEGER, 0, NULL, RL_V_FAIL, 0},  /* a counter never gives 0 */
        {RL_K_ACQUIRE_FENCED, REDIS_REPLY_INTEGER, -3, NULL, RL_V_FAIL, 0},
        {RL_K_ACQUIRE_FENCED, REDIS_REPLY_NIL, 0, NULL, RL_V_NO, 0},
        {RL_K_RELEASE, REDIS_REPLY_INTEGER, 1, NULL, RL_V_YES, 0},
        {RL_K_RELEASE, REDIS_REPLY_INTEGER, 0, NULL, RL_V_NO, 0},
        {RL_K_RELEASE, REDIS_REPLY_INTEGER, 2, NULL, RL_V_FAIL, 0},
        {RL_K_RELEASE, REDIS_REPLY_NIL, 0, NULL, RL_V_FAIL, 0},
        {RL_K_EXTEND, REDIS_REPLY_INTEGER, 1, NULL, RL_V_YES, 0},
        {RL_K_EXTEND, REDIS_REPLY_INTEGER, 0, NULL, RL_V_NO, 0},
        {RL_K_EXTEND, REDIS_REPLY_STATUS, 0, "OK", RL_V_FAIL, 0},
        {RL_K_CLEANUP, REDIS_REPLY_INTEGER, 1, NULL, RL_V_YES, 0},
        {RL_K_WRITEBACK, REDIS_REPLY_INTEGER, 1, NULL, RL_V_YES, 0},
        {RL_K_WRITEBACK, REDIS_REPLY_INTEGER, 0, NULL, RL_V_FAIL, 0},
        {RL_K_CHECK, REDIS_REPLY_INTEGER, 2500, NULL, RL_V_YES, 2500},     /* ms left */
        {RL_K_CHECK, REDIS_REPLY_INTEGER, 0, NULL, RL_V_NO, 0},
        {RL_K_CHECK, REDIS_REPLY_INTEGER, -1, NULL, RL_V_FAIL, 0},         /* ours, but no expiry */
        {RL_K_CHECK, REDIS_REPLY_INTEGER, -2, NULL, RL_V_FAIL, 0},
        {RL_K_CHECK, REDIS_REPLY_INTEGER, 3LL * 4294967296LL + 900, NULL, RL_V_YES, 3LL * 4294967296LL + 900},
        {RL_K_ACQUIRE_SHARED, REDIS_REPLY_INTEGER, 1, NULL, RL_V_YES, 0},
        {RL_K_ACQUIRE_SHARED, REDIS_REPLY_INTEGER, 0, NULL, RL_V_NO, 0},   /* held exclusively, full, writer waits */
        {RL_K_ACQUIRE_SHARED, REDIS_REPLY_INTEGER, 2, NULL, RL_V_FAIL, 0},
        {RL_K_ACQUIRE_SHARED, REDIS_REPLY_STATUS, 0, "OK", RL_V_FAIL, 0},  /* a plain SET's answer is no holder */
        {RL_K_ACQUIRE_SHARED, REDIS_REPLY_NIL, 0, NULL, RL_V_FAIL, 0},
        {RL_K_MARK, REDIS_REPLY_INTEGER, 1, NULL, RL_V_YES, 0},
        {RL_K_AUTH, REDIS_REPLY_STATUS, 0, "OK", RL_V_FAIL, 0},          /* not a lock command */
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rl_reply r = {.type = t[i].type, .integer = t[i].integer, .str = (char *)t[i].str,
                      .len = t[i].str ? strlen(t[i].str) : 0};
        long long value = -1;
        char why[RL_ERR_REASON_MAX];
        int st = rl_vote_classify(t[i].kind, &r, NULL, &value, why, sizeof why);
        expect(st == t[i].want && value == t[i].value && (st == RL_V_YES) == (why[0] == '\0'), "vote_classify",
               "row %zu (kind %d): state %d value %lld why '%s', want state %d value %lld", i, t[i].kind, st, value, why,
               t[i].want, t[i].value);
    }
    long long value;
    char why[RL_ERR_REASON_MAX];
    expect(rl_vote_classify(RL_K_ACQUIRE, NULL, NULL, &value, why, sizeof why) == RL_V_FAIL, "vote_classify",
           "no reply is not a failure");
    /* an error reply that echoes the token: masked, whole or cut */
    const char *token = "0123456789abcdef0123456789abcdef";
    rl_secrets sec = {.s = {token}, .len = {32}, .n = 1};
    rl_reply err = {.type = REDIS_REPLY_ERROR, .str = "ERR bad args 'SET' 'k' '0123456789abcdef0123'", .len = 0};
    err.len = strlen(err.str);
    rl_vote_classify(RL_K_ACQUIRE, &err, &sec, &value, why, sizeof why);
    expect(!strstr(why, "0123456789") && strstr(why, RL_TEXT_MASK), "vote_classify", "token not masked: '%s'", why);
}

/* The name index against a plain scan of the same array, through random
 * appends, swap-removals, drops and lookups (present and absent names),
 * with the array growing well past the size where the index is used. */
typedef struct ni_item {
    char name[24];
    size_t len;
} ni_item;

static const char *ni_name(const void *items, int i, size_t *len) {
    const ni_item *it = (const ni_item *)items + i;
    *len = it->len;
    return it->name;
}

static int ni_scan(const ni_item *items, int n, const char *s, size_t len) {
    for (int i = 0; i < n; i++)
        if (items[i].len == len && memcmp(items[i].name, s, len) == 0) return i;
    return -1;
}

static void test_nameindex(void) {
    enum { CAP = 700 };
    static ni_item items[CAP];
    rl_nameindex x = {0};
    int n = 0, next = 0, bad = 0, lookups = 0;
    char first[128] = "";
    unsigned r = 12345;
    for (int step = 0; step < 40000 && !bad; step++) {
        r = r * 1103515245u + 12345u;
        unsigned op = (r >> 16) % 100;
        if (op < 45 && n < CAP) { /* append a new name (some of one length, some of others) */
            ni_item *it = &items[n++];
            it->len = (size_t)snprintf(it->name, sizeof it->name, (next % 3) ? "k%d" : "lock:%08d", next);
            next++;
            rl_nameindex_appended(&x, items, n, ni_name);
        } else if (op < 80 && n > 0) { /* remove one, the last moving into its place */
            int i = (int)((r >> 8) % (unsigned)n);
            rl_nameindex_removing(&x, items, n, ni_name, i);
            items[i] = items[--n];
        } else if (op < 82) {
            rl_nameindex_drop(&x);
        } else { /* look up a held name, and a name never given */
            char s[24];
            int k = (int)((r >> 4) % (unsigned)(next + 1));
            size_t len = (size_t)snprintf(s, sizeof s, (k % 3) ? "k%d" : "lock:%08d", k);
            int want = ni_scan(items, n, s, len), got = rl_nameindex_find(&x, items, n, ni_name, s, len);
            lookups++;
            if (got != want) {
                bad = 1;
                snprintf(first, sizeof first, "step %d: '%s' found at %d, a scan says %d (%d items)", step, s, got, want, n);
            }
        }
    }
    expect(!bad, "nameindex", "%d lookups as a scan finds them%s%s", lookups, bad ? ": " : "", first);
    int misplaced = 0;
    for (int i = 0; i < n; i++) /* every item still found where it is */
        misplaced += rl_nameindex_find(&x, items, n, ni_name, items[i].name, items[i].len) != i;
    expect(!misplaced, "nameindex", "%d of the %d items at the end not found at their own position", misplaced, n);
    expect(next > 10000, "nameindex", "the walk appended %d names", next);
    /* Items cut off without telling the index: a position past the end is
     * never returned or read; the index falls back to a scan. */
    if (n > 40) {
        const ni_item cut = items[n - 1];
        int got = rl_nameindex_find(&x, items, n - 1, ni_name, cut.name, cut.len);
        expect(got == ni_scan(items, n - 1, cut.name, cut.len), "nameindex",
               "a name past the end of the items found at %d", got);
    }
    rl_nameindex_free(&x);

    /* Grown to CAP items, then removed down to 20: the large table goes,
     * and the one built for the 20 left is small and finds each of them. */
    n = 0;
    for (int i = 0; i < CAP; i++) {
        ni_item *it = &items[n++];
        it->len = (size_t)snprintf(it->name, sizeof it->name, "grow:%d", i);
        rl_nameindex_appended(&x, items, n, ni_name);
        if (i == 0 || i == RL_NAMEINDEX_MIN || i == CAP - 1) rl_nameindex_find(&x, items, n, ni_name, "?", 1);
    }
    size_t grown = x.mask + 1;
    while (n > 20) {
        rl_nameindex_removing(&x, items, n, ni_name, 0);
        items[0] = items[--n];
    }
    misplaced = 0;
    for (int i = 0; i < n; i++) misplaced += rl_nameindex_find(&x, items, n, ni_name, items[i].name, items[i].len) != i;
    expect(grown >= 8 * CAP && x.mask + 1 <= 8 * 64 && !misplaced, "nameindex",
           "table of %zu slots at %d items, %zu at 20 (%d misplaced)", grown, CAP, x.mask + 1, misplaced);
    rl_nameindex_free(&x);
}

/* The Redis Cluster hash tag of key (its length in *len), or NULL when the
 * whole key is hashed: written here from Redis's rule, to check the engine's
 * floors against it. */
static const char *hash_tag(const char *key, size_t len, size_t *taglen) {
    size_t o = 0;
    while (o < len && key[o] != '{') o++;
    if (o == len) return NULL;
    size_t c = o + 1;
    while (c < len && key[c] != '}') c++;
    if (c == len || c == o + 1) return NULL;
    *taglen = c - o - 1;
    return key + o + 1;
}

/* A key's fencing floor: the prefix's, or with the key's Redis Cluster hash
 * tag (first '{', first '}' after it, not empty) so it hashes to the
 * key's slot; each distinct floor once, in the order first met. */
static void test_floor_keys(void) {
    static const struct {
        const char *prefix, *key, *floor;
    } floor_cases[] = {
        {"", "job", "redlock-fence-floor"},
        {"app:", "app:job", "app:redlock-fence-floor"},
        {"", "{user42}:a", "redlock-fence-floor{user42}"},
        {"app:", "app:x{t}y{z}", "app:redlock-fence-floor{t}"},
        {"", "a{}b{c}", "redlock-fence-floor"},      /* empty tag: the whole key is hashed */
        {"", "a{b", "redlock-fence-floor"},          /* no closing brace */
        {"", "a}b{c}", "redlock-fence-floor{c}"},    /* a '}' before the first '{' does not count */
        {"", "{{x}}", "redlock-fence-floor{{x}"},    /* the tag is "{x" */
        {"{p}:", "{p}:job", "{p}:redlock-fence-floor"},       /* the prefix's tag is the floor's */
        {"p{", "p{t}x", "p{t}redlock-fence-floor"},            /* a tag begun in the prefix */
        {"p{", "p{{t}x", "p{{t}redlock-fence-floor"},
        {"a{b", "a{b{t}x", "a{b{t}redlock-fence-floor"},
        {"p{", "p{x", "p{redlock-fence-floor"},                /* no tag at all */
    };
    for (size_t i = 0; i < sizeof floor_cases / sizeof floor_cases[0]; i++) {
        char out[128];
        size_t pl = strlen(floor_cases[i].prefix), kl = strlen(floor_cases[i].key);
        size_t n = rl_floor_key(floor_cases[i].prefix, pl, floor_cases[i].key, kl, out);
        expect(n <= RL_FLOOR_KEY_MAX(pl, kl) && n == strlen(floor_cases[i].floor) && memcmp(out, floor_cases[i].floor, n) == 0,
               "floor_key", "%s: got '%.*s', want %s", floor_cases[i].key, (int)n, out, floor_cases[i].floor);
        size_t kt, ft;
        const char *ktag = hash_tag(floor_cases[i].key, kl, &kt), *ftag = hash_tag(out, n, &ft);
        expect(!ktag || (ftag && kt == ft && memcmp(ktag, ftag, kt) == 0), "floor_key",
               "%s: the floor '%.*s' is not in the key's cluster slot", floor_cases[i].key, (int)n, out);
    }
    /* A name whose key is its own floor: the engine refuses it. */
    static const struct {
        const char *prefix, *name;
        int own;
    } own_cases[] = {
        {"p{", "t}redlock-fence-floor", 1}, {"a{b", "c}redlock-fence-floor", 1}, {"p{", "t}x", 0},
        {"", "t}redlock-fence-floor", 0},   {"{p}:", "t}redlock-fence-floor", 0}, {"p{", "}redlock-fence-floor", 0},
        {"p{", "t}redlock-fence-floorx", 0},
    };
    for (size_t i = 0; i < sizeof own_cases / sizeof own_cases[0]; i++) {
        char key[128], out[256];
        size_t pl = strlen(own_cases[i].prefix), nl = strlen(own_cases[i].name);
        memcpy(key, own_cases[i].prefix, pl);
        memcpy(key + pl, own_cases[i].name, nl);
        size_t n = rl_floor_key(own_cases[i].prefix, pl, key, pl + nl, out);
        int own = rl_floor_is_own(own_cases[i].prefix, pl, own_cases[i].name, nl);
        int same = n == pl + nl && memcmp(out, key, n) == 0;
        expect(own == own_cases[i].own && own == same, "floor_is_own",
               "%s + %s: is_own %d, want %d (its floor '%.*s')", own_cases[i].prefix, own_cases[i].name, own,
               own_cases[i].own, (int)n, out);
    }
    const char *keys[] = {"a", "{t}b", "c", "{u}d", "{t}e", "f"};
    size_t lens[6];
    for (int i = 0; i < 6; i++) lens[i] = strlen(keys[i]);
    rl_floors f;
    expect(rl_floors_make(&f, "", keys, lens, 6) == 0 && f.m == 3, "floors", "3 distinct floors, got %d", f.m);
    const char *want[] = {"redlock-fence-floor", "redlock-fence-floor{t}", "redlock-fence-floor{u}"};
    for (int j = 0; j < f.m && j < 3; j++)
        expect(f.len[j] == strlen(want[j]) && memcmp(f.key[j], want[j], f.len[j]) == 0, "floors", "floor %d: '%.*s'",
               j, (int)f.len[j], f.key[j]);
    rl_floors_free(&f);
    /* Many names with tags of their own: each floor once, found through the index. */
    enum { MANY = 3000 };
    static char names[MANY][24];
    static const char *nk[MANY];
    static size_t nl[MANY];
    for (int i = 0; i < MANY; i++) {
        nl[i] = (size_t)snprintf(names[i], sizeof names[i], "{g%d}n%d", i % 1000, i);
        nk[i] = names[i];
    }
    expect(rl_floors_make(&f, "p:", nk, nl, MANY) == 0 && f.m == 1000, "floors", "1000 distinct tags, got %d", f.m);
    rl_floors_free(&f);
}

/* An acquire_many answer: {1}, {1, fence} or {0, i}; the fence is an
 * integer from 1 to below RL_FENCE_LIMIT and becomes the vote's value. */
static void test_many_fences(void) {
    rl_reply one = {.type = REDIS_REPLY_INTEGER, .integer = 1}, five = {.type = REDIS_REPLY_INTEGER, .integer = 5};
    rl_reply zero = {.type = REDIS_REPLY_INTEGER, .integer = 0};
    rl_reply big = {.type = REDIS_REPLY_INTEGER, .integer = (1LL << 53) + 1};
    rl_reply limit = {.type = REDIS_REPLY_INTEGER, .integer = RL_FENCE_LIMIT};
    rl_reply fs = {.type = REDIS_REPLY_STRING, .str = "3 1", .len = 3};
    rl_reply *alone[] = {&one}, *with[] = {&one, &five}, *text[] = {&one, &fs}, *three[] = {&one, &five, &five};
    rl_reply *nought[] = {&one, &zero}, *huge[] = {&one, &big}, *at_limit[] = {&one, &limit};
    rl_reply arr = {.type = REDIS_REPLY_ARRAY, .elements = 1, .element = alone};
    long long value = -1;
    char why[RL_ERR_REASON_MAX];
    expect(rl_vote_classify(RL_K_ACQUIRE_MANY, &arr, NULL, &value, why, sizeof why) == RL_V_YES && value == 0,
           "many_fences", "{1}: value %lld", value);
    arr.elements = 2, arr.element = with;
    expect(rl_vote_classify(RL_K_ACQUIRE_MANY, &arr, NULL, &value, why, sizeof why) == RL_V_YES && value == 5,
           "many_fences", "{1, 5}: value %lld", value);
    rl_reply **bad[] = {text, nought, huge, at_limit};
    const char *what[] = {"{1, \"3 1\"}: fences as text are not this script's answer", "{1, 0}", "{1, 2^53 + 1}",
                          "{1, 2^53 - 1}: the limit itself"};
    for (int i = 0; i < 4; i++) {
        arr.element = bad[i];
        expect(rl_vote_classify(RL_K_ACQUIRE_MANY, &arr, NULL, &value, why, sizeof why) == RL_V_FAIL, "many_fences",
               "%s", what[i]);
    }
    expect(strtoll(RL_FENCE_LIMIT_TEXT, NULL, 10) == RL_FENCE_LIMIT, "many_fences",
           "the scripts' limit %s is the client's", RL_FENCE_LIMIT_TEXT);
    arr.elements = 3, arr.element = three;
    expect(rl_vote_classify(RL_K_ACQUIRE_MANY, &arr, NULL, &value, why, sizeof why) == RL_V_FAIL, "many_fences",
           "{1, 5, 5}");
}

/* The answers per key of a batched extend: only an array of exactly n
 * integers, each 0 or 1, gives answers; anything else fails the node. */
static void test_vote_items(void) {
    rl_reply one = {.type = REDIS_REPLY_INTEGER, .integer = 1}, zero = {.type = REDIS_REPLY_INTEGER, .integer = 0};
    rl_reply two = {.type = REDIS_REPLY_INTEGER, .integer = 2}, str = {.type = REDIS_REPLY_STRING, .str = "1", .len = 1};
    rl_reply *good[] = {&one, &zero, &one}, *bad_value[] = {&one, &two, &one}, *bad_type[] = {&one, &str, &one};
    rl_reply arr = {.type = REDIS_REPLY_ARRAY, .elements = 3, .element = good};
    long long value;
    char why[RL_ERR_REASON_MAX];
    expect(rl_vote_classify(RL_K_EXTEND_MANY, &arr, NULL, &value, why, sizeof why) == RL_V_YES, "vote_items",
           "an array is a yes to look into");
    expect(rl_vote_classify(RL_K_EXTEND_MANY, &one, NULL, &value, why, sizeof why) == RL_V_FAIL, "vote_items",
           "an integer is no answer for many keys");
    signed char items[3] = {-1, -1, -1};
    expect(rl_vote_items(&arr, items, 3, why, sizeof why) == RL_V_YES && items[0] == 1 && items[1] == 0 &&
               items[2] == 1, "vote_items", "answers 1 0 1 read as %d %d %d", items[0], items[1], items[2]);
    memset(items, -1, sizeof items);
    expect(rl_vote_items(&arr, items, 2, why, sizeof why) == RL_V_FAIL && items[0] == -1, "vote_items",
           "3 answers for 2 keys taken");
    arr.element = bad_value;
    expect(rl_vote_items(&arr, items, 3, why, sizeof why) == RL_V_FAIL && items[0] == -1, "vote_items",
           "an answer of 2 taken");
    arr.element = bad_type;
    expect(rl_vote_items(&arr, items, 3, why, sizeof why) == RL_V_FAIL && items[0] == -1, "vote_items",
           "a string answer taken");
    expect(rl_vote_items(&one, items, 1, why, sizeof why) == RL_V_FAIL, "vote_items", "an integer taken as an array");
}

/* ---- rl_acl: the ACL probe's answers ---------------------------------------- */

static int acl_index(const char *name) {
    for (int i = 0; i < rl_acl_count(); i++)
        if (strcmp(rl_acl_command(i, NULL), name) == 0) return i;
    return -1;
}

static void test_acl(void) {
    int n = rl_acl_count(), known;
    rl_reply yes = {.type = REDIS_REPLY_INTEGER, .integer = 1};
    rl_reply no = {.type = REDIS_REPLY_INTEGER, .integer = 0};
    rl_reply two = {.type = REDIS_REPLY_INTEGER, .integer = 2};
    rl_reply *el[64];
    for (int i = 0; i < n; i++) el[i] = &yes;
    rl_reply arr = {.type = REDIS_REPLY_ARRAY, .elements = (size_t)n, .element = el};
    expect(rl_acl_probe_missing(&arr, &known) == 0 && known, "acl", "every command allowed");
    int type = acl_index("type"), incr = acl_index("incr"), hset = acl_index("hset");
    int pub = acl_index("publish"), numsub = acl_index("pubsub numsub");
    expect(type >= 0 && incr >= 0 && hset >= 0 && pub >= 0 && numsub >= 0, "acl", "the list");
    el[type] = el[incr] = &no;
    rl_acl_mask m = rl_acl_probe_missing(&arr, &known);
    rl_acl_mask t = (rl_acl_mask)1 << type, i = (rl_acl_mask)1 << incr;
    expect(known && m == (t | i), "acl", "TYPE and INCR missing");
    expect((m & rl_acl_needed(0, 0)) == t, "acl", "INCR is needed only with fencing");
    expect((m & rl_acl_needed(1, 0)) == m, "acl", "both needed with fencing");
    expect(!(rl_acl_needed(1, 0) >> hset & 1) && (rl_acl_needed(0, 1) >> hset & 1), "acl",
           "HSET only with holder_info");
    expect(!(rl_acl_needed(1, 1) >> pub & 1), "acl", "PUBLISH is never needed");
    char buf[128];
    rl_acl_names(m, 0, 8, buf, sizeof buf);
    expect(strcmp(buf, "TYPE, INCR") == 0, "acl_names", "names '%s'", buf);
    rl_acl_names(m, 1, 8, buf, sizeof buf);
    expect(strcmp(buf, "+type +incr") == 0, "acl_names", "rules '%s'", buf);
    rl_acl_names(m, 1, 1, buf, sizeof buf);
    expect(strcmp(buf, "+type and 1 more") == 0, "acl_names", "cut rules '%s'", buf);
    rl_acl_names((rl_acl_mask)1 << numsub, 1, 8, buf, sizeof buf);
    expect(strcmp(buf, "+pubsub|numsub") == 0, "acl_names", "a subcommand's rule '%s'", buf);
    rl_acl_names((rl_acl_mask)1 << numsub, 0, 8, buf, sizeof buf);
    expect(strcmp(buf, "PUBSUB NUMSUB") == 0, "acl_names", "a subcommand's name '%s'", buf);
    rl_acl_names(m, 0, 8, buf, 6);
    expect(strcmp(buf, "TYPE") == 0, "acl_names", "cut to fit whole names: '%s'", buf);
    /* anything but n answers of 0 or 1 tells nothing */
    el[0] = &two;
    expect(rl_acl_probe_missing(&arr, &known) == 0 && !known, "acl", "an answer of 2");
    el[0] = &yes;
    arr.elements = (size_t)n - 1;
    expect(rl_acl_probe_missing(&arr, &known) == 0 && !known, "acl", "one answer short");
    expect(rl_acl_probe_missing(&no, &known) == 0 && !known, "acl", "0: no acl_check_cmd");
    expect(rl_acl_probe_missing(NULL, &known) == 0 && !known, "acl", "no reply");
    static const struct {
        const char *err;
        int eval_refused;
    } errs[] = {
        {"NOPERM this user has no permissions to run the 'eval' command", 1},
        {"NOPERM User u has no permissions to run the 'eval' command", 1},
        {"ERR unknown command 'EVAL', with args beginning with: 'if' '0' ", 1},
        {"ERR unknown command `eval`, with args beginning with: ", 1},
        {"ERR unknown command 'EVALSHA', with args beginning with: ", 0},
        {"NOPERM this user has no permissions to run the 'evalsha' command", 0},
        {"LOADING Redis is loading the dataset in memory", 0},
        {"BUSY Redis is busy running a script", 0},
    };
    rl_acl_mask eval_bit = (rl_acl_mask)1 << acl_index("eval");
    for (size_t k = 0; k < sizeof errs / sizeof errs[0]; k++) {
        const char *text = errs[k].err;
        rl_reply e = {.type = REDIS_REPLY_ERROR, .str = (char *)text, .len = strlen(text)};
        m = rl_acl_probe_missing(&e, &known);
        int want = errs[k].eval_refused;
        expect(want ? known && m == eval_bit : !known && m == 0, "acl", "error '%s'", text);
    }
    size_t len;
    const char *probe = rl_acl_probe_script(&len);
    expect(len == strlen(probe) && strstr(probe, "'pubsub numsub ',") &&
               strstr(probe, "'set K v',"),
           "acl", "the probe lists the commands with their arguments");
    /* a script's permission error says what to change */
    long long value;
    char why[RL_ERR_REASON_MAX];
    const char *denied =
        "ERR The user executing the script can't run this command or subcommand (INCR x:fence)";
    rl_reply e = {.type = REDIS_REPLY_ERROR, .str = (char *)denied, .len = strlen(denied)};
    rl_vote_classify(RL_K_ACQUIRE_FENCED, &e, NULL, &value, why, sizeof why);
    expect(strstr(why, "(INCR x:fence)") && strstr(why, "ACL SETUSER"), "acl",
           "a permission error: '%s'", why);
    const char *other = "ERR value is not an integer or out of range";
    rl_reply o = {.type = REDIS_REPLY_ERROR, .str = (char *)other, .len = strlen(other)};
    rl_vote_classify(RL_K_ACQUIRE_FENCED, &o, NULL, &value, why, sizeof why);
    expect(!strstr(why, "ACL"), "acl", "another error: '%s'", why);
}

/* ---- rl_text: cleaning and masking ---------------------------------------- */

static void test_text_clean(void) {
    static const struct {
        const char *in;
        size_t inlen, dstlen;
        const char *want;
    } t[] = {
        {"plain", 5, 64, "plain"},
        {"a\nb\tc\x7f", 6, 64, "a b c "},              /* control bytes become spaces */
        {"a\0b", 3, 64, "a b"},                         /* so does NUL */
        {"caf\xc3\xa9", 5, 64, "caf\xc3\xa9"},          /* valid UTF-8 stays */
        {"caf\xc3\xa9", 5, 5, "caf"},                   /* never cut inside a character */
        {"caf\xc3", 4, 64, "caf"},                      /* a character the input cut short is dropped */
        {"\xff\xfe", 2, 64, "??"},                      /* invalid bytes */
        {"\xc0\xaf", 2, 64, "??"},                      /* overlong */
        {"\xed\xa0\x80", 3, 64, "???"},                 /* a surrogate */
        {"\xf4\x90\x80\x80", 4, 64, "????"},            /* beyond U+10FFFF */
        {"\xc2\x85x", 3, 64, "?x"},                     /* a C1 control character */
        {"\xf0\x9f\x94\x92!", 5, 64, "\xf0\x9f\x94\x92!"},
        {"abcdef", 6, 4, "abc"},
        {"abc", 3, 1, ""},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char out[64];
        size_t n = rl_text_clean(out, t[i].dstlen, t[i].in, t[i].inlen);
        expect(strcmp(out, t[i].want) == 0 && n == strlen(t[i].want), "text_clean", "row %zu: '%s' (%zu bytes), want '%s'",
               i, out, n, t[i].want);
    }
    char buf[72];
    expect(strcmp(rl_text_excerpt(buf, sizeof buf, "abcdefgh", 8, 4), "abcd...") == 0, "text_excerpt", "'%s'", buf);
    expect(strcmp(rl_text_excerpt(buf, sizeof buf, "abc", 3, 4), "abc") == 0, "text_excerpt", "'%s'", buf);
}

static void test_text_from_server(void) {
    static const struct {
        const char *in;
        int withhold;
        const char *want;
    } t[] = {
        {"WRONGPASS invalid username-password pair", 0, "WRONGPASS invalid username-password pair"},
        {"ERR args 'AUTH' 'S3cretPassw0rd'", 0, "ERR args 'AUTH' '********'"},
        {"ERR args 'AUTH' 'S3cretP'", 0, "ERR args 'AUTH' '********'"},      /* cut by the server */
        {"ERR tail S3cr", 0, "ERR tail ********"},                            /* cut at the end */
        {"ERR 'S3' and more", 0, "ERR '********' and more"},                  /* a cut start between quotes */
        {"ERR Passw0rd inside", 0, "ERR ******** inside"},                    /* a 6+ byte piece, not the start */
        {"NOAUTH 'S3cretPassw0rd' needed", 1, "NOAUTH (the rest is not shown: it may repeat a token or password)"},
        {"weird S3cretPassw0rd", 1, "(the rest is not shown: it may repeat a token or password)"},
    };
    const char *pw = "S3cretPassw0rd";
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        rl_secrets sec = {.s = {pw}, .len = {strlen(pw)}, .n = 1, .withhold = t[i].withhold};
        char out[RL_ERR_REASON_MAX];
        rl_text_from_server(out, sizeof out, t[i].in, strlen(t[i].in), &sec);
        expect(strcmp(out, t[i].want) == 0, "text_from_server", "row %zu: '%s', want '%s'", i, out, t[i].want);
    }
}

/* rl_evalsha: which errors of an EVALSHA mean it did not run (so sending it
 * again in full is safe), and which script texts go by digest. */
static const struct not_run_case {
    const char *text;
    int not_run;
} not_run_cases[] = {
    {"NOSCRIPT No matching script. Please use EVAL.", RL_EVALSHA_NOSCRIPT},
    {"NOPERM this user has no permissions to run the 'evalsha' command", RL_EVALSHA_REFUSED},
    {"NOPERM this user has no permissions to access one of the keys used as arguments", RL_EVALSHA_RAN},
    {"ERR user_script:1: WRONGTYPE Operation against a key holding the wrong kind of value", RL_EVALSHA_RAN},
    {"ERR unknown command 'EVALSHA', with args beginning with: 'e4ae' '3' ", RL_EVALSHA_REFUSED},
    {"ERR unknown command `evalsha`, with args beginning with: ", RL_EVALSHA_REFUSED},
    {"ERR unknown command 'EVALSHAX', with args beginning with: ", RL_EVALSHA_RAN},
    {"ERR unknown command 'EVALSH", RL_EVALSHA_RAN},
    {"ERR Unknown Redis command called from script script: 206396, on @user_script:1.", RL_EVALSHA_RAN},
    {"NOSCRIP", RL_EVALSHA_RAN},
    {"", RL_EVALSHA_RAN},
};

static void test_evalsha(void) {
    for (size_t i = 0; i < sizeof not_run_cases / sizeof not_run_cases[0]; i++) {
        const struct not_run_case *t = &not_run_cases[i];
        expect(rl_evalsha_not_run(t->text, strlen(t->text)) == t->not_run, "evalsha_not_run", "%s", t->text);
    }
    expect(rl_evalsha_not_run(NULL, 0) == RL_EVALSHA_RAN, "evalsha_not_run", "NULL text");
    for (int i = 0; i < RL_EVALSHA_SCRIPTS; i++) {
        const char *d = rl_evalsha_digest(i);
        expect(d && strlen(d) == 40 && strspn(d, "0123456789abcdef") == 40, "evalsha_digest", "script %d: %s", i,
               or_null(d));
    }
    expect(rl_evalsha_index(RL_SCRIPT_RELEASE, sizeof RL_SCRIPT_RELEASE - 1) >= 0, "evalsha_index", "release");
    char copy[sizeof RL_SCRIPT_RELEASE];
    memcpy(copy, RL_SCRIPT_RELEASE, sizeof copy);
    copy[10] ^= 1; /* same length, one byte other: not the script */
    expect(rl_evalsha_index(copy, sizeof copy - 1) == -1, "evalsha_index", "a script one byte off");
    expect(rl_evalsha_index(RL_SCRIPT_ACQUIRE_MANY, sizeof RL_SCRIPT_ACQUIRE_MANY - 1) == -1, "evalsha_index",
           "a script that always goes in full");
    expect(rl_evalsha_digest(-1) == NULL && rl_evalsha_digest(RL_EVALSHA_SCRIPTS) == NULL, "evalsha_digest",
           "out of range");
}

/* ---- rl_events: the ring of recent events -------------------------------- */

static void test_events_ring(void) {
    rl_events e;
    expect(rl_events_init(&e) == 0, "events", "init");
    rl_event_row *rows;
    int n = rl_events_copy(&e, &rows);
    expect(n == 0, "events", "empty: %d rows", n);
    free(rows);
    /* More than the ring holds: the oldest go, the order stays. */
    char msg[32], res[16];
    for (int i = 1; i <= RL_EVENTS_MAX + 7; i++) {
        snprintf(msg, sizeof msg, "event %d", i);
        snprintf(res, sizeof res, "r%d", i);
        rl_event ev = {.kind = i % 3 + 1, .node_id = i % 2 ? i : 0, .res = i % 5 ? res : NULL,
                       .reslen = strlen(res), .msg = msg};
        rl_events_add(&e, &ev);
    }
    n = rl_events_copy(&e, &rows);
    expect(n == RL_EVENTS_MAX, "events", "kept %d, want %d", n, RL_EVENTS_MAX);
    for (int k = 0; rows && k < n; k++) {
        int i = k + 8;
        snprintf(msg, sizeof msg, "event %d", i);
        snprintf(res, sizeof res, "r%d", i);
        const rl_event_row *r = &rows[k];
        expect(r->seq == (uint64_t)i && r->kind == i % 3 + 1 && r->node_id == (i % 2 ? i : 0) &&
                   strcmp(r->msg, msg) == 0 && r->has_res == (i % 5 != 0) && (!r->has_res || strcmp(r->res, res) == 0),
               "events", "row %d: seq %llu kind %d node %lld res %s msg %s", k, (unsigned long long)r->seq, r->kind,
               (long long)r->node_id, r->has_res ? r->res : "(none)", r->msg);
        expect(r->age_ms >= 0 && r->wall_ms > 0, "events", "row %d: age %lld wall %lld", k, (long long)r->age_ms,
               (long long)r->wall_ms);
    }
    free(rows);
    /* A long message and name are cut at a character boundary; control bytes go. */
    char big[1000];
    memset(big, 'a', sizeof big);
    memcpy(big + RL_EVENT_RES_MAX - 1, "\xc3\xa9", 2); /* an e-acute across the name's limit */
    big[5] = '\n';
    big[sizeof big - 1] = '\0';
    rl_events_add(&e, &(rl_event){.kind = 1, .res = big, .reslen = sizeof big - 1, .msg = big});
    n = rl_events_copy(&e, &rows);
    const rl_event_row *last = rows && n > 0 ? &rows[n - 1] : NULL;
    expect(last && strlen(last->msg) <= RL_EVENT_MSG_MAX + 3 && strchr(last->msg, '\n') == NULL &&
               strcmp(last->msg + strlen(last->msg) - 3, "...") == 0,
           "events", "long message: %s", last ? last->msg : "(none)");
    expect(last && strlen(last->res) == RL_EVENT_RES_MAX - 1 + 3 && strcmp(last->res + RL_EVENT_RES_MAX - 1, "...") == 0,
           "events", "long name cut before the character that does not fit: %zu bytes", last ? strlen(last->res) : 0);
    free(rows);
    rl_events_destroy(&e);
}

int main(void) {
    test_url_parse();
    test_resp_format();
    test_resp_decimal();
    test_resp_read();
    test_resp_reply_bytes_bounded();
    test_resp_quick_matches_hiredis();
    test_vote_classify();
    test_vote_items();
    test_many_fences();
    test_floor_keys();
    test_nameindex();
    test_text_clean();
    test_text_from_server();
    test_evalsha();
    test_events_ring();
    test_acl();
    printf("unit: %d cases, %d failed\n", cases, failures);
    return failures ? 1 : 0;
}
