/* rl_resp: RESP command formatting and reply objects (see rl_resp.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_resp.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rl_buf_reserve(rl_buf *b, size_t more) {
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

size_t rl_resp_decimal(char *buf, unsigned long long v) {
    char tmp[RL_DECIMAL_MAX], *end = tmp + sizeof tmp, *d = end;
    do *--d = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    size_t n = (size_t)(end - d);
    memcpy(buf, d, n);
    buf[n] = '\0';
    return n;
}

/* Writes "<kind><n>\r\n" at p (with room: see rl_buf_append_command) and
 * returns the end. */
static char *put_header(char *p, char kind, size_t n) {
    *p++ = kind;
    if (n < 10) /* most headers: written without the general conversion */
        *p++ = (char)('0' + n);
    else if (n < 100)
        *p++ = (char)('0' + n / 10), *p++ = (char)('0' + n % 10);
    else
        p += rl_resp_decimal(p, n);
    *p++ = '\r';
    *p++ = '\n';
    return p;
}

int rl_buf_append_command(rl_buf *b, int argc, const char *const *argv, const size_t *lens) {
    size_t need = 32;
    for (int i = 0; i < argc; i++) need += lens[i] + 32;
    if (rl_buf_reserve(b, need) != 0) return -1;
    char *p = put_header(b->data + b->len, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        p = put_header(p, '$', lens[i]);
        memcpy(p, argv[i], lens[i]);
        p += lens[i];
        *p++ = '\r';
        *p++ = '\n';
    }
    b->len = (size_t)(p - b->data);
    return 0;
}

