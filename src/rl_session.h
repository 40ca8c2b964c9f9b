/* rl_session: what one owner (one SQLite connection) holds. It keeps the
 * token of every lock taken through it, counts re-acquisitions of a lock it
 * already holds (reentrancy, as MySQL and PostgreSQL named locks), knows how
 * long each lock is still valid, and gives everything back when it ends.
 *
 * Thread use: one caller thread; the session's mutex guards the held list
 * so a background thread may read and update it. */
#ifndef RL_SESSION_H
#define RL_SESSION_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_lock.h"

typedef struct rl_held {
    char *res;               /* owned, reslen bytes (+ NUL) */
    size_t reslen;
    char token[RL_TOKEN_LEN + 1];
    int64_t ttl_ms;
    int64_t valid_until_us;  /* rl_now_us() at which our validity ends */
    long long fence;
    int count;               /* acquisitions not yet released */
    int yes_nodes;
    int64_t extensions;
} rl_held;

typedef struct rl_session {
    rl_client *client;  /* owned */
    pthread_mutex_t mu; /* guards held/nheld */
    rl_held *held;
    int nheld, capheld;
} rl_session;

/* A new session with a new client; NULL on OOM. */
rl_session *rl_session_new(void);

/* Releases every held lock (each call bounded by the node timeouts), then
 * frees the client and the session. */
void rl_session_free(rl_session *s);

/* Acquires res, or counts one more hold when this session holds it still
 * valid (same token, no Redis call). token receives the token on RL_OK. */
rl_status rl_session_acquire(rl_session *s, const char *res, size_t reslen, int64_t ttl_ms, int64_t wait_ms,
                             char token[RL_TOKEN_LEN + 1], rl_outcome *out);

/* With token NULL: gives back one hold of the lock this session holds on
 * res (RL_OK; the lock itself is released when the last hold goes), or
 * returns RL_MISUSE with *not_held set when it holds none. With a token:
 * releases the lock with that token on the nodes, whatever the count. */
rl_status rl_session_release(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                             int *not_held, rl_outcome *out);

/* Extends res (token NULL: the one this session holds; *not_held set when
 * none). A lock whose validity this session knows has ended is never
 * extended: RL_REFUSED. */
rl_status rl_session_extend(rl_session *s, const char *res, size_t reslen, const char *token, size_t toklen,
                            int64_t ttl_ms, int *not_held, rl_outcome *out);

/* Releases every lock this session holds; returns how many locks it held. */
int rl_session_release_all(rl_session *s);

#endif
