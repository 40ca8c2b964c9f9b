/* rl_endpoint: where a Redis node is and how to log in to it, and the
 * parser for redis:// URLs that describe one.
 *
 * URL form: redis[s]://[[username][:password]@]host[:port][/db][?opt=v&...]
 * rediss:// is TLS. Options: timeout_ms, and for rediss:// tls_verify (0 or
 * 1), tls_ca_file, tls_ca_dir, tls_cert_file, tls_key_file, which override
 * the client's settings of the same names for this node. host may be a
 * name, an IPv4 address or a bracketed IPv6 address; user, password and
 * option values are percent-decoded. Error texts never repeat the URL, because it
 * may hold a password.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_ENDPOINT_H
#define RL_ENDPOINT_H

#include <stddef.h>

#include "rl_error.h"

#define RL_HOST_MAX 255
#define RL_CRED_MAX 512
#define RL_DB_MAX 1000000
#define RL_PORT_MAX 65535
#define RL_PORT_DEFAULT 6379
/* The largest node timeout (URL option, timeout_ms column and setting). */
#define RL_TIMEOUT_MAX_MS 600000
#define RL_PATH_MAX 1024
/* The longest URL taken and shown, with its NUL: room for every part at
 * its largest, percent-encoded (three bytes a byte), so a node made by
 * columns is always shown whole and its URL always reads back. */
#define RL_URL_MAX 16384
_Static_assert(RL_URL_MAX > sizeof "rediss://" + 3 * RL_CRED_MAX + 1 + 3 * RL_CRED_MAX + 1 + RL_HOST_MAX + 2 +
                               sizeof ":65535/1000000?timeout_ms=600000&tls_verify=1" +
                               4 * (sizeof "&tls_cert_file=" + 3 * RL_PATH_MAX),
               "RL_URL_MAX holds the longest URL");

/* A node's own TLS settings; each unset one is the client's. */
enum { RL_TLS_VERIFY_INHERIT, RL_TLS_VERIFY_OFF, RL_TLS_VERIFY_ON };
typedef struct rl_tls_opts {
    int verify;  /* RL_TLS_VERIFY_* */
    char *ca_file, *ca_dir, *cert_file, *key_file;  /* owned; NULL: not set */
} rl_tls_opts;

typedef struct rl_endpoint {
    char *host;      /* owned; never NULL once set */
    int port;        /* 1..65535 */
    int db;          /* 0..RL_DB_MAX */
    char *username;  /* owned; NULL: none (plain AUTH password) */
    char *password;  /* owned; NULL: no AUTH */
    int timeout_ms;  /* 0: the client's default */
    int tls;         /* 1: rediss:// */
    rl_tls_opts tls_opts;  /* only with tls */
} rl_endpoint;

/* Parses url (len bytes, need not be NUL-terminated) into *out, which must
 * be zeroed or cleared. Returns 0; or -1 with err set and *out left
 * cleared. The caller owns the strings in *out (rl_endpoint_clear). */
int rl_endpoint_parse_url(const char *url, size_t len, rl_endpoint *out, rl_error *err);

/* Checks host/port/db/credential/timeout ranges of an endpoint built field by
 * field. Returns 0, or -1 with a message in err. */
int rl_endpoint_check(const rl_endpoint *ep, rl_error *err);

/* Deep copy of src into *dst (zeroed or cleared). Returns 0, -1 on OOM. */
int rl_endpoint_copy(rl_endpoint *dst, const rl_endpoint *src);

/* Frees the strings of ep and zeroes it. */
void rl_endpoint_clear(rl_endpoint *ep);

/* Writes "redis://user:********@host:port/db" into buf (with the node's
 * own timeout_ms, and for rediss:// its own TLS options, as a query):
 * password masked, user name and
 * options percent-encoded, IPv6 host in brackets; it parses back to the
 * same host, port, db, user name and TLS options. */
void rl_endpoint_format_url(const rl_endpoint *ep, char *buf, size_t buflen);

#endif