int rl_buf_append(rl_buf *b, const char *p, size_t n) {
    if (rl_buf_reserve(b, n) != 0) return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

void rl_buf_consume(rl_buf *b, size_t n) {
    b->off += n;
    if (b->off >= b->len) b->off = b->len = 0;
}

void rl_buf_free(rl_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

/* Hooks a new object into its parent array, as hiredis's own functions do. */
static void *attach(const redisReadTask *task, rl_reply *r) {
    if (task->parent) {
        rl_reply *parent = task->parent->obj;
        parent->element[task->idx] = r;
    }
    return r;
}

/* Per reader (its privdata, handed to every task): what the reply being
 * parsed holds so far. hiredis drops the bytes it has parsed, even within
 * a reply, so the bytes still to parse (RL_REPLY_MAX_BYTES in rl_conn.c)
 * do not bound a reply of many long strings: their copies are counted
 * here. */
typedef struct reader_state {
    size_t elements;
    size_t bytes;
    int too_big; /* RL_REPLY_TOO_MANY or RL_REPLY_TOO_LONG */
} reader_state;

/* Counts add more strings' bytes (strings) or elements into the reply's
 * count against its limit: 0, or -1 with too_big set (the reader then
 * fails and the connection is dropped). A task without a parent starts a
 * new reply. No reader state (a reader of the tests): no limit. */
static int within_limits(const redisReadTask *task, int strings, size_t add) {
    reader_state *st = task->privdata;
    if (!st) return 0;
    if (!task->parent) st->elements = st->bytes = 0;
    size_t *used = strings ? &st->bytes : &st->elements;
    size_t max = strings ? RL_REPLY_MAX_BYTES : RL_REPLY_MAX_ELEMENTS;
    if (add > max - *used) {
        st->too_big = strings ? RL_REPLY_TOO_LONG : RL_REPLY_TOO_MANY;
        return -1;
    }
    *used += add;
    return 0;
}

static void *create_string(const redisReadTask *task, char *str, size_t len) {
    if (within_limits(task, 1, len) != 0) return NULL;
    rl_reply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->str = malloc(len + 1);
    if (!r->str) {
        free(r);
        return NULL;
    }
    memcpy(r->str, str, len);
    r->str[len] = '\0';
    r->len = len;
    r->type = task->type;
    return attach(task, r);
}

static void *create_array(const redisReadTask *task, int elements) {
    if (within_limits(task, 0, elements > 0 ? (size_t)elements : 0) != 0) return NULL;
    rl_reply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (elements > 0) {
        r->element = calloc((size_t)elements, sizeof *r->element);
        if (!r->element) {
            free(r);
            return NULL;
        }
    }
    r->elements = elements > 0 ? (size_t)elements : 0;
    r->type = REDIS_REPLY_ARRAY;
    return attach(task, r);
}

static void *create_integer(const redisReadTask *task, long long value) {
    rl_reply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->type = REDIS_REPLY_INTEGER;
    r->integer = value;
    return attach(task, r);
}

static void *create_nil(const redisReadTask *task) {
    rl_reply *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->type = REDIS_REPLY_NIL;
    return attach(task, r);
}

void rl_reply_free(rl_reply *r) {
    if (!r) return;
    for (size_t i = 0; i < r->elements; i++) rl_reply_free(r->element[i]);
    free(r->element);
    free(r->str);
    free(r);
}

static void free_object(void *r) { rl_reply_free(r); }

static redisReplyObjectFunctions reply_functions = {
    .createString = create_string,
    .createArray = create_array,
    .createInteger = create_integer,
    .createNil = create_nil,
    .freeObject = free_object,
};

redisReader *rl_reader_new(void) {
    redisReader *r = redisReaderCreateWithFunctions(&reply_functions);
    if (!r) return NULL;
    r->privdata = calloc(1, sizeof(reader_state));
    if (!r->privdata) {
        redisReaderFree(r);
        return NULL;
    }
    return r;
}

void rl_reader_free(redisReader *r) {
    if (!r) return;
    free(r->privdata);
    redisReaderFree(r);
}

/* Parses ":<integer>\r\n" at p (n bytes there) into *v, as hiredis would
 * accept it: an optional '-', no leading zero, no "-0", no overflow.
 * Returns the bytes it spans, or 0 when it is not such a line in full
 * (hiredis then reads it, or says what is wrong with it). */
static size_t quick_integer(const char *p, size_t n, long long *v) {
    size_t i = 1, first;
    int neg = i < n && p[i] == '-';
    i += (size_t)neg;
    first = i;
    unsigned long long u = 0;
    for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) {
        if (i - first >= 19) return 0; /* more digits than any long long: hiredis decides */
        u = u * 10 + (unsigned long long)(p[i] - '0');
    }
    if (i == first || (p[first] == '0' && (i - first > 1 || neg)) || i + 1 >= n || p[i] != '\r' || p[i + 1] != '\n')
        return 0;
    if (u > (neg ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX)) return 0;
    *v = neg ? (long long)(0 - u) : (long long)u;
    return i + 2;
}

int rl_resp_next_reply(redisReader *r, rl_buf *pending, rl_reply **reply) {
    *reply = NULL;
    size_t have = pending->len - pending->off;
    /* r holds nothing: no byte left in its buffer, and no task under way
     * but (after a call that found no byte) the root one, untyped yet. */
    int idle = !r->err && r->pos >= r->len && (r->ridx == -1 || (r->ridx == 0 && r->rstack[0].type < 0));
    if (idle && have == 0) return REDIS_OK;
    if (idle && pending->data[pending->off] == ':') {
        long long v;
        size_t used = quick_integer(pending->data + pending->off, have, &v);
        rl_reply *out = used ? calloc(1, sizeof *out) : NULL;
        if (out) { /* without memory, hiredis reads it and fails as it does then */
            out->type = REDIS_REPLY_INTEGER;
            out->integer = v;
            rl_buf_consume(pending, used);
            *reply = out;
            return REDIS_OK;
        }
    }
    if (have > 0) { /* everything else is hiredis's to read, in order */
        if (redisReaderFeed(r, pending->data + pending->off, have) != REDIS_OK) return REDIS_ERR;
        rl_buf_consume(pending, have);
    }
    void *got = NULL;
    int rc = redisReaderGetReply(r, &got);
    *reply = got;
    return rc;
}

int rl_reader_too_big(const redisReader *r) {
    const reader_state *st = r ? r->privdata : NULL;
    return st ? st->too_big : 0;
}
