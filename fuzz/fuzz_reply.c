/* fuzz_reply: arbitrary bytes from a "Redis server" through our reply
 * reader (rl_resp_next_reply: its quick path for integers, else hiredis's
 * parser building rl_reply objects), fed in fuzzed chunk sizes, and
 * through hiredis's parser alone beside it; every reply parsed is
 * classified by rl_vote_classify
 * for every command kind and handed to rl_node_on_setup_reply for every
 * set-up kind (the ACL probe's too), on a minimal client of two nodes.
 *
 * Invariants: no crash, leak or undefined behaviour; the quick path reads
 * the same replies as hiredis alone, and fails where it fails; a vote is yes only in
 * the exact success shape of its command (never for an error, nil, string
 * or array, never for a set-up or unknown kind); a no or fail always says
 * why, in text without control characters; the reason fits its buffer;
 * last_error after a set-up reply is valid UTF-8 without control characters
 * and never shows the node's password, which a server may echo.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <string.h>

#include "fuzz_common.h"
#include "rl_client.h"
#include "rl_clock.h"
#include "rl_node.h"
#include "rl_resp.h"
#include "rl_vote.h"

static rl_client *client;

static void setup_client(void) {
    rl_error err;
    client = rl_client_new();
    FUZZ_CHECK(client, "rl_client_new");
    rl_endpoint a = {.host = "127.0.0.1", .port = 6379, .password = "S3cret-pw"}, b = {.host = "127.0.0.1", .port = 6380};
    FUZZ_CHECK(rl_client_add_node(client, &a, 0, &err) > 0, "add node: %s", err.msg);
    FUZZ_CHECK(rl_client_add_node(client, &b, 0, &err) > 0, "add node: %s", err.msg);
    client->set.restart_guard = 1;
    client->max_ttl_ms = 60000;
}

static void reset_node(rl_node *n) {
    n->auth_failed = 0;
    n->is_replica = 0;
    n->duplicate_of = 0;
    n->run_id[0] = '\0';
    n->info_known = n->role_known = 0;
    n->uptime_ms = -1;
    n->acl_missing = 0;
    n->setup_done = n->setup_blind = 0;
    n->check_reported = 0;
    n->last_error[0] = '\0';
}

/* 1 when s is valid UTF-8 without control characters (C0, DEL, C1). */
static int clean_text(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = *p < 0x80 ? 1 : *p >= 0xC2 && *p <= 0xDF ? 2 : *p >= 0xE0 && *p <= 0xEF ? 3 : *p >= 0xF0 && *p <= 0xF4 ? 4 : 0;
        if (n == 0 || (n == 1 && (*p < 32 || *p == 0x7F)) || (n == 2 && *p == 0xC2 && p[1] < 0xA0)) return 0;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80) return 0;
        p += n;
    }
    return 1;
}

static int is_lock_kind(int kind) {
    return kind == RL_K_ACQUIRE || kind == RL_K_ACQUIRE_FENCED || kind == RL_K_RELEASE || kind == RL_K_EXTEND ||
           kind == RL_K_WRITEBACK || kind == RL_K_CLEANUP || kind == RL_K_CHECK || kind == RL_K_ACQUIRE_SHARED ||
           kind == RL_K_MARK;
}

