/* rl_tls: contexts, per-connection SSL objects, session resumption and
 * error texts for TLS node connections (see rl_tls.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* ---- a socket BIO of our own ------------------------------------------
 * OpenSSL's socket BIO writes with send(..., 0), which raises SIGPIPE in
 * the host when the server has reset the connection. Ours sends with
 * MSG_NOSIGNAL, and remembers the first byte received so a failed
 * handshake can tell a plain Redis port (it answers "-ERR ...") apart. */

typedef struct sock_bio {
    int fd;
    rl_tls_peer *peer;  /* the node this connection belongs to */
    int got_any;
    unsigned char first;
} sock_bio;

static int sb_write(BIO *b, const char *buf, int len) {
    sock_bio *s = BIO_get_data(b);
    ssize_t n;
    BIO_clear_retry_flags(b);
    do n = send(s->fd, buf, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_write(b);
    return (int)n;
}

static int sb_read(BIO *b, char *buf, int len) {
    sock_bio *s = BIO_get_data(b);
    ssize_t n;
    BIO_clear_retry_flags(b);
    do n = recv(s->fd, buf, (size_t)len, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(b);
    if (n > 0 && !s->got_any) {
        s->got_any = 1;
        s->first = (unsigned char)buf[0];
    }
    return (int)n;
}

static long sb_ctrl(BIO *b, int cmd, long num, void *ptr) {
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int sb_destroy(BIO *b) {
    free(BIO_get_data(b));
    BIO_set_data(b, NULL);
    return 1;
}

static BIO_METHOD *sb_method;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init_globals(void) {
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "redlock socket");
    if (m && BIO_meth_set_write(m, sb_write) && BIO_meth_set_read(m, sb_read) && BIO_meth_set_ctrl(m, sb_ctrl) &&
        BIO_meth_set_destroy(m, sb_destroy))
        sb_method = m;
    else BIO_meth_free(m);
}

/* SQLite unloads the extension when the connection that loaded it closes
 * (every SSL object is gone by then); the next load makes a new method. */
__attribute__((destructor)) static void free_globals(void) {
    BIO_meth_free(sb_method);
    sb_method = NULL;
}

/* The node of a connection, from its BIO. */
static rl_tls_peer *peer_of(const SSL *ssl) {
    BIO *bio = SSL_get_rbio(ssl);
    const sock_bio *sb = bio ? BIO_get_data(bio) : NULL;
    return sb ? sb->peer : NULL;
}

static int ready(rl_error *err) {
    pthread_once(&init_once, init_globals);
    if (sb_method) return 0;
    rl_error_set(err, RL_ERR_NOMEM, "TLS: out of memory");
    return -1;
}

/* ---- files and contexts ------------------------------------------------ */

/* Never prompts on the terminal for a passphrase: an encrypted key fails. */
static int no_passphrase(char *buf, int size, int rwflag, void *u) {
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

/* The reason of the last OpenSSL error, without its numbers. */
static const char *ssl_reason(void) {
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    return r ? r : "unknown error";
}

static int file_error(const char *setting, const char *path, const char *why, rl_error *err) {
    rl_error_set(err, RL_ERR_TLS, "%s '%.200s': %s", setting, path, why);
    ERR_clear_error();
    return -1;
}

/* The largest certificate or key file read: CA bundles are well under a
 * MiB, and a larger file is not worth parsing inside a SQL call. */
#define RL_TLS_FILE_MAX (8 << 20)

/* Whether the regular file open as fd starts as every SQLite database
 * does. SQL creates files with ATTACH and VACUUM INTO wherever this
 * process may write, and OpenSSL's PEM reader finds a certificate in one
 * whose schema text holds it: no file SQL could have made is read as
 * certificates or a key. */
static int is_sqlite_database(int fd) {
    static const char magic[16] = "SQLite format 3";
    char head[16];
    return pread(fd, head, sizeof head, 0) == (ssize_t)sizeof head && memcmp(head, magic, sizeof head) == 0;
}

/* Opens path, which setting names, without blocking, and keeps it only
 * when it is a regular file of at most RL_TLS_FILE_MAX bytes (a directory
 * for tls_ca_dir): a FIFO without a writer blocks open(2), a terminal or
 * stdin blocks read(2), and no timeout or interrupt reaches into
 * OpenSSL's reads. Returns the open descriptor (the caller closes it), or
 * -1 with err set. */
static int open_checked(const char *setting, const char *path, int is_dir, rl_error *err) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return file_error(setting, path, strerror(errno), err);
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (is_dir && !S_ISDIR(st.st_mode)) why = "is not a directory";
    else if (!is_dir && !S_ISREG(st.st_mode)) why = "is not a regular file";
    else if (!is_dir && st.st_size > RL_TLS_FILE_MAX) why = "is larger than 8 MiB, far more than certificates or a key";
    else if (!is_dir && is_sqlite_database(fd))
        why = "is a SQLite database, not PEM (SQL makes such files with ATTACH, and its text could hold a CA)";
    if (!why) return fd;
    int rc = file_error(setting, path, why, err);
    close(fd);
    return rc;
}

/* The name OpenSSL is to read path, open_checked as fd, by: the file
 * checked, through its descriptor (by_fd holds the name), so that it
 * cannot have been swapped for another meanwhile; without /proc, path. */
static const char *checked_file(int fd, const char *path, char by_fd[32]) {
    snprintf(by_fd, 32, "/proc/self/fd/%d", fd);
    return access(by_fd, R_OK) == 0 ? by_fd : path;
}

/* The system's CAs, from its bundle file only (SSL_CERT_FILE, ignored in
 * a setuid program as OpenSSL does, else /usr/lib/ssl/cert.pem:
 * ca-certificates' bundle on Debian), checked as the other files are. Its
 * hashed directory is left out: OpenSSL would look a CA up there at each
 * handshake, so a file SQL creates in it (ATTACH makes one, wherever this
 * process may write) would be trusted from then on. Without a bundle (or
 * with one SQL could have made) the store is empty, and every certificate
 * is refused as of an unknown CA, which says to set tls_ca_file. */
static void load_system_store(SSL_CTX *ctx) {
    const char *file = secure_getenv(X509_get_default_cert_file_env());
    if (!file || !file[0]) file = X509_get_default_cert_file();
    rl_error ignored;
    int fd = open_checked("the system's CA bundle", file, 0, &ignored);
    if (fd < 0) return;
    char by_fd[32];
    if (SSL_CTX_load_verify_locations(ctx, checked_file(fd, file, by_fd), NULL) != 1) ERR_clear_error();
    close(fd);
}

/* Loads path as setting into ctx. */
static int load_into(SSL_CTX *ctx, const char *setting, const char *path, rl_error *err) {
    int is_dir = strcmp(setting, "tls_ca_dir") == 0;
    int fd = open_checked(setting, path, is_dir, err);
    if (fd < 0) return -1;
    const char *shown = path;
    /* A CA directory's files are read later, by name, as OpenSSL needs them. */
    char by_fd[32];
    if (!is_dir) path = checked_file(fd, path, by_fd);
    ERR_clear_error();
    int ok;
    if (is_dir) ok = SSL_CTX_load_verify_locations(ctx, NULL, path);
    else if (strcmp(setting, "tls_ca_file") == 0) ok = SSL_CTX_load_verify_locations(ctx, path, NULL);
    else if (strcmp(setting, "tls_cert_file") == 0) ok = SSL_CTX_use_certificate_chain_file(ctx, path);
    else ok = SSL_CTX_use_PrivateKey_file(ctx, path, SSL_FILETYPE_PEM);
    close(fd);
    if (ok != 1 && ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH)
        return file_error(setting, shown, "is not the key of the certificate in tls_cert_file", err);
    if (ok != 1) {
        char why[RL_ERR_REASON_MAX];
        snprintf(why, sizeof why, "cannot be loaded (%s)%s", ssl_reason(),
                 strcmp(setting, "tls_key_file") == 0 ? "; it must be a PEM private key without a passphrase"
                                                      : "; it must hold PEM certificates");
        return file_error(setting, shown, why, err);
    }
    return 0;
}

static SSL_CTX *bare_ctx(rl_error *err) {
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        rl_error_set(err, RL_ERR_TLS, "TLS: cannot create a context: %s", ssl_reason());
        ERR_clear_error();
        return NULL;
    }
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    return ctx;
}

int rl_tls_check_file(const char *setting, const char *path, rl_error *err) {
    SSL_CTX *ctx = bare_ctx(err);
    if (!ctx) return -1;
    int rc = load_into(ctx, setting, path, err);
    SSL_CTX_free(ctx);
    return rc;
}

char *rl_tls_config_key(const rl_tls_config *cfg) {
    const char *f[4] = {cfg->ca_file, cfg->ca_dir, cfg->cert_file, cfg->key_file};
    size_t len = 2;
    for (int i = 0; i < 4; i++) len += (f[i] ? strlen(f[i]) : 0) + 24;
    char *k = malloc(len), *p = k;
    if (!k) return NULL;
    *p++ = cfg->verify ? 'V' : 'N';
    /* Each part says whether it is set and how long it is, so no two
     * configurations give one text; and the text holds no NUL (paths hold
     * none), so comparing it as a string compares all of it. */
    for (int i = 0; i < 4; i++) {
        if (!f[i]) {
            *p++ = '-';
            continue;
        }
        size_t n = strlen(f[i]);
        p += snprintf(p, 24, "+%zu:", n);
        memcpy(p, f[i], n);
        p += n;
    }
    *p = '\0';
    return k;
}

/* The server gave a new session (TLS 1.3: after the handshake, in a
 * ticket). It is kept for the node's next connection, unless the node's
 * settings changed meanwhile. */
static int on_new_session(SSL *ssl, SSL_SESSION *sess) {
    rl_tls_peer *peer = peer_of(ssl);
    if (!peer || SSL_get_SSL_CTX(ssl) != peer->ctx || !SSL_SESSION_is_resumable(sess)) return 0;
    SSL_SESSION_free(peer->session);
    peer->session = sess;
    return 1; /* the reference is ours now */
}

SSL_CTX *rl_tls_ctx_new(const rl_tls_config *cfg, rl_error *err) {
    if (ready(err) != 0) return NULL;
    if (!cfg->cert_file != !cfg->key_file) {
        rl_error_set(err, RL_ERR_TLS, "TLS: %s is set but %s is not; a client certificate needs both",
                 cfg->cert_file ? "tls_cert_file" : "tls_key_file", cfg->cert_file ? "tls_key_file" : "tls_cert_file");
        return NULL;
    }
    SSL_CTX *ctx = bare_ctx(err);
    if (!ctx) return NULL;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* TLS 1.3: AES-128-GCM first (OpenSSL's default puts AES-256 first): a
     * lock cycle is many tiny records, and it took a tenth off the cycle time
     * measured on 3 nodes. The server picks from this list. */
    SSL_CTX_set_ciphersuites(ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Whole records in as few reads as possible; rl_tls_pending tells what is left. */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, on_new_session);
    SSL_CTX_set_verify(ctx, cfg->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    int rc = 0;
    if (cfg->ca_file) rc |= load_into(ctx, "tls_ca_file", cfg->ca_file, err);
    if (!rc && cfg->ca_dir) rc |= load_into(ctx, "tls_ca_dir", cfg->ca_dir, err);
    if (!rc && !cfg->ca_file && !cfg->ca_dir && cfg->verify) load_system_store(ctx);
    if (!rc && cfg->cert_file) rc |= load_into(ctx, "tls_cert_file", cfg->cert_file, err);
    if (!rc && cfg->key_file) rc |= load_into(ctx, "tls_key_file", cfg->key_file, err);
    if (!rc && cfg->cert_file && SSL_CTX_check_private_key(ctx) != 1) {
        rl_error_set(err, RL_ERR_TLS, "tls_key_file '%.200s' is not the key of the certificate in tls_cert_file", cfg->key_file);
        rc = -1;
    }
    ERR_clear_error();
    if (rc) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

SSL_CTX *rl_tls_ctx_ref(SSL_CTX *ctx) {
    SSL_CTX_up_ref(ctx);
    return ctx;
}

void rl_tls_peer_set(rl_tls_peer *peer, SSL_CTX *ctx, char *key, unsigned gen) {
    SSL_CTX_free(peer->ctx);
    SSL_SESSION_free(peer->session);
    free(peer->key);
    peer->ctx = ctx;
    peer->key = key;
    peer->gen = gen;
    peer->session = NULL;
}

void rl_tls_peer_clear(rl_tls_peer *peer) {
    rl_tls_peer_set(peer, NULL, NULL, 0);
    memset(peer, 0, sizeof *peer);
}

/* ---- connections -------------------------------------------------------- */

SSL *rl_tls_new(rl_tls_peer *peer, int fd, const char *host, rl_error *err) {
    if (ready(err) != 0) return NULL;
    SSL *ssl = SSL_new(peer->ctx);
    BIO *bio = BIO_new(sb_method);
    sock_bio *sb = calloc(1, sizeof *sb);
    if (!ssl || !bio || !sb) goto oom;
    sb->fd = fd;
    sb->peer = peer;
    BIO_set_data(bio, sb);
    BIO_set_init(bio, 1);
    sb = NULL;
    SSL_set_bio(ssl, bio, bio);
    bio = NULL;
    /* An IP address is checked against the certificate's IP entries; a
     * name against its DNS names, and sent as SNI (never an address). */
    char ip[64];
    snprintf(ip, sizeof ip, "%s", host);
    ip[strcspn(ip, "%")] = '\0'; /* an IPv6 zone is local, not in any certificate */
    unsigned char bin[16];
    int is_ip = inet_pton(AF_INET, ip, bin) == 1 || inet_pton(AF_INET6, ip, bin) == 1;
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    int ok = is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, ip) : (X509_VERIFY_PARAM_set1_host(vp, host, 0) &&
                                                               SSL_set_tlsext_host_name(ssl, host));
    if (!ok) goto oom;
    if (peer->session) SSL_set_session(ssl, peer->session);
    SSL_set_connect_state(ssl);
    ERR_clear_error();
    return ssl;
oom:
    rl_error_set(err, RL_ERR_TLS, "TLS: cannot set up the connection: %s", ssl_reason());
    ERR_clear_error();
    free(sb);
    BIO_free(bio);
    SSL_free(ssl);
    return NULL;
}

void rl_tls_free(SSL *ssl) {
    /* SSL_free only frees: no close_notify goes out (see rl_tls.h). Left
     * as it is, it would take the connection for an aborted one and make
     * its session unusable; marking the shutdown as done (a flag, no I/O)
     * keeps the session for the next connection. A connection that failed
     * with a TLS error dropped its node's session already (describe). */
    if (ssl) SSL_set_shutdown(ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    SSL_free(ssl);
}

static const char *verify_hint(long v) {
    switch (v) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
        return " (unknown CA: set tls_ca_file to the CA that signed the server's certificate)";
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
        return " (the certificate is not for this host: connect by a name or address it lists)";
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
        return " (renew the server's certificate, or check this host's clock)";
    default:
        return "";
    }
}

/* Describes why an SSL call with result rc failed, into err. */
static void describe(SSL *ssl, int rc, const char *what, rl_error *err) {
    int e = SSL_get_error(ssl, rc);
    rl_tls_peer *peer = peer_of(ssl);
    if (e == SSL_ERROR_SSL && peer && peer->session) { /* never resume what a TLS error ended */
        SSL_SESSION_free(peer->session);
        peer->session = NULL;
    }
    unsigned long le = ERR_peek_last_error();
    int reason = le ? ERR_GET_REASON(le) : 0;
    long v = SSL_get_verify_result(ssl);
    BIO *bio = SSL_get_rbio(ssl);
    const sock_bio *sb = bio ? BIO_get_data(bio) : NULL;
    if (v != X509_V_OK && SSL_get_verify_mode(ssl) != SSL_VERIFY_NONE) {
        rl_error_set(err, RL_ERR_TLS, "TLS certificate verification failed: %s%s", X509_verify_cert_error_string(v),
                 verify_hint(v));
    } else if (!SSL_is_init_finished(ssl) && sb && sb->got_any && sb->first != 0x15 && sb->first != 0x16) {
        /* Not a TLS record: "-ERR ..." and the like from a plain port. */
        rl_error_set(err, RL_ERR_TLS, "TLS handshake failed: the server answered in plain text; this port does not serve "
                              "TLS (use redis:// for it)");
    } else if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno == 0) ||
               (e == SSL_ERROR_SSL && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
        rl_error_set(err, RL_ERR_TLS, "connection closed by the server%s", SSL_is_init_finished(ssl) ? "" : " during the TLS handshake");
    } else if (e == SSL_ERROR_SYSCALL) {
        rl_error_set(err, RL_ERR_TLS, "%s: %s", what, strerror(errno));
    } else {
        const char *hint = reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED || reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE
                               ? " (does the server want a client certificate? set tls_cert_file and tls_key_file)"
                               : "";
        rl_error_set(err, RL_ERR_TLS, "TLS error%s: %s%s", SSL_is_init_finished(ssl) ? "" : " in the handshake", ssl_reason(), hint);
    }
    ERR_clear_error();
}

int rl_tls_handshake(SSL *ssl, int *want_write, rl_error *err) {
    ERR_clear_error();
    errno = 0;
    int rc = SSL_do_handshake(ssl);
    if (rc == 1) {
        rl_tls_peer *peer = peer_of(ssl);
        if (peer) {
            peer->handshakes++;
            if (SSL_session_reused(ssl)) peer->resumed++;
        }
        return 1;
    }
    int e = SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want_write = e == SSL_ERROR_WANT_WRITE;
        return 0;
    }
    describe(ssl, rc, "TLS handshake", err);
    return -1;
}

/* One SSL_read_ex or SSL_write_ex; *want_other is set when it waits for
 * the other direction (a read for POLLOUT, a write for POLLIN). */
static ssize_t transfer(SSL *ssl, int writing, void *buf, size_t n, int *want_other, rl_error *err) {
    size_t done = 0;
    /* SSL_get_error needs an empty error queue; clearing one that is already
     * empty costs OpenSSL 3 about as much as encrypting a small record. */
    if (ERR_peek_error()) ERR_clear_error();
    errno = 0;
    int rc = writing ? SSL_write_ex(ssl, buf, n, &done) : SSL_read_ex(ssl, buf, n, &done);
    *want_other = 0;
    if (rc == 1) return (ssize_t)done;
    int e = SSL_get_error(ssl, rc);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want_other = e == (writing ? SSL_ERROR_WANT_READ : SSL_ERROR_WANT_WRITE);
        if (ERR_peek_error()) ERR_clear_error();
        return 0;
    }
    describe(ssl, rc, writing ? "send" : "recv", err);
    return -1;
}

ssize_t rl_tls_read(SSL *ssl, void *buf, size_t n, int *want_write, rl_error *err) {
    return transfer(ssl, 0, buf, n, want_write, err);
}

ssize_t rl_tls_write(SSL *ssl, const void *buf, size_t n, int *want_read, rl_error *err) {
    return transfer(ssl, 1, (void *)buf, n, want_read, err);
}

int rl_tls_pending(const SSL *ssl) { return SSL_has_pending(ssl); }
