/* rl_conn: a non-blocking connection, plain or TLS, with tagged replies
 * (see rl_conn.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_conn.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* Marks c broken with the first reason only (what, and errno e when not 0). */
static int set_broken(rl_conn *c, rl_error_kind kind, const char *what, int e) {
    if (!c->broken) {
        c->broken = 1;
        if (e) rl_error_set(&c->err, kind, "%s: %s", what, strerror(e));
        else rl_error_set(&c->err, kind, "%s", what);
    }
    return -1;
}

/* Once connected, the socket may block: every send and recv but
 * rl_conn_wait_read's passes MSG_DONTWAIT, so only that one waits. */
static void connected(rl_conn *c) {
    int fl = fcntl(c->fd, F_GETFL);
    c->can_block = fl >= 0 && fcntl(c->fd, F_SETFL, fl & ~O_NONBLOCK) == 0;
}

rl_conn *rl_conn_open(const struct sockaddr *addr, socklen_t addrlen, rl_error *err) {
    rl_conn *c = calloc(1, sizeof *c);
    if (!c || !(c->reader = rl_reader_new())) {
        free(c);
        rl_error_set(err, RL_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        rl_error_set(err, RL_ERR_IO, "socket: %s", strerror(errno));
        rl_reader_free(c->reader);
        free(c);
        return NULL;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(c->fd, addr, addrlen) != 0) {
        if (errno != EINPROGRESS) {
            rl_error_set(err, RL_ERR_IO, "connect: %s", strerror(errno));
            rl_conn_close(c);
            return NULL;
        }
        c->connecting = 1;
    } else
        connected(c);
    return c;
}

void rl_conn_use_tls(rl_conn *c, SSL *ssl) {
    c->ssl = ssl;
    c->handshaking = 1;
    /* The client speaks first: a connect that finished at once has sent
     * nothing yet, and would wait for a reply to a hello never written. */
    c->hs_want_write = 1;
}

void rl_conn_close(rl_conn *c) {
    if (!c) return;
    rl_tls_free(c->ssl);
    if (c->fd >= 0) close(c->fd);
    rl_reader_free(c->reader);
    rl_buf_free(&c->in);
    rl_buf_free(&c->out);
    free(c->tags);
    free(c);
}

static int push_tag(rl_conn *c, const rl_tag *tag) {
    if (c->count == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        rl_tag *t = malloc(cap * sizeof *t);
        if (!t) return -1;
        for (size_t i = 0; i < c->count; i++) t[i] = c->tags[(c->head + i) % c->cap];
        free(c->tags);
        c->tags = t;
        c->cap = cap;
        c->head = 0;
    }
    c->tags[(c->head + c->count) % c->cap] = *tag;
    c->count++;
    return 0;
}

/* A TLS connection that breaks after its handshake but before any reply:
 * a server that wants a client certificate checks it only then (TLS 1.3)
 * and drops the connection, with or without an alert. */
static int tls_broken(rl_conn *c, const rl_error *why) {
    if (c->got_any || strstr(why->msg, "client certificate")) return set_broken(c, why->kind, why->msg, 0);
    if (c->broken) return -1;
    c->broken = 1;
    return rl_error_set(&c->err, why->kind, "%.70s (before any reply: does the server want a client certificate? set "
                                            "tls_cert_file and tls_key_file)", why->msg);
}

static int flush_out(rl_conn *c) {
    while (c->out.off < c->out.len) {
        ssize_t n;
        if (c->ssl) {
            rl_error why;
            n = rl_tls_write(c->ssl, c->out.data + c->out.off, c->out.len - c->out.off, &c->write_wants_read, &why);
            if (n < 0) return tls_broken(c, &why);
            if (n == 0) return 0;
        } else {
            n = send(c->fd, c->out.data + c->out.off, c->out.len - c->out.off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
                return set_broken(c, RL_ERR_IO, "send", errno);
            }
        }
        rl_buf_consume(&c->out, (size_t)n);
    }
    return 0;
}

/* A command was appended to c->out from before on (appended: 0, or -1
 * when out of memory): its tag goes on the FIFO and the bytes out. */
static int queued(rl_conn *c, const rl_tag *tag, size_t before, int appended) {
    if (appended != 0) return set_broken(c, RL_ERR_NOMEM, "out of memory", 0);
    if (tag && push_tag(c, tag) != 0) {
        c->out.len = before;
        return set_broken(c, RL_ERR_NOMEM, "out of memory", 0);
    }
    if (!c->connecting && !c->handshaking) return flush_out(c);
    return 0;
}

int rl_conn_send(rl_conn *c, const rl_tag *tag, int argc, const char *const *argv, const size_t *lens) {
    if (c->broken || c->sealed) return -1;
    size_t before = c->out.len;
    return queued(c, tag, before, rl_buf_append_command(&c->out, argc, argv, lens));
}

int rl_conn_send_resp(rl_conn *c, const rl_tag *tag, const char *cmd, size_t len) {
    if (c->broken || c->sealed) return -1;
    size_t before = c->out.len;
    return queued(c, tag, before, rl_buf_append(&c->out, cmd, len));
}

short rl_conn_events(const rl_conn *c) {
    if (c->broken) return 0;
    if (c->connecting) return POLLOUT;
    if (c->handshaking) return c->hs_want_write ? POLLOUT : POLLIN;
    short ev = c->count > 0 || c->push ? (c->read_wants_write ? POLLOUT : POLLIN) : 0;
    if (c->out.off < c->out.len) ev |= c->write_wants_read ? POLLIN : POLLOUT;
    return ev;
}

static int finish_connect(rl_conn *c) {
    int e = 0;
    socklen_t len = sizeof e;
    if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &e, &len) != 0) e = errno;
    if (e == EINPROGRESS || e == EALREADY) return 0;
    if (e) return set_broken(c, RL_ERR_IO, "connect", e);
    c->connecting = 0;
    connected(c);
    return 0;
}

