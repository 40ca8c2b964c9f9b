/* rl_endpoint: node addresses, credentials, TLS options, and redis:// and
 * rediss:// URL parsing.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_endpoint.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static const char *const file_opt_names[4] = {"tls_ca_file", "tls_ca_dir", "tls_cert_file", "tls_key_file"};

static char **file_opt(rl_tls_opts *o, int i) {
    char **slots[4] = {&o->ca_file, &o->ca_dir, &o->cert_file, &o->key_file};
    return slots[i];
}

static int name_is(const char *s, size_t n, const char *name) { return strlen(name) == n && memcmp(s, name, n) == 0; }

/* Parses the query q[0..end): name=value options separated by '&'. */
static int parse_query(const char *q, const char *end, rl_endpoint *out, rl_error *err) {
    for (const char *p = q;;) {
        const char *amp = memchr(p, '&', (size_t)(end - p)), *ie = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(ie - p));
        if (!eq)
            return rl_error_set(err, RL_ERR_INVALID,
                                "node URL: each option must be name=value, joined by & (as in ?timeout_ms=100)");
        const char *v = eq + 1;
        size_t nl = (size_t)(eq - p), vl = (size_t)(ie - v);
        int known = 0, dup = 0;
        if (name_is(p, nl, "timeout_ms")) {
            known = 1, dup = out->timeout_ms != 0;
            if (!dup && parse_int(v, vl, 1, RL_TIMEOUT_MAX_MS, &out->timeout_ms) != 0)
                return rl_error_set(err, RL_ERR_INVALID, "node URL: timeout_ms must be a number from 1 to %d",
                                    RL_TIMEOUT_MAX_MS);
        } else if (name_is(p, nl, "tls_verify")) {
            int on;
            known = 2, dup = out->tls_opts.verify != RL_TLS_VERIFY_INHERIT;
            if (!dup) {
                if (parse_int(v, vl, 0, 1, &on) != 0)
                    return rl_error_set(err, RL_ERR_INVALID, "node URL: tls_verify must be 0 or 1");
                out->tls_opts.verify = on ? RL_TLS_VERIFY_ON : RL_TLS_VERIFY_OFF;
            }
        }
        for (int i = 0; i < 4 && !known; i++) {
            if (!name_is(p, nl, file_opt_names[i])) continue;
            char **slot = file_opt(&out->tls_opts, i);
            int bad = 0;
            known = 2, dup = *slot != NULL;
            if (dup) break;
            if (!(*slot = decode_range(v, vl, &bad)))
                return bad ? rl_error_set(err, RL_ERR_INVALID, "node URL: bad percent-escape in an option")
                           : rl_error_set(err, RL_ERR_NOMEM, "out of memory");
            if (!**slot || strlen(*slot) > RL_PATH_MAX)
                return rl_error_set(err, RL_ERR_INVALID, "node URL: %s must be a file path of 1 to %d bytes",
                                    file_opt_names[i], RL_PATH_MAX);
        }
        if (!known)
            return rl_error_set(err, RL_ERR_INVALID, "node URL: unknown option; the options are timeout_ms, tls_verify, "
                                                     "tls_ca_file, tls_ca_dir, tls_cert_file and tls_key_file");
        if (dup) return rl_error_set(err, RL_ERR_INVALID, "node URL: an option is given twice");
        if (known == 2 && !out->tls)
            return rl_error_set(err, RL_ERR_INVALID, "node URL: %.*s is a TLS option; it needs rediss://", (int)nl, p);
        if (!amp) return 0;
        p = amp + 1;
    }
}

/* Copies the user name and password of userinfo p[0..at), percent-decoded. */
static int parse_userinfo(const char *p, const char *at, rl_endpoint *out, rl_error *err) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    const char *uend = colon ? colon : at;
    int bad = 0;
    if ((uend > p && !(out->username = decode_range(p, (size_t)(uend - p), &bad))) ||
        (colon && !(out->password = decode_range(colon + 1, (size_t)(at - colon - 1), &bad))))
        return bad ? rl_error_set(err, RL_ERR_INVALID, "node URL: bad percent-escape in user name or password")
                   : rl_error_set(err, RL_ERR_NOMEM, "out of memory");
    /* The limit is on the decoded text, as for the columns. */
    if ((out->username && strlen(out->username) > RL_CRED_MAX) || (out->password && strlen(out->password) > RL_CRED_MAX))
        return rl_error_set(err, RL_ERR_INVALID, "node URL: user name or password is too long (at most %d bytes)",
                            RL_CRED_MAX);
    return 0;
}

/* Copies the host of p[0..auth_end) (IPv6 in brackets) and reads the port
 * after it. */
