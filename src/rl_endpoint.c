/* rl_endpoint: node addresses, credentials, and redis:// URL parsing.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_endpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return -1;
}

static char *dup_range(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into a new string; NULL with *bad set when an
 * escape is malformed or decodes to NUL, NULL with *bad clear on OOM. */
static char *decode_range(const char *s, size_t n, int *bad) {
    char *p = malloc(n + 1), *o = p;
    *bad = 0;
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '%') {
            if (i + 2 >= n) goto bad_escape;
            int a = hexval(s[i + 1]), b = hexval(s[i + 2]);
            if (a < 0 || b < 0 || (a == 0 && b == 0)) goto bad_escape;
            *o++ = (char)(a * 16 + b);
            i += 2;
        } else {
            *o++ = s[i];
        }
    }
    *o = '\0';
    return p;
bad_escape:
    free(p);
    *bad = 1;
    return NULL;
}

/* Parses s[0..n) as a decimal integer in [lo, hi]. */
static int parse_int(const char *s, size_t n, long lo, long hi, int *out) {
    long v = 0;
    if (n == 0 || n > 10) return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

static int host_char_ok(char c, int ipv6) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    if (c == '.' || c == '-' || c == '_') return 1;
    return ipv6 && (c == ':' || c == '%');
}

int rl_endpoint_parse_url(const char *url, size_t len, rl_endpoint *out, char *err, size_t errlen) {
    static const char scheme[] = "redis://";
    const size_t sl = sizeof scheme - 1;
    int bad = 0;
    memset(out, 0, sizeof *out);
    out->port = 6379;
    if (len > RL_URL_MAX) return fail(err, errlen, "node URL is too long (at most 2048 bytes)");
    if (memchr(url, '\0', len)) return fail(err, errlen, "node URL contains a NUL byte");
    if (len >= 9 && strncmp(url, "rediss://", 9) == 0)
        return fail(err, errlen, "node URL: rediss:// (TLS) is not supported by this build; use redis://");
    if (len < sl || strncmp(url, scheme, sl) != 0)
        return fail(err, errlen, "node URL must start with redis:// (as in redis://user:pass@host:6379/0)");
    const char *p = url + sl, *end = url + len;

    /* Query string first: it ends the authority/path part. */
    const char *q = memchr(p, '?', (size_t)(end - p));
    const char *body_end = q ? q : end;

    /* Userinfo: up to the last '@' of the authority (passwords may hold '@' only escaped). */
    const char *slash = memchr(p, '/', (size_t)(body_end - p));
    const char *auth_end = slash ? slash : body_end;
    const char *at = NULL;
    for (const char *s = p; s < auth_end; s++)
        if (*s == '@') at = s;
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        const char *uend = colon ? colon : at;
        if (uend > p) {
            out->username = decode_range(p, (size_t)(uend - p), &bad);
            if (!out->username) goto decode_fail;
        }
        if (colon) {
            out->password = decode_range(colon + 1, (size_t)(at - colon - 1), &bad);
            if (!out->password) goto decode_fail;
        }
        /* The limit is on the decoded text, as for the columns. */
        if ((out->username && strlen(out->username) > RL_CRED_MAX) || (out->password && strlen(out->password) > RL_CRED_MAX)) {
            rl_endpoint_clear(out);
            return fail(err, errlen, "node URL: user name or password is too long (at most 512 bytes)");
        }
        p = at + 1;
    }

    /* Host, with IPv6 in brackets. */
    const char *host_s, *host_e;
    int ipv6 = 0;
    if (p < auth_end && *p == '[') {
        const char *rb = memchr(p, ']', (size_t)(auth_end - p));
        if (!rb) { rl_endpoint_clear(out); return fail(err, errlen, "node URL: IPv6 address has no closing ']'"); }
        host_s = p + 1;
        host_e = rb;
        p = rb + 1;
        ipv6 = 1;
        if (p < auth_end && *p != ':') { rl_endpoint_clear(out); return fail(err, errlen, "node URL: unexpected text after ']'"); }
    } else {
        host_s = p;
        host_e = memchr(p, ':', (size_t)(auth_end - p));
        if (!host_e) host_e = auth_end;
        p = host_e;
    }
    if (host_e == host_s) { rl_endpoint_clear(out); return fail(err, errlen, "node URL has an empty host (as in redis://127.0.0.1:6379)"); }
    if (host_e - host_s > RL_HOST_MAX) { rl_endpoint_clear(out); return fail(err, errlen, "node URL: host name is too long (at most 255 bytes)"); }
    for (const char *s = host_s; s < host_e; s++)
        if (!host_char_ok(*s, ipv6)) { rl_endpoint_clear(out); return fail(err, errlen, "node URL: host has a character that is not allowed in a host name"); }
    out->host = dup_range(host_s, (size_t)(host_e - host_s));
    if (!out->host) goto oom;

    if (p < auth_end && *p == ':') {
        p++;
        if (parse_int(p, (size_t)(auth_end - p), 1, 65535, &out->port) != 0) {
            rl_endpoint_clear(out);
            return fail(err, errlen, "node URL: port must be a number from 1 to 65535");
        }
    }
    if (slash) {
        const char *d = slash + 1;
        if (d < body_end && parse_int(d, (size_t)(body_end - d), 0, RL_DB_MAX, &out->db) != 0) {
            rl_endpoint_clear(out);
            return fail(err, errlen, "node URL: the path must be a database number (as in /0)");
        }
    }
    if (q) {
        static const char key[] = "timeout_ms=";
        const char *v = q + 1;
        if ((size_t)(end - v) < sizeof key - 1 || strncmp(v, key, sizeof key - 1) != 0 ||
            parse_int(v + sizeof key - 1, (size_t)(end - v - (sizeof key - 1)), 1, RL_TIMEOUT_MAX_MS, &out->timeout_ms) != 0) {
            rl_endpoint_clear(out);
            return fail(err, errlen, "node URL: the only option is ?timeout_ms=N with N from 1 to 600000");
        }
    }
    return 0;