/* A plain connection's first bytes: a TLS record (0x16 handshake, 0x15
 * alert) means the port serves TLS. */
static int plain_first_bytes(rl_conn *c, const char *buf) {
    int tls = !c->got_any && (buf[0] == 0x15 || buf[0] == 0x16);
    c->got_any = 1;
    return tls ? set_broken(c, RL_ERR_IO, "the server answered in TLS; this port serves TLS (use rediss:// for it)", 0) : 0;
}

/* One recv on a plain connection (flags: MSG_DONTWAIT, or 0 to wait as
 * SO_RCVTIMEO allows). Returns the bytes read, 0 when none came (nothing
 * there, the wait ran out, a signal), -1 when the connection broke. */
static ssize_t plain_recv(rl_conn *c, char *buf, size_t len, int flags) {
    ssize_t n;
    do n = recv(c->fd, buf, len, flags);
    while (n < 0 && errno == EINTR && flags == MSG_DONTWAIT);
    if (n == 0)
        return set_broken(c, RL_ERR_IO, c->got_any ? "connection closed by the server" :
                                         "connection closed by the server before any reply (if this port serves "
                                         "TLS, use rediss://)", 0);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
        if (!c->got_any && errno == ECONNRESET)
            return set_broken(c, RL_ERR_IO, "recv: connection reset before any reply (if this port serves TLS, use rediss://)", 0);
        return set_broken(c, RL_ERR_IO, "recv", errno);
    }
    return plain_first_bytes(c, buf) != 0 ? -1 : n;
}

/* Room for one read at the end of c->in: RL_READ_ROOM bytes (a round's
 * replies fit), or RL_READ_LONG when more is there (a long reply, read in
 * as few calls as before). What is left unread moves to the front first
 * (a part of a reply: a few bytes), and a buffer a long reply grew goes
 * once it is empty. NULL on OOM (c is broken). */
#define RL_READ_ROOM 512
#define RL_READ_LONG 16384
#define RL_IN_KEEP 65536 /* above what one 16 KiB read after a full room grows it to */
static char *read_room(rl_conn *c, size_t *room) {
    rl_buf *b = &c->in;
    if (b->off > 0) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len == 0 && b->cap > RL_IN_KEEP) rl_buf_free(b);
    size_t want = b->len < RL_READ_ROOM ? RL_READ_ROOM : RL_READ_LONG;
    if (rl_buf_reserve(b, want) != 0) {
        set_broken(c, RL_ERR_NOMEM, "out of memory", 0);
        return NULL;
    }
    *room = b->cap - b->len;
    return b->data + b->len;
}

/* n bytes were read into the room read_room gave. */
static int took(rl_conn *c, size_t n) {
    c->in.len += n;
    if (c->in.len - c->in.off + (c->reader->len - c->reader->pos) > RL_REPLY_MAX_BYTES)
        return set_broken(c, RL_ERR_PROTOCOL, "protocol error: a reply larger than 16 MiB", 0);
    return 0;
}

static int read_in(rl_conn *c) {
    for (;;) {
        size_t room;
        char *buf = read_room(c, &room);
        if (!buf) return -1;
        ssize_t n;
        if (c->ssl) {
            rl_error why;
            n = rl_tls_read(c->ssl, buf, room, &c->read_wants_write, &why);
            if (n < 0) return tls_broken(c, &why);
            if (n == 0) return 0;
            c->got_any = 1;
        } else {
            n = plain_recv(c, buf, room, MSG_DONTWAIT);
            if (n <= 0) return (int)n;
        }
        if (took(c, (size_t)n) != 0) return -1;
        /* A short read emptied the socket; with TLS, records already taken
         * from it may still hold bytes, which no poll would announce. */
        if ((size_t)n < room && !(c->ssl && rl_tls_pending(c->ssl))) return 0;
    }
}

/* The receive timeout to set for a wait of wait_us, or 0 when the wait is
 * too short to do this way. The kernel counts it in ticks (10 ms at the
 * lowest tick rate) and, for longer waits, in coarser steps (at most an
 * eighth of the wait), always rounding up: what is set leaves room for
 * both, so the wait never ends after wait_us. Whole milliseconds, so that
 * rounds whose waits differ by microseconds keep the value already set. */
