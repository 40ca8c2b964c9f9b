/* rl_text: safe text for users (see rl_text.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_text.h"

#include <string.h>

/* Bytes of the valid UTF-8 character at s (n bytes left), 0 when the bytes
 * there are no valid character, -1 when they are the valid start of one
 * that n cuts short. */
static int char_len(const unsigned char *s, size_t n) {
    unsigned char b = s[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) len = 2;
    else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;      /* overlong */
        if (b == 0xED) hi = 0x9F;      /* surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;      /* overlong */
        if (b == 0xF4) hi = 0x8F;      /* beyond U+10FFFF */
    } else return 0;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return -1;
        unsigned char c = s[i];
        if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return 0;
    }
    return len;
}

size_t rl_text_clean(char *dst, size_t dstlen, const char *src, size_t srclen) {
    const unsigned char *s = (const unsigned char *)src;
    size_t i = 0, out = 0;
    if (dstlen == 0) return 0;
    while (i < srclen) {
        int len = char_len(s + i, srclen - i);
        if (len < 0) break; /* a character cut short where the text was cut */
        if ((size_t)(len ? len : 1) > dstlen - 1 - out) break;
        if (len == 1 && (s[i] < 0x20 || s[i] == 0x7F)) {
            dst[out++] = ' ';
        } else if (len == 0 || (len == 2 && s[i] == 0xC2 && s[i + 1] < 0xA0)) {
            dst[out++] = '?'; /* invalid, or a C1 control character (8-bit escapes) */
        } else {
            memmove(dst + out, s + i, (size_t)len);
            out += (size_t)len;
        }
        i += (size_t)(len ? len : 1);
    }
    dst[out] = '\0';
    return out;
}

void rl_text_clean_inplace(char *s, size_t size) {
    if (size) rl_text_clean(s, size, s, strnlen(s, size - 1));
}

const char *rl_text_excerpt(char *buf, size_t buflen, const char *s, size_t len, size_t max) {
    if (buflen < 4) {
        if (buflen) buf[0] = '\0';
        return buf;
    }
    size_t cap = max + 1 < buflen - 3 ? max + 1 : buflen - 3;
    size_t n = rl_text_clean(buf, cap, s, len);
    if (len > cap - 1) memcpy(buf + n, "...", 4);
    return buf;
}

/* A piece of a secret at least this long is masked wherever it appears. */
#define PIECE_MIN 6

static int is_quote(char c) { return c == '\'' || c == '"'; }

/* Length of the secret text to mask at s[i] (n bytes in all), or 0. Masked:
 * a whole secret; any piece of one of PIECE_MIN bytes or more; and a shorter
 * start of one where a server would leave a cut argument: at the end of the
 * text or between quotes (Redis echoes at most 128 bytes of arguments, as
 * 'arg' 'arg' ...). */
static size_t secret_at(const char *s, size_t i, size_t n, const rl_secrets *sec) {
    size_t best = 0;
    for (int k = 0; k < sec->n && k < 2; k++) {
        const char *z = sec->s[k];
        size_t zl = z ? sec->len[k] : 0;
        for (size_t j = 0; j < zl; j++) {
            size_t m = 0;
            while (j + m < zl && i + m < n && s[i + m] == z[j + m]) m++;
            if (m == 0) continue;
            int whole = j == 0 && m == zl;
            int cut = j == 0 && (i + m == n || (i > 0 && is_quote(s[i - 1]) && is_quote(s[i + m])));
            if ((whole || cut || m >= PIECE_MIN) && m > best) best = m;
        }
    }
    return best;
}

/* Error codes Redis and its kin start an error reply with; one of these is
 * all that is kept of a withheld reply. */
static const char *const codes[] = {"ERR", "WRONGTYPE", "NOSCRIPT", "OOM", "READONLY", "BUSY", "NOPERM", "NOAUTH",
                                    "WRONGPASS", "LOADING", "MASTERDOWN", "MISCONF", "EXECABORT", "NOREPLICAS",
                                    "CLUSTERDOWN", "TRYAGAIN", "MOVED", "ASK", "UNKILLABLE", "NOTBUSY"};

static void withhold(char *dst, size_t dstlen, const char *src, size_t len) {
    const char *code = NULL;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        size_t cl = strlen(codes[i]);
        if (len >= cl && memcmp(src, codes[i], cl) == 0 && (len == cl || src[cl] == ' ')) code = codes[i];
    }
    size_t k = 0;
    if (code && dstlen > strlen(code) + 1) {
        k = strlen(code);
        memcpy(dst, code, k);
        dst[k++] = ' ';
    }
    static const char note[] = "(the rest is not shown: it may repeat a token or password)";
    rl_text_clean(dst + k, dstlen - k, note, sizeof note - 1);
}

void rl_text_from_server(char *dst, size_t dstlen, const char *src, size_t len, const rl_secrets *sec) {
    char tmp[1024];
    size_t out = 0;
    if (dstlen == 0) return;
    if (!src) len = 0;
    if (sec && sec->withhold) {
        withhold(dst, dstlen, src, len);
        return;
    }
    /* Masks at most what can be shown; a piece cut off at this end counts
     * as cut by the server and is masked. */
    if (len > 512) len = 512;
    for (size_t i = 0; i < len && out < sizeof tmp - sizeof RL_TEXT_MASK;) {
        size_t m = sec ? secret_at(src, i, len, sec) : 0;
        if (m) {
            memcpy(tmp + out, RL_TEXT_MASK, sizeof RL_TEXT_MASK - 1);
            out += sizeof RL_TEXT_MASK - 1;
            i += m;
        } else {
            tmp[out++] = src[i++];
        }
    }
    rl_text_clean(dst, dstlen, tmp, out);
}
