/* rl_conn: one non-blocking TCP connection to one Redis node, in the clear
 * or in TLS (rl_tls).
 *
 * The socket is ours (hiredis 0.14.1 has no connect timeout): connect is
 * started without waiting, then (TLS) the handshake runs without waiting,
 * within the same deadline as the commands queued behind it; bytes are
 * sent with MSG_NOSIGNAL so a reset peer can never raise SIGPIPE in the
 * host process, and replies are parsed with an rl_resp reader. Every command sent pushes a tag on a FIFO; every reply
 * read pops the tag at its head, so a late reply is always matched to the
 * command that asked for it and never to a later one.
 *
 * Nothing here blocks but rl_conn_wait_read, which waits a bounded time;
 * otherwise the caller polls the fd for rl_conn_events().
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_CONN_H
#define RL_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "rl_error.h"
#include "rl_resp.h"
#include "rl_tls.h"

/* What a reply is the answer to. */
typedef struct rl_tag {
    uint64_t op;          /* the operation that sent it (rl_client op counter) */
    int kind;             /* RL_K_* of rl_kind.h */
    int64_t deadline_us;  /* after this, no reply means the node is stalled */
    int64_t sent_us;      /* when it was written, for the node's latency (0: not timed) */
    unsigned char script; /* 1 + its rl_evalsha index for a script that may go by digest; 0 otherwise */
    unsigned char by_digest; /* sent as EVALSHA */
    uint32_t owed;        /* an owed cleanup's rl_owed.id; 0 for any other command */
} rl_tag;

typedef struct rl_conn {
    int fd;
    int connecting;  /* connect() not finished yet */
    int handshaking; /* TLS: connected, handshake not finished yet */
    int broken;      /* an I/O or protocol error happened; see err */
    rl_error err;    /* why it broke (kind and message); clear while not broken */
    SSL *ssl;        /* owned; NULL: plain TCP */
    int hs_want_write;    /* TLS: the handshake waits for POLLOUT (else POLLIN) */
    int read_wants_write; /* TLS: reading waits for POLLOUT */
    int write_wants_read; /* TLS: writing waits for POLLIN */
    int got_any;     /* a byte came from the server */
    redisReader *reader;
    rl_buf in;     /* received, not yet read as replies nor handed to reader */
    rl_buf out;
    rl_tag *tags;  /* ring buffer of commands awaiting a reply */
    size_t head, count, cap;
    int push;      /* pub/sub: replies come unasked; commands carry no tag */
    int can_block; /* connected, and the socket is in blocking mode (rl_conn_wait_read) */
    int sealed;    /* takes no new command, only drains: it was made under
                      settings since replaced (rl_conn_send refuses) */
    int64_t recv_timeout_us; /* SO_RCVTIMEO as last set (0: never) */
} rl_conn;

/* Starts connecting to addr. Returns a new connection (free with
 * rl_conn_close) or NULL with a reason in err when it failed at once. */
rl_conn *rl_conn_open(const struct sockaddr *addr, socklen_t addrlen, rl_error *err);

/* Makes c (just opened) speak TLS with ssl (ownership taken): the
 * handshake starts once TCP is connected; commands wait behind it. */
void rl_conn_use_tls(rl_conn *c, SSL *ssl);

/* Closes the socket and frees everything (NULL is fine). Unread replies
 * are discarded. */
void rl_conn_close(rl_conn *c);

/* Queues one command with its tag (NULL on a push connection) and tries to
 * send it at once. Returns 0, or -1 when broken or out of memory. */
int rl_conn_send(rl_conn *c, const rl_tag *tag, int argc, const char *const *argv, const size_t *lens);

/* rl_conn_send for a command already in RESP form (len bytes at cmd). */
int rl_conn_send_resp(rl_conn *c, const rl_tag *tag, const char *cmd, size_t len);

/* The poll(2) events this connection waits for (0 when idle). */
short rl_conn_events(const rl_conn *c);

/* Makes progress on whatever poll reported (connect, send, receive).
 * Returns 0, or -1 when the connection broke (c->err says why). */
int rl_conn_progress(rl_conn *c, short revents);

/* Waits up to wait_us for bytes on a plain connection that has nothing to
 * send, and reads them: one system call where poll and recv take two.
 * Returns 1 when it read (or the connection broke: see c->broken), 0 when
 * nothing came (it may give up a little early, never late), -1 when c
 * cannot wait this way (TLS, not connected yet, bytes to send, a wait too
 * short to time this way): poll it instead. */
int rl_conn_wait_read(rl_conn *c, int64_t wait_us);

/* Takes the next complete reply, if any: returns 1 with *tag and *reply set
 * (the caller frees the reply with rl_reply_free; on a push connection the
 * tag is zeroed), 0 when none is complete, -1 on a protocol error or a reply
 * nobody asked for. */
int rl_conn_next_reply(rl_conn *c, rl_tag *tag, rl_reply **reply);

/* Why a connection that owes replies may be silent, for "no answer"
 * errors: "" or a text starting with a space. */
const char *rl_conn_stall_hint(const rl_conn *c);

/* The tag of the oldest unanswered command, or NULL. */
const rl_tag *rl_conn_oldest(const rl_conn *c);

/* Whether commands are queued that have not been written yet (the
 * connection is still being set up, or the socket took only part). */
int rl_conn_unsent(const rl_conn *c);

/* Whether an idle connection (set up, nothing owed, nothing to send) can
 * no longer carry a command: the server closed or reset it, or sent bytes
 * nobody asked for (never on a healthy idle RESP connection; on TLS it
 * may be a close_notify). One recv(MSG_PEEK) that does not wait; 0 for a
 * connection that is not idle. */
int rl_conn_closed_while_idle(const rl_conn *c);

/* Moves every unanswered command's deadline to at least until. */
void rl_conn_defer_deadlines(rl_conn *c, int64_t until);

#endif
