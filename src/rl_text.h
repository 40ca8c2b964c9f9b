/* rl_text: the one place where text bound for a user (error messages,
 * redlock_nodes.last_error) is made safe to show. It cuts at a UTF-8
 * character boundary, replaces control characters and invalid sequences,
 * and masks the secrets a server may echo back from the commands we sent
 * (the node's password, a lock's token).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_TEXT_H
#define RL_TEXT_H

#include <stddef.h>

/* What a command carried that must never be shown (at most 2: the node's
 * password, a token). A secret of length 0 is ignored. withhold: the
 * command carried secrets that are no longer known (a late reply), so the
 * server's text is not shown at all. */
typedef struct rl_secrets {
    const char *s[2];
    size_t len[2];
    int n;
    int withhold;
} rl_secrets;

#define RL_TEXT_MASK "********"

/* Copies at most srclen bytes of src into dst (dstlen > 0; always
 * NUL-terminated): control bytes (NUL, C0, DEL) become spaces, invalid UTF-8
 * and C1 control characters become '?', and the copy ends before the first
 * character that does not fit whole. dst may be src (it never grows).
 * Returns the bytes written. */
size_t rl_text_clean(char *dst, size_t dstlen, const char *src, size_t srclen);

/* rl_text_clean of s (NUL-terminated) in place. */
void rl_text_clean_inplace(char *s, size_t size);

/* A name for a message: cleaned, at most max bytes of s (len bytes), with
 * "..." appended when cut. buf must hold max + 4 bytes. Returns buf. */
const char *rl_text_excerpt(char *buf, size_t buflen, const char *s, size_t len, size_t max);

/* Server text (len bytes) for a message, into dst: every secret of sec,
 * whole or as a piece a server may have cut (see rl_text.c), replaced by
 * RL_TEXT_MASK, then cleaned. With sec->withhold, only a known error code
 * at its start is kept. sec may be NULL. */
void rl_text_from_server(char *dst, size_t dstlen, const char *src, size_t len, const rl_secrets *sec);

#endif