static void classify(const rl_reply *r, int depth) {
    for (int kind = 0; kind <= RL_K_CHECK + 2; kind++) {
        static const size_t lens[] = {256, 1, 7, 40};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            char why[300];
            long long value = -12345;
            memset(why, 'Z', sizeof why);
            /* A password and a token the reply must never show; every other
             * round as a late reply, whose text is withheld. */
            rl_secrets sec = {.s = {"S3cret-pw", "0123456789abcdef0123456789abcdef"}, .len = {9, 32}, .n = 2,
                              .withhold = li == 3};
            int st = rl_vote_classify(kind, r, &sec, &value, why, lens[li]);
            /* A piece of the token with letters: the digits alone may be any
             * integer's (a reason may show a reply's number). */
            FUZZ_CHECK(!strstr(why, "S3cret") && !strstr(why, "0123456789a"), "a secret in reason '%s'", why);
            FUZZ_CHECK(st == RL_V_YES || st == RL_V_NO || st == RL_V_FAIL, "state %d", st);
            FUZZ_CHECK(memchr(why, '\0', lens[li]) != NULL, "reason not terminated within %zu bytes", lens[li]);
            FUZZ_CHECK(why[lens[li]] == 'Z', "reason written past its buffer of %zu bytes", lens[li]);
            if (st != RL_V_YES && lens[li] > 1) FUZZ_CHECK(why[0], "a no or fail without a reason (kind %d)", kind);
            for (const char *p = why; *p; p++)
                FUZZ_CHECK((unsigned char)*p >= 32, "control character in reason '%s'", why);
            if (st == RL_V_YES) {
                FUZZ_CHECK(is_lock_kind(kind), "yes for kind %d", kind);
                FUZZ_CHECK(r->type == REDIS_REPLY_STATUS || r->type == REDIS_REPLY_INTEGER, "yes for reply type %d",
                           r->type);
                if (kind == RL_K_ACQUIRE)
                    FUZZ_CHECK(r->type == REDIS_REPLY_STATUS && r->len == 2 && memcmp(r->str, "OK", 2) == 0,
                               "acquire yes for something but +OK");
                else
                    FUZZ_CHECK(r->type == REDIS_REPLY_INTEGER && r->integer >= 1, "yes for integer %lld", r->integer);
                if (kind == RL_K_ACQUIRE_FENCED || kind == RL_K_CHECK)
                    FUZZ_CHECK(value == r->integer, "fence or PTTL %lld", value);
                else FUZZ_CHECK(value == 0, "value %lld for kind %d", value, kind);
            }
            if (r->type == REDIS_REPLY_ERROR) FUZZ_CHECK(st == RL_V_FAIL, "an error reply is not a failure");
        }
    }
    static const int setup_kinds[] = {RL_K_AUTH, RL_K_SELECT, RL_K_INFO, RL_K_ROLE, RL_K_ACL};
    for (size_t k = 0; k < sizeof setup_kinds / sizeof setup_kinds[0]; k++) {
        int kind = setup_kinds[k];
        rl_node *a = client->nodes[0], *b = client->nodes[1];
        reset_node(a);
        reset_node(b);
        rl_node_on_setup_reply(client, a, kind, r);
        rl_node_on_setup_reply(client, b, kind, r);
        FUZZ_CHECK(memchr(a->last_error, '\0', sizeof a->last_error), "last_error not terminated");
        FUZZ_CHECK(clean_text(a->last_error) && clean_text(b->last_error), "last_error not clean: '%s'", a->last_error);
        FUZZ_CHECK(!strstr(a->last_error, "S3cret"), "the password in last_error: '%s'", a->last_error);
        FUZZ_CHECK(memchr(a->run_id, '\0', sizeof a->run_id), "run_id not terminated");
        if (kind == RL_K_AUTH) FUZZ_CHECK(a->auth_failed == (r->type == REDIS_REPLY_ERROR), "auth_failed");
        char why[256];
        rl_node_vote_blocked(client, a, 1, rl_now_us(), why, sizeof why);
        rl_node_vote_blocked(client, b, 1, rl_now_us(), why, sizeof why);
    }
    if (r->type == REDIS_REPLY_ARRAY && depth < 3)
        for (size_t i = 0; i < r->elements; i++)
            if (r->element[i]) classify(r->element[i], depth + 1);
}

/* Whether two replies are the same, element by element. */
static int same_reply(const rl_reply *a, const rl_reply *b) {
    if (!a || !b) return a == b;
    if (a->type != b->type || a->integer != b->integer || a->len != b->len || a->elements != b->elements ||
        !a->str != !b->str || (a->str && memcmp(a->str, b->str, a->len) != 0))
        return 0;
    for (size_t i = 0; i < a->elements; i++)
        if (!same_reply(a->element[i], b->element[i])) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!client) setup_client();
    fuzz_in in = {data, size};
    unsigned chunk = fuzz_byte(&in) % 64;
    redisReader *rd = rl_reader_new(), *plain = rl_reader_new();
    FUZZ_CHECK(rd && plain, "rl_reader_new");
    rl_buf pending = {0};
    int replies = 0;
    while (in.n) {
        size_t got;
        const uint8_t *p = fuzz_bytes(&in, chunk ? chunk : in.n, &got);
        if (rl_buf_append(&pending, (const char *)p, got) != 0) break;
        FUZZ_CHECK(redisReaderFeed(plain, (const char *)p, got) == REDIS_OK, "hiredis alone took no bytes");
        rl_reply *r = NULL;
        int rc;
        for (;;) {
            void *other = NULL;
            rc = rl_resp_next_reply(rd, &pending, &r);
            int prc = redisReaderGetReply(plain, &other);
            FUZZ_CHECK(rc == prc && same_reply(r, other), "the quick path read another reply than hiredis");
            rl_reply_free(other);
            if (rc != REDIS_OK || !r) break;
            if (replies++ < 64) classify(r, 0);
            rl_reply_free(r);
            r = NULL;
        }
        if (rc != REDIS_OK) {
            FUZZ_CHECK(rd->err && rd->errstr[0], "reader failed without saying why");
            break;
        }
    }
    rl_reader_free(rd);
    rl_reader_free(plain);
    rl_buf_free(&pending);
    return 0;
}
