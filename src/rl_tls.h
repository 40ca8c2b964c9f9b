/* rl_tls: TLS for node connections, on OpenSSL.
 *
 * A context (SSL_CTX) is built from one set of TLS settings (verification,
 * CA file or directory, client certificate and key) and shared by every
 * node that uses the same settings. Each node keeps what outlives one
 * connection in an rl_tls_peer: its context, and the session the server
 * last gave it, so a reconnection resumes instead of making a full
 * handshake. Each connection has its own SSL object over our own socket:
 * bytes leave with MSG_NOSIGNAL (never SIGPIPE in the host) and nothing is
 * written when an SSL object is freed (no close_notify), so a forked child
 * can drop its parent's connections without touching them.
 *
 * Errors say what failed: the verification reason, the setting and file
 * that could not be loaded, a server that does not speak TLS. They never
 * carry key bytes.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_TLS_H
#define RL_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <openssl/ssl.h>

#include "rl_error.h"

/* The effective TLS settings of one node. NULL strings: not set. */
typedef struct rl_tls_config {
    int verify;  /* 1: check the certificate and host name */
    const char *ca_file, *ca_dir, *cert_file, *key_file;
} rl_tls_config;

/* What one node keeps across its connections. */
typedef struct rl_tls_peer {
    SSL_CTX *ctx;          /* one reference owned; NULL until first needed */
    char *key;             /* owned: the settings ctx was built from */
    unsigned gen;          /* the client's settings generation of ctx */
    SSL_SESSION *session;  /* owned: resumes the next connection; or NULL */
    int64_t handshakes;    /* completed handshakes */
    int64_t resumed;       /* of them, resumed sessions */
} rl_tls_peer;

/* Checks that path is usable for setting ("tls_ca_file", "tls_ca_dir",
 * "tls_cert_file", "tls_key_file"): it exists, can be read and holds what
 * the setting needs. Returns 0, or -1 with the reason in err. */
int rl_tls_check_file(const char *setting, const char *path, rl_error *err);

/* A text that is equal for equal configurations (malloc'ed; NULL on OOM). */
char *rl_tls_config_key(const rl_tls_config *cfg);

/* Builds a context from cfg, loading every file now. Returns it, or NULL
 * with the reason in err. */
SSL_CTX *rl_tls_ctx_new(const rl_tls_config *cfg, rl_error *err);

/* Gives peer a new context (one reference and key taken over), dropping
 * the session of the old one (it was verified under other settings). */
void rl_tls_peer_set(rl_tls_peer *peer, SSL_CTX *ctx, char *key, unsigned gen);

/* One more reference to ctx, for a node that shares it. */
SSL_CTX *rl_tls_ctx_ref(SSL_CTX *ctx);

/* Frees what peer owns and zeroes it. */
void rl_tls_peer_clear(rl_tls_peer *peer);

/* A new client-side SSL on fd for peer (whose ctx must be set), checking
 * host (a name or an IP address; a name is sent as SNI) when verifying,
 * resuming peer's session when there is one. NULL with a reason in err. */
SSL *rl_tls_new(rl_tls_peer *peer, int fd, const char *host, rl_error *err);

/* Frees ssl without sending anything (NULL is fine). */
void rl_tls_free(SSL *ssl);

/* Advances the handshake. Returns 1 when done, 0 when it must wait (then
 * *want_write says for which event), -1 on failure with the reason in err. */
int rl_tls_handshake(SSL *ssl, int *want_write, rl_error *err);

/* Reads up to n decrypted bytes. Returns the count (> 0); 0 when it must
 * wait (*want_write set when it waits for the socket to be writable);
 * -1 on failure or end of stream, with the reason in err. */
ssize_t rl_tls_read(SSL *ssl, void *buf, size_t n, int *want_write, rl_error *err);

/* Writes up to n bytes. Returns the count written (> 0); 0 when it must
 * wait (*want_read set when it waits for the socket to be readable); -1 on
 * failure with the reason in err. */
ssize_t rl_tls_write(SSL *ssl, const void *buf, size_t n, int *want_read, rl_error *err);

/* 1 when ssl holds bytes already received but not yet returned by
 * rl_tls_read, so they are read without waiting for the socket. */
int rl_tls_pending(const SSL *ssl);

#endif
