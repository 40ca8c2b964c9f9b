/* rl_resp: the Redis protocol pieces the engine needs. Commands are written
 * into a byte buffer by our own formatter (binary-safe, with lengths), and
 * replies are parsed by hiredis's redisReader building our own reply
 * objects, so no allocation failure inside hiredis can abort the host.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_RESP_H
#define RL_RESP_H

#include <stddef.h>
#include <hiredis/read.h>

/* A growable byte buffer; bytes [off, len) are still to be sent. */
typedef struct rl_buf {
    char *data;
    size_t len, cap, off;
} rl_buf;

/* Appends one command (argc arguments, each argv[i] of lens[i] bytes) in
 * RESP form. Returns 0, -1 on OOM (the buffer is then unchanged). */
int rl_buf_append_command(rl_buf *b, int argc, const char *const *argv, const size_t *lens);

/* v in decimal into buf (room for RL_DECIMAL_MAX bytes), NUL-terminated;
 * returns the number of digits. By hand, not snprintf: it runs for every
 * argument of every command and for the numbers of every acquire. */
#define RL_DECIMAL_MAX 21
size_t rl_resp_decimal(char *buf, unsigned long long v);

/* Room for more bytes after b->len. Returns 0, -1 on OOM. */
int rl_buf_reserve(rl_buf *b, size_t more);

/* Appends n bytes. Returns 0, -1 on OOM (the buffer is then unchanged). */
int rl_buf_append(rl_buf *b, const char *p, size_t n);

/* Marks n bytes as sent; compacts when everything was sent. */
void rl_buf_consume(rl_buf *b, size_t n);

/* Frees the buffer's memory and zeroes it. */
void rl_buf_free(rl_buf *b);

/* A parsed reply. type is one of hiredis's REDIS_REPLY_* constants. */
typedef struct rl_reply {
    int type;
    long long integer;         /* REDIS_REPLY_INTEGER */
    char *str;                 /* STRING, STATUS, ERROR: NUL-terminated, len bytes */
    size_t len;
    size_t elements;           /* ARRAY */
    struct rl_reply **element;
} rl_reply;

/* What one reply may take. No reply to our commands comes near either
 * limit; they keep a broken or hostile server from making us allocate
 * gigabytes ("*2000000000\r\n" is 13 bytes). */
#define RL_REPLY_MAX_ELEMENTS 65536          /* array elements in one reply, nested included */
#define RL_REPLY_MAX_BYTES (16 * 1024 * 1024) /* bytes received but not yet parsed, and the
                                                 strings of one reply together */

/* A reader whose replies are rl_reply objects, limited to
 * RL_REPLY_MAX_ELEMENTS and RL_REPLY_MAX_BYTES; free with rl_reader_free. Returns NULL on OOM. */
redisReader *rl_reader_new(void);

/* Frees a reader from rl_reader_new (NULL is fine). */
void rl_reader_free(redisReader *r);

/* The next whole reply of the bytes received (pending, then handed to r
 * as needed), as redisReaderGetReply gives it: REDIS_OK with *reply NULL
 * when none is complete yet, REDIS_ERR when the reader failed; the caller
 * owns the reply. An integer reply that starts the pending bytes while r
 * holds nothing is read here, without copying it into hiredis's buffer or
 * its task stack: most replies are one. */
int rl_resp_next_reply(redisReader *r, rl_buf *pending, rl_reply **reply);

/* Why the reader failed on a reply too big: RL_REPLY_TOO_MANY elements,
 * RL_REPLY_TOO_LONG strings together; 0 when it did not. */
enum { RL_REPLY_TOO_MANY = 1, RL_REPLY_TOO_LONG };
int rl_reader_too_big(const redisReader *r);

/* Frees a reply and its elements (NULL is fine). */
void rl_reply_free(rl_reply *r);

#endif
