/* rl_error: the one way the engine reports what went wrong: a kind a caller
 * can act on, and a message for the user (as hiredis's err and errstr). A
 * message says what to change, never carries a secret, and fits in
 * RL_ERR_MAX bytes, the one message size of the engine and the binding.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_ERROR_H
#define RL_ERROR_H

#define RL_ERR_MAX 1024

/* One node's or one lock's reason (a vote, last_error, lost_reason): a part
 * of a message, so that the reasons of several nodes fit in one. */
#define RL_ERR_REASON_MAX 256

typedef enum {
    RL_ERR_NONE = 0,
    RL_ERR_INVALID,  /* an argument, setting or URL that is not allowed */
    RL_ERR_STATE,    /* not now: the state forbids it (locks held, node exists) */
    RL_ERR_NOMEM,
    RL_ERR_RESOLVE,  /* a host name that does not resolve */
    RL_ERR_IO,       /* a socket call failed, or the peer closed */
    RL_ERR_PROTOCOL, /* the server sent what Redis never sends */
    RL_ERR_TLS,      /* TLS set-up, handshake or verification */
} rl_error_kind;

typedef struct rl_error {
    rl_error_kind kind;
    char msg[RL_ERR_MAX];
} rl_error;

/* Sets e to kind with a printf-style message (cut to RL_ERR_MAX bytes).
 * Returns -1, so a failing function can end with return rl_error_set(...). */
int rl_error_set(rl_error *e, rl_error_kind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Clears e (kind RL_ERR_NONE, empty message). */
void rl_error_clear(rl_error *e);

#endif