static int parse_host_port(const char *p, const char *auth_end, rl_endpoint *out, rl_error *err) {
    const char *host_s, *host_e;
    int ipv6 = 0;
    if (p < auth_end && *p == '[') {
        const char *rb = memchr(p, ']', (size_t)(auth_end - p));
        if (!rb) return rl_error_set(err, RL_ERR_INVALID, "node URL: IPv6 address has no closing ']'");
        host_s = p + 1;
        host_e = rb;
        p = rb + 1;
        ipv6 = 1;
        if (p < auth_end && *p != ':') return rl_error_set(err, RL_ERR_INVALID, "node URL: unexpected text after ']'");
    } else {
        host_s = p;
        host_e = memchr(p, ':', (size_t)(auth_end - p));
        if (!host_e) host_e = auth_end;
        p = host_e;
    }
    if (host_e == host_s)
        return rl_error_set(err, RL_ERR_INVALID, "node URL has an empty host (as in redis://127.0.0.1:6379)");
    if (host_e - host_s > RL_HOST_MAX)
        return rl_error_set(err, RL_ERR_INVALID, "node URL: host name is too long (at most %d bytes)", RL_HOST_MAX);
    for (const char *s = host_s; s < host_e; s++)
        if (!host_char_ok(*s, ipv6))
            return rl_error_set(err, RL_ERR_INVALID, "node URL: host has a character that is not allowed in a host name");
    if (!(out->host = dup_range(host_s, (size_t)(host_e - host_s)))) return rl_error_set(err, RL_ERR_NOMEM, "out of memory");
    if (p < auth_end && *p == ':' && parse_int(p + 1, (size_t)(auth_end - p - 1), 1, RL_PORT_MAX, &out->port) != 0)
        return rl_error_set(err, RL_ERR_INVALID, "node URL: port must be a number from 1 to %d", RL_PORT_MAX);
    return 0;
}

/* Every part is copied into *out as soon as it is read; a failure anywhere
 * comes back here, where *out is cleared once. */
static int parse_url(const char *url, size_t len, rl_endpoint *out, rl_error *err) {
    if (len > RL_URL_MAX) return rl_error_set(err, RL_ERR_INVALID, "node URL is too long (at most %d bytes)", RL_URL_MAX);
    if (memchr(url, '\0', len)) return rl_error_set(err, RL_ERR_INVALID, "node URL contains a NUL byte");
    size_t sl = 0;
    if (len >= 8 && strncmp(url, "redis://", 8) == 0) sl = 8;
    else if (len >= 9 && strncmp(url, "rediss://", 9) == 0) sl = 9, out->tls = 1;
    else
        return rl_error_set(err, RL_ERR_INVALID, "node URL must start with redis:// or rediss:// for TLS (as in "
                                                 "redis://user:pass@host:6379/0)");
    const char *p = url + sl, *end = url + len;
    /* The query string ends the authority/path part. */
    const char *q = memchr(p, '?', (size_t)(end - p));
    const char *body_end = q ? q : end;
    const char *slash = memchr(p, '/', (size_t)(body_end - p));
    const char *auth_end = slash ? slash : body_end;
    /* Userinfo: up to the last '@' of the authority (passwords may hold '@' only escaped). */
    const char *at = NULL;
    for (const char *s = p; s < auth_end; s++)
        if (*s == '@') at = s;
    if (at && parse_userinfo(p, at, out, err) != 0) return -1;
    if (parse_host_port(at ? at + 1 : p, auth_end, out, err) != 0) return -1;
    if (slash && slash + 1 < body_end && parse_int(slash + 1, (size_t)(body_end - slash - 1), 0, RL_DB_MAX, &out->db) != 0)
        return rl_error_set(err, RL_ERR_INVALID, "node URL: the path must be a database number (as in /0)");
    if (q && parse_query(q + 1, end, out, err) != 0) return -1;
    return 0;
}

int rl_endpoint_parse_url(const char *url, size_t len, rl_endpoint *out, rl_error *err) {
    memset(out, 0, sizeof *out);
    out->port = RL_PORT_DEFAULT;
    if (parse_url(url, len, out, err) == 0) return 0;
    rl_endpoint_clear(out);
    return -1;
}