static int64_t recv_timeout_for(int64_t wait_us) {
    int64_t t = wait_us - wait_us / 8 - 10000;
    return t >= 5000 ? t / 1000 * 1000 : 0;
}

int rl_conn_wait_read(rl_conn *c, int64_t wait_us) {
    if (!c->can_block || c->ssl || c->broken || c->connecting || c->out.off < c->out.len) return -1;
    int64_t t = recv_timeout_for(wait_us);
    if (!t) return -1;
    if (c->recv_timeout_us > t || c->recv_timeout_us < t - 2000) {
        struct timeval tv = {.tv_sec = t / 1000000, .tv_usec = (suseconds_t)(t % 1000000)};
        if (setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) return -1;
        c->recv_timeout_us = t;
    }
    size_t room;
    char *buf = read_room(c, &room);
    if (!buf) return 1; /* broken: the round finds it so */
    ssize_t n = plain_recv(c, buf, room, 0);
    if (n <= 0) return n < 0;
    if (took(c, (size_t)n) != 0) return 1;
    if ((size_t)n == room) read_in(c);
    return 1;
}

static int handshake(rl_conn *c) {
    rl_error why;
    int r = rl_tls_handshake(c->ssl, &c->hs_want_write, &why);
    if (r < 0) return set_broken(c, why.kind, why.msg, 0);
    if (r == 0) return 0;
    c->handshaking = 0;
    if (flush_out(c) != 0) return -1;
    return read_in(c);
}

int rl_conn_progress(rl_conn *c, short revents) {
    if (c->broken) return -1;
    if (c->connecting) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP))) return 0;
        if (finish_connect(c) != 0) return -1;
        if (c->connecting) return 0;
        return c->ssl ? handshake(c) : flush_out(c);
    }
    if (c->handshaking) return revents ? handshake(c) : 0;
    short can_write = c->write_wants_read ? POLLIN | POLLERR | POLLHUP : POLLOUT;
    short can_read = c->read_wants_write ? POLLOUT | POLLERR | POLLHUP : POLLIN | POLLERR | POLLHUP;
    if (revents & can_write && flush_out(c) != 0) return -1;
    if (revents & can_read) return read_in(c);
    return 0;
}

int rl_conn_next_reply(rl_conn *c, rl_tag *tag, rl_reply **reply) {
    rl_reply *r = NULL;
    *reply = NULL;
    if (rl_resp_next_reply(c->reader, &c->in, &r) != REDIS_OK) {
        if (c->broken) return -1;
        c->broken = 1;
        int too_big = rl_reader_too_big(c->reader);
        if (too_big == RL_REPLY_TOO_MANY)
            return rl_error_set(&c->err, RL_ERR_PROTOCOL, "protocol error: a reply with more than %d elements",
                                RL_REPLY_MAX_ELEMENTS);
        if (too_big == RL_REPLY_TOO_LONG)
            return rl_error_set(&c->err, RL_ERR_PROTOCOL, "protocol error: a reply larger than 16 MiB");
        if (c->reader->err == REDIS_ERR_OOM) return rl_error_set(&c->err, RL_ERR_NOMEM, "out of memory");
        return rl_error_set(&c->err, RL_ERR_PROTOCOL, "protocol error: %.100s", c->reader->errstr);
    }
    if (!r) return 0;
    if (c->push) {
        memset(tag, 0, sizeof *tag);
        *reply = r;
        return 1;
    }
    if (c->count == 0) {
        rl_reply_free(r);
        return set_broken(c, RL_ERR_PROTOCOL, "protocol error: a reply nobody asked for", 0);
    }
    *tag = c->tags[c->head];
    c->head = (c->head + 1) % c->cap;
    c->count--;
    *reply = r;
    return 1;
}

const char *rl_conn_stall_hint(const rl_conn *c) {
    if (c->handshaking && !c->connecting)
        return " (TLS handshake not finished: a hung server, or a port that does not serve TLS: then use redis://)";
    return "";
}

const rl_tag *rl_conn_oldest(const rl_conn *c) { return c->count ? &c->tags[c->head] : NULL; }

int rl_conn_unsent(const rl_conn *c) { return !c->broken && (c->connecting || c->handshaking || c->out.off < c->out.len); }

int rl_conn_closed_while_idle(const rl_conn *c) {
    if (c->broken) return 0; /* rl_round marks its node down instead */
    if (c->connecting || c->handshaking || c->count > 0 || c->out.off < c->out.len || c->in.off < c->in.len) return 0;
    char byte;
    ssize_t n = recv(c->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0) return 1; /* 0: the server closed it; > 0: bytes nobody asked for */
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

void rl_conn_defer_deadlines(rl_conn *c, int64_t until) {
    for (size_t i = 0; i < c->count; i++) {
        rl_tag *t = &c->tags[(c->head + i) % c->cap];
        if (t->deadline_us < until) t->deadline_us = until;
    }
}