decode_fail:
    rl_endpoint_clear(out);
    if (bad) return fail(err, errlen, "node URL: bad percent-escape in user name or password");
oom:
    rl_endpoint_clear(out);
    return fail(err, errlen, "out of memory");
}

int rl_endpoint_check(const rl_endpoint *ep, char *err, size_t errlen) {
    if (!ep->host || !ep->host[0]) return fail(err, errlen, "host must be a non-empty host name or address");
    size_t hl = strlen(ep->host);
    if (hl > RL_HOST_MAX) return fail(err, errlen, "host name is too long (at most 255 bytes)");
    for (size_t i = 0; i < hl; i++)
        if (!host_char_ok(ep->host[i], 1)) return fail(err, errlen, "host has a character that is not allowed in a host name");
    if (ep->port < 1 || ep->port > 65535) return fail(err, errlen, "port must be a number from 1 to 65535");
    if (ep->db < 0 || ep->db > RL_DB_MAX) return fail(err, errlen, "db must be a database number from 0 to 1000000");
    if (ep->timeout_ms < 0 || ep->timeout_ms > RL_TIMEOUT_MAX_MS)
        return fail(err, errlen, "timeout_ms must be from 1 to 600000 (or NULL for the default)");
    if ((ep->username && strlen(ep->username) > RL_CRED_MAX) || (ep->password && strlen(ep->password) > RL_CRED_MAX))
        return fail(err, errlen, "user name or password is too long (at most 512 bytes)");
    return 0;
}

static int dup_opt(char **dst, const char *src) {
    *dst = NULL;
    if (!src) return 0;
    *dst = dup_range(src, strlen(src));
    return *dst ? 0 : -1;
}

int rl_endpoint_copy(rl_endpoint *dst, const rl_endpoint *src) {
    memset(dst, 0, sizeof *dst);
    dst->port = src->port;
    dst->db = src->db;
    dst->timeout_ms = src->timeout_ms;
    if (dup_opt(&dst->host, src->host) || dup_opt(&dst->username, src->username) ||
        dup_opt(&dst->password, src->password)) {
        rl_endpoint_clear(dst);
        return -1;
    }
    return 0;
}

void rl_endpoint_clear(rl_endpoint *ep) {
    free(ep->host);
    free(ep->username);
    if (ep->password) {
        memset(ep->password, 0, strlen(ep->password));
        free(ep->password);
    }
    memset(ep, 0, sizeof *ep);
}

/* Appends s percent-encoded (all but RFC 3986 unreserved characters), so a
 * user name shown in a URL reads back as the same name. */
static size_t put_encoded(char *buf, size_t buflen, size_t used, const char *s) {
    static const char hex[] = "0123456789ABCDEF";
    for (; *s && used + 4 <= buflen; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '.' || ch == '_' || ch == '~') {
            buf[used++] = (char)ch;
        } else {
            buf[used++] = '%';
            buf[used++] = hex[ch >> 4];
            buf[used++] = hex[ch & 15];
        }
    }
    buf[used] = '\0';
    return used;
}

void rl_endpoint_format_url(const rl_endpoint *ep, char *buf, size_t buflen) {
    if (!buflen) return;
    /* IPv6 addresses (and anything with a zone '%') go in brackets. */
    int v6 = ep->host && strpbrk(ep->host, ":%") != NULL;
    size_t used = (size_t)snprintf(buf, buflen, "redis://");
    if (used >= buflen) return;
    if (ep->username) used = put_encoded(buf, buflen, used, ep->username);
    snprintf(buf + used, buflen - used, "%s%s%s%s%s:%d/%d", ep->password ? ":********" : "",
             (ep->username || ep->password) ? "@" : "", v6 ? "[" : "", ep->host ? ep->host : "", v6 ? "]" : "",
             ep->port, ep->db);
}
