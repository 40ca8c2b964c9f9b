/* rl_endpoint: where a Redis node is and how to log in to it, and the
 * parser for redis:// URLs that describe one.
 *
 * URL form: redis://[[username][:password]@]host[:port][/db][?timeout_ms=N]
 * host may be a name, an IPv4 address or a bracketed IPv6 address; user and
 * password are percent-decoded. Error texts never repeat the URL, because it
 * may hold a password.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_ENDPOINT_H
#define RL_ENDPOINT_H

#include <stddef.h>

#define RL_URL_MAX 2048
#define RL_HOST_MAX 255
#define RL_CRED_MAX 512
#define RL_DB_MAX 1000000
#define RL_TIMEOUT_MAX_MS 600000

typedef struct rl_endpoint {
    char *host;      /* owned; never NULL once set */
    int port;        /* 1..65535 */
    int db;          /* 0..RL_DB_MAX */
    char *username;  /* owned; NULL: none (plain AUTH password) */
    char *password;  /* owned; NULL: no AUTH */
    int timeout_ms;  /* 0: the client's default */
} rl_endpoint;

/* Parses url (len bytes, need not be NUL-terminated) into *out, which must
 * be zeroed or cleared. Returns 0; or -1 with a message in err and *out
 * left cleared. The caller owns the strings in *out (rl_endpoint_clear). */
int rl_endpoint_parse_url(const char *url, size_t len, rl_endpoint *out, char *err, size_t errlen);

/* Checks host/port/db/credential/timeout ranges of an endpoint built field by
 * field. Returns 0, or -1 with a message in err. */
int rl_endpoint_check(const rl_endpoint *ep, char *err, size_t errlen);

/* Deep copy of src into *dst (zeroed or cleared). Returns 0, -1 on OOM. */
int rl_endpoint_copy(rl_endpoint *dst, const rl_endpoint *src);

/* Frees the strings of ep and zeroes it. */
void rl_endpoint_clear(rl_endpoint *ep);

/* Writes "redis://user:********@host:port/db" into buf: password masked,
 * user name percent-encoded, IPv6 host in brackets; it parses back to the
 * same host, port, db and user name. */
void rl_endpoint_format_url(const rl_endpoint *ep, char *buf, size_t buflen);

#endif