int rl_endpoint_check(const rl_endpoint *ep, rl_error *err) {
    if (!ep->host || !ep->host[0]) return rl_error_set(err, RL_ERR_INVALID, "host must be a non-empty host name or address");
    size_t hl = strlen(ep->host);
    if (hl > RL_HOST_MAX) return rl_error_set(err, RL_ERR_INVALID, "host name is too long (at most %d bytes)", RL_HOST_MAX);
    for (size_t i = 0; i < hl; i++)
        if (!host_char_ok(ep->host[i], 1))
            return rl_error_set(err, RL_ERR_INVALID, "host has a character that is not allowed in a host name");
    /* The resolver also takes the old short and numeric IPv4 forms (127.1,
     * 2130706433, 0x7f.1) and connects to the address, while TLS would
     * check such a text as a host name against the certificate. */
    struct in_addr v4;
    char full[INET_ADDRSTRLEN];
    if (inet_aton(ep->host, &v4) && inet_pton(AF_INET, ep->host, &v4) != 1 &&
        inet_ntop(AF_INET, &v4, full, sizeof full))
        return rl_error_set(err, RL_ERR_INVALID, "host '%s' is an IPv4 address in a short or numeric form; write it "
                                                 "in full, as %s", ep->host, full);
    if (ep->port < 1 || ep->port > RL_PORT_MAX)
        return rl_error_set(err, RL_ERR_INVALID, "port must be a number from 1 to %d", RL_PORT_MAX);
    if (ep->db < 0 || ep->db > RL_DB_MAX)
        return rl_error_set(err, RL_ERR_INVALID, "db must be a database number from 0 to %d", RL_DB_MAX);
    if (ep->timeout_ms < 0 || ep->timeout_ms > RL_TIMEOUT_MAX_MS)
        return rl_error_set(err, RL_ERR_INVALID, "timeout_ms must be from 1 to %d (or NULL for the default)",
                            RL_TIMEOUT_MAX_MS);
    if ((ep->username && strlen(ep->username) > RL_CRED_MAX) || (ep->password && strlen(ep->password) > RL_CRED_MAX))
        return rl_error_set(err, RL_ERR_INVALID, "user name or password is too long (at most %d bytes)", RL_CRED_MAX);
    rl_tls_opts o = ep->tls_opts;
    int any = o.verify != RL_TLS_VERIFY_INHERIT;
    for (int i = 0; i < 4; i++) {
        const char *f = *file_opt(&o, i);
        if (!f) continue;
        any = 1;
        if (!f[0] || strlen(f) > RL_PATH_MAX)
            return rl_error_set(err, RL_ERR_INVALID, "%s must be a file path of 1 to %d bytes", file_opt_names[i],
                                RL_PATH_MAX);
    }
    if (ep->tls != 0 && ep->tls != 1) return rl_error_set(err, RL_ERR_INVALID, "tls must be 0 (plain TCP) or 1 (TLS)");
    if (any && !ep->tls) return rl_error_set(err, RL_ERR_INVALID, "a node's own TLS options need tls = 1 (rediss://)");
    if (o.verify < RL_TLS_VERIFY_INHERIT || o.verify > RL_TLS_VERIFY_ON)
        return rl_error_set(err, RL_ERR_INVALID, "tls_verify must be 0 or 1");
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
    dst->tls = src->tls;
    dst->tls_opts.verify = src->tls_opts.verify;
    rl_tls_opts *d = &dst->tls_opts, *sr = (rl_tls_opts *)&src->tls_opts;
    if (dup_opt(&dst->host, src->host) || dup_opt(&dst->username, src->username) ||
        dup_opt(&dst->password, src->password) || dup_opt(&d->ca_file, sr->ca_file) ||
        dup_opt(&d->ca_dir, sr->ca_dir) || dup_opt(&d->cert_file, sr->cert_file) || dup_opt(&d->key_file, sr->key_file)) {
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
    for (int i = 0; i < 4; i++) free(*file_opt(&ep->tls_opts, i));
    memset(ep, 0, sizeof *ep);
}

/* Appends s percent-encoded (all but RFC 3986 unreserved characters and
 * the ones in keep), so a name shown in a URL reads back as the same name. */
static size_t put_encoded(char *buf, size_t buflen, size_t used, const char *s, const char *keep) {
    static const char hex[] = "0123456789ABCDEF";
    for (; *s && used + 4 <= buflen; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
            ch == '.' || ch == '_' || ch == '~' || strchr(keep, ch)) {
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
    size_t used = (size_t)snprintf(buf, buflen, "%s", ep->tls ? "rediss://" : "redis://");
    if (used >= buflen) return;
    if (ep->username) used = put_encoded(buf, buflen, used, ep->username, "");
    int k = snprintf(buf + used, buflen - used, "%s%s%s%s%s:%d/%d", ep->password ? ":********" : "",
                     (ep->username || ep->password) ? "@" : "", v6 ? "[" : "", ep->host ? ep->host : "", v6 ? "]" : "",
                     ep->port, ep->db);
    if (k < 0 || (size_t)k >= buflen - used) return;
    used += (size_t)k;
    /* The node's own timeout and TLS options, so the URL sets the node up again. */
    const rl_tls_opts *o = &ep->tls_opts;
    char sep = '?';
    if (ep->timeout_ms > 0 && used + 20 < buflen) {
        used += (size_t)snprintf(buf + used, buflen - used, "%ctimeout_ms=%d", sep, ep->timeout_ms);
        sep = '&';
    }
    if (o->verify != RL_TLS_VERIFY_INHERIT && used + 14 < buflen) {
        used += (size_t)snprintf(buf + used, buflen - used, "%ctls_verify=%d", sep, o->verify == RL_TLS_VERIFY_ON);
        sep = '&';
    }
    for (int i = 0; i < 4; i++) {
        const char *f = *file_opt((rl_tls_opts *)o, i);
        if (!f || used + strlen(file_opt_names[i]) + 3 >= buflen) continue;
        used += (size_t)snprintf(buf + used, buflen - used, "%c%s=", sep, file_opt_names[i]);
        used = put_encoded(buf, buflen, used, f, "/");
        sep = '&';
    }
}
