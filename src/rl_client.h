/* rl_client: a set of Redis nodes with their connections and health, and the
 * settings every lock operation of one owner (one SQLite connection) uses.
 *
 * A client is used by one caller thread plus, at most, the auto-extension
 * thread; every public engine function takes c->mu for the time it talks to
 * the nodes and never sleeps while holding it.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_CLIENT_H
#define RL_CLIENT_H

#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "rl_acl.h"
#include "rl_conn.h"
#include "rl_endpoint.h"
#include "rl_events.h"
#include "rl_kind.h"
#include "rl_random.h"
#include "rl_stats.h"
#include "rl_text.h"
#include "rl_tls.h"

enum { RL_HEALTH_IDLE, RL_HEALTH_UP, RL_HEALTH_DOWN };

/* At most this many owed cleanups per node: more are dropped, and their
 * keys expire with their TTL as they would have without any. */
#define RL_NODE_OWED_MAX 16

/* A failed attempt's cleanup that a node still owes an answer to: its
 * command went on a connection that broke before it answered (it may have
 * run), or the cleanup itself was answered with an error (LOADING after a
 * restart). Kept until the node answers it or the key has expired anyway. */
typedef struct rl_owed {
    rl_buf cmd;        /* the whole RESP command, owned */
    uint32_t id;       /* rl_tag.owed of its sends: which entry an answer is for */
    uint32_t sent_on;  /* rl_node.conn_serial of the connection it went on last; 0: not sent */
    int64_t until_us;  /* the attempt's key is gone by itself after this */
    int64_t not_before_us; /* after an error answer: not sent again before this */
    int errors;        /* error answers so far: each doubles the wait, to 5 s */
} rl_owed;

/* A node's owed cleanups, oldest first; a value, so it can be carried
 * across a reset of the node (same server, new settings). */
typedef struct rl_owed_list {
    rl_owed e[RL_NODE_OWED_MAX];
    int n;
    uint32_t last_id;  /* the last rl_owed.id given out */
} rl_owed_list;

typedef struct rl_node {
    int64_t id;
    rl_endpoint ep;
    struct sockaddr_storage addr;  /* resolved when configured */
    socklen_t addrlen;
    rl_conn *conn;          /* the connection commands go on, or NULL */
    rl_conn *stale;         /* a stalled connection kept only so late replies are
                               read and queued cleanups reach the node; or NULL */
    rl_conn *sub;           /* pub/sub connection for release wake-ups (rl_wait.c) */
    int sub_ready;          /* sub was asked to subscribe to the waited-for name's channels */
    int sub_confirms;       /* of the two confirmations of that SUBSCRIBE, how many came
                               (-1: it answered with an error and will confirm nothing) */
    int sub_need;           /* the confirmations that SUBSCRIBE gets: one per channel (rl_wait.c) */
    int64_t stale_until_us;
    int health;
    int64_t retry_at_us;    /* while down: not contacted before this */
    int64_t backoff_ms;     /* the last down period; doubles up to reconnect_max_ms */
    int auth_failed;
    int is_replica;
    int64_t duplicate_of;   /* id of a node that is the same server, or 0 */
    char run_id[48];
    int info_known;         /* INFO (run_id) read on the current connection */
    int role_known;         /* ROLE read on the current connection */
    int64_t uptime_ms;      /* the server's uptime as INFO said it, or -1 */
    int64_t uptime_at_us;   /* rl_now_us() when INFO said it */
    int checks_known;       /* RL_CHECK_* bits read on the current connection */
    int check_reported;     /* the node was reported refused on this connection */
    rl_acl_mask acl_missing; /* commands the current connection's user may not run (its probe) */
    int setup_done;         /* every set-up command answered on the current connection (the
                               ACL probe, sent last, did) */
    int setup_blind;        /* and INFO or ROLE gave no usable answer: the node is refused */
    int64_t maxmemory;      /* INFO memory: 0 when unlimited */
    char maxmemory_policy[32];
    int in_cluster;         /* INFO cluster: cluster_enabled:1 */
    char last_error[RL_ERR_REASON_MAX];
    uint64_t cfg;           /* which configuration (rl_client.cfg_count when
                               added or last updated) */
    rl_tls_peer tls;        /* TLS nodes: context and session (rl_tls.h) */
    rl_node_stats stats;    /* what this connection did with the node (rl_stats.h) */
    unsigned scripts_cached; /* rl_evalsha scripts the current connection ran: bit i for script i */
    int evalsha_refused;    /* the current connection's user may not run EVALSHA */
    /* Cleanups the node owes an answer to, oldest first (rl_owed,
     * rl_node_owe_cleanup, rl_node_send_owed). */
    rl_owed_list owed;
    uint32_t conn_serial;   /* counts the node's connections: which one is node->conn */
    /* The last release decided while this node still owed its answer to
     * an EVALSHA: its op (0: none) and its arguments but the script, each
     * a size_t length then the bytes (owned), so that a late NOSCRIPT,
     * which means it never ran here, is answered by sending it in full. */
    uint64_t release_op;
    int release_argc;
    rl_buf release_args;
    /* The holder details on the current connection (rl_lock_holder.c):
     * which of the client's ids they were written for (rl_holder_id.gen; 0:
     * none yet), until when they live at least (rl_now_us), and, after a
     * write the node refused, no new one before details_retry_us. */
    uint64_t details_gen;
    int64_t details_until_us, details_retry_us;
} rl_node;

typedef struct rl_settings {
    int64_t timeout_ms;       /* per-node connect+reply timeout */
    int64_t retry_delay_ms;
    int64_t retry_jitter_ms;
    double drift_factor;
    char *key_prefix;         /* owned, NUL-terminated, "" by default */
    int64_t fencing;
    int64_t fence_ttl_ms;     /* 0: the counter never expires */
    int64_t restart_guard;    /* 0: off; 1: on; more: on, with at least this
                                 many ms as the largest TTL any client uses */
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t auto_extend;
    int64_t release_in_write_txn; /* not used by the engine: the host refuses a release
                                     made before its own writes are committed unless 1 */
    int64_t xact_margin_ms;   /* not used by the engine: the validity a lock of a
                                 transaction must have left for its COMMIT to go on */
    int64_t unsafe_test_quorum; /* 0: majority; tests only */
    int64_t tls_verify;       /* 1: check server certificates and host names */
    int64_t allow_evicting_nodes; /* 0: an evicting node's votes do not count */
    int64_t allow_cluster_nodes;  /* 0: a cluster node's votes do not count */
    int64_t holder_info;      /* 1: acquisitions write holder details (rl_lock_holder.c) */
    int64_t evalsha;          /* 1: scripts a node has cached go by digest (rl_evalsha.h) */
    int64_t on_lost;          /* 1: the owner is told when a lock taken from now on
                                 is lost or runs out of validity (rl_session_set_on_lost) */
    int64_t fair;             /* 1: waiting acquires queue, served in order (rl_queue.h) */
    int64_t queue_lease_ms;   /* how long a fair waiter's queue entry outlives its last turn */
    char *client_name;        /* owned: the app name in holder details */
    char *tls_ca_file, *tls_ca_dir, *tls_cert_file, *tls_key_file; /* owned; "": not set */
} rl_settings;

/* The settings of a new client (text settings are "" and set apart, since
 * each client owns its copy). The one place the defaults are written. */
#define RL_SETTINGS_DEFAULTS                                                                                   \
    {                                                                                                          \
        .timeout_ms = 50, .retry_delay_ms = 200, .retry_jitter_ms = 100, .drift_factor = 0.01, .fencing = 1,   \
        .fence_ttl_ms = 7LL * 24 * 3600 * 1000, .reconnect_min_ms = 100, .reconnect_max_ms = 5000,            \
        .tls_verify = 1, .holder_info = 1, .evalsha = 1, .xact_margin_ms = 100,                                \
        .queue_lease_ms = 2000,                                                                                \
    }

/* A recent fenced acquisition, so a late yes with a lower number can still
 * be written back (rl_fence.c). */
typedef struct rl_fenced_op {
    uint64_t op;
    long long fence;
    char *fkey;          /* owned */
    size_t fkeylen;
    int64_t fence_ttl_ms;
} rl_fenced_op;

#define RL_RECENT_FENCED 8

/* The holder details a client's tokens point to (rl_lock_holder.c): made
 * again, with a new id, when the process (a fork), client_name or
 * key_prefix changes, so a lock always shows what was true when it was
 * taken. */
typedef struct rl_holder_id {
    uint64_t gen;                 /* counts the ids made; 0: none yet */
    int stale;                    /* a setting it depends on changed */
    long pid;                     /* the process it was made in */
    char id[RL_TOKEN_ID_LEN];     /* the id the tokens start with (hex) */
    char text[256];               /* the details as stored (RL_HOLDER_DETAILS_MAX) */
    size_t len;
} rl_holder_id;

typedef struct rl_client {
    pthread_mutex_t mu;
    rl_node **nodes;
    int n, cap;
    int64_t next_id;     /* the next id given automatically; 0: none left */
    uint64_t cfg_count;  /* node configurations made so far (rl_node.cfg) */
    rl_settings set;
    uint64_t op;         /* counts operations; tags replies */
    int64_t max_ttl_ms;  /* largest TTL used so far (restart guard, stale connections) */
    int64_t looked_us;   /* when a round last looked at every connection before sending (rl_round) */
    int64_t used_us;     /* when the last round ended: connections idle longer are checked before use (rl_round) */
    int wake_left;       /* early attempts release messages may still bring about (rl_lock_pause) */
    int64_t wake_filled_us; /* when wake_left last grew */
    rl_buf round_cmd[2]; /* owned scratch: a round's command in RESP, in full and by digest (rl_round) */
    rl_fenced_op recent_fenced[RL_RECENT_FENCED];
    int recent_next;
    /* Asked every RL_CANCEL_PERIOD_US while an acquire waits (on the
     * caller's thread, c->mu not held); nonzero ends the wait. NULL: never. */
    int (*cancel)(void *ctx);
    void *cancel_ctx;
    void (*on_event)(void *ctx, const rl_event *ev); /* rl_client_set_events */
    void *event_ctx;
    rl_events *events;   /* owned: the recent events (rl_client_events_copy) */
    unsigned tls_gen;    /* counts writes of tls_* settings: contexts built
                            before the last one are rebuilt */
    rl_holder_id holder; /* what its tokens point to (rl_lock_holder.c) */
} rl_client;

#define RL_CANCEL_PERIOD_US 5000

/* A new client with default settings and no nodes; NULL on OOM. */
rl_client *rl_client_new(void);

/* Sets the callback a waiting acquire asks every RL_CANCEL_PERIOD_US
 * (NULL: never cancelled). Set once, before the client is used. */
void rl_client_set_cancel(rl_client *c, int (*cancel)(void *ctx), void *ctx);

/* Gives cleanups queued on stalled connections a bounded chance to leave
 * (at most one node timeout), then closes every connection and frees the
 * client. Held locks are not released here, and replies still owed are not
 * waited for: the owner does both first (rl_session_free: releases, then
 * rl_round_settle, so late replies still act). */
void rl_client_free(rl_client *c);

/* Adds a node (the endpoint is copied; its host is resolved now). Returns
 * the new id (> 0), or -1 with a message in err. Takes c->mu. */
int64_t rl_client_add_node(rl_client *c, const rl_endpoint *ep, int64_t id, rl_error *err);

/* Replaces node id's endpoint (its connections are closed). Returns 0, or -1
 * with a message in err. Takes c->mu. */
int rl_client_update_node(rl_client *c, int64_t id, const rl_endpoint *ep, rl_error *err);

/* Removes node id. Returns 0, or -1 when there is no such node. Takes c->mu. */
int rl_client_remove_node(rl_client *c, int64_t id);

/* A copy of the node list to go back to (rl_client_nodes_restore). */
typedef struct rl_node_list {
    int n;
    int64_t next_id;
    int64_t *ids;
    uint64_t *cfgs;
    rl_node **spare;  /* an unconnected copy of each node, for nodes that must be made anew */
    rl_node **slots;  /* room for the restored list, so restoring cannot fail */
} rl_node_list;

/* Saves the node list into *out. Returns 0, -1 on OOM. Takes c->mu. */
int rl_client_nodes_save(rl_client *c, rl_node_list *out);

/* Puts the node list back as saved: nodes added since are removed, removed
 * ones come back (without a connection), updated ones get their saved
 * endpoint again; a node unchanged since keeps its connection and health.
 * Cannot fail. Takes c->mu. The list is then only good for
 * rl_client_nodes_free. */
void rl_client_nodes_restore(rl_client *c, rl_node_list *list);

/* Frees a saved list (a zeroed one is fine). */
void rl_client_nodes_free(rl_node_list *list);

/* The points a change of the node list can be undone to (rl_client_undo.c):
 * its start (level -1) and each savepoint opened inside it (levels 0, 1,
 * ..., as the host numbers them, lowest first). A point's copy of the list
 * is made only when the list first changes after it; a point without one
 * stands for the same list as the point above it (or, the top one, as the
 * list now). tag is an int the caller keeps with each copy. */
typedef struct rl_undo_point {
    int level;
    int saved;          /* list and tag hold the list as it was at this point */
    rl_node_list list;
    int tag;
} rl_undo_point;

typedef struct rl_client_undo {
    rl_undo_point *p;
    int n, cap;
    int broken;         /* a savepoint could not be recorded: no more changes */
    int join_level;     /* the lowest level marked since the start (INT_MAX: none):
                           a savepoint below it was opened before the change
                           began, so the start stands for it */
} rl_client_undo;

/* Starts a change: one point, its start. Returns 0, -1 on OOM. */
int rl_client_undo_start(rl_client_undo *u);

/* A savepoint at level opened (points at that level or above are first
 * merged away, as by rl_client_undo_release). Returns 0, or -1 on OOM: then
 * rl_client_undo_before_change refuses every change until the end. */
int rl_client_undo_mark(rl_client_undo *u, int level);

/* To be called before each change of c's list: saves the list (and tag)
 * into the top point if it has no copy yet. Returns 0, -1 on OOM (or after
 * a failed mark): then the change must not be made. */
int rl_client_undo_before_change(rl_client_undo *u, rl_client *c, int tag);

/* The savepoint at level and those above it end, their changes kept: the
 * point below takes over their oldest copy if it has none. */
void rl_client_undo_release(rl_client_undo *u, int level);

/* Puts c's list back as it was when the savepoint at level opened (level
 * -1: the start), which stays open; the points above it go. Returns 1 with
 * *tag set when the list was changed back, 0 when it had not changed.
 * Cannot fail. */
int rl_client_undo_back_to(rl_client_undo *u, rl_client *c, int level, int *tag);

/* Ends the change: with rollback, c's list is put back as it was at the
 * start (return and *tag as for rl_client_undo_back_to); else the list
 * stays as it is. Frees every point; u is then zeroed. */
int rl_client_undo_end(rl_client_undo *u, rl_client *c, int rollback, int *tag);

/* Copies what a reader of the node list sees of node index i. */
typedef struct rl_node_view {
    int64_t id;
    rl_endpoint ep;            /* owned copy: rl_endpoint_clear it */
    int64_t timeout_ms;        /* effective */
    const char *state;         /* static string */
    char last_error[RL_ERR_REASON_MAX];
    int64_t tls_resumed;       /* TLS handshakes that resumed a session */
} rl_node_view;

/* Fills *out with a snapshot of the node at index i (0-based). Returns 0, or
 * -1 when i is out of range or on OOM. Takes c->mu. */
int rl_client_node_view(rl_client *c, int i, rl_node_view *out);

/* What the engine tells its owner happened, for operators' logs (one line
 * each, valid UTF-8, no secret). */
typedef enum {
    RL_EVENT_NODE_DOWN = 1, /* a node was marked down */
    RL_EVENT_NODE_UP,       /* a node marked down answered again */
    RL_EVENT_LOCK_LOST,     /* a held lock was found lost (by the keeper's or an owner's extend) */
    RL_EVENT_NO_QUORUM,     /* an acquisition failed for lack of a quorum */
    RL_EVENT_NODE_REFUSED,  /* a node refused by the node checks (rl_nodecheck.h) */
    RL_EVENT_EXTEND_FAILED, /* the keeper's extend got too few answers; it tries again while valid */
    RL_EVENT_LOCK_EXPIRED,  /* a held lock's validity ran out while it was held */
} rl_event_kind;

/* Installs the event callback (NULL: none), set once before the client is
 * used. It may be called on the caller's thread or on the auto-extension
 * thread, with c->mu or the session's mutex held: it must not call back
 * into the engine. Every event is also kept in the client's ring
 * (rl_client_events_copy), callback or not. */
void rl_client_set_events(rl_client *c, void (*fn)(void *ctx, const rl_event *ev), void *ctx);

/* The client's last RL_EVENTS_MAX events, oldest first (rl_events_copy):
 * count, or -1 on OOM; free(*out). */
int rl_client_events_copy(rl_client *c, rl_event_row **out);

/* Copies node index i's id, statistics and last_error. Returns 0, or -1
 * when i is out of range. Takes c->mu. */
int rl_client_node_stats(rl_client *c, int i, int64_t *id, rl_node_stats *out, char *last_error, size_t errlen);

/* Number of nodes (takes c->mu). */
int rl_client_node_count(rl_client *c);

/* Frees the cleanups node owes (rl_node.owed) and its last release kept
 * for a late NOSCRIPT. */
void rl_client_forget_owed(rl_node *node);

/* Moves the cleanups node `from` owes into *to (which holds none), to be
 * sent on the next connection made; `from` then owes none. */
void rl_client_move_owed(rl_owed_list *to, rl_node *from);

/* In a child process after fork(): re-creates c->mu (it may have been copied
 * locked) and drops every inherited connection without sending a byte, so
 * the child never writes to or reads from the parent's sockets. Node
 * settings stay; connections are made anew on the next call. */
void rl_client_forget_after_fork(rl_client *c);

/* ---- internal to the engine (callers hold c->mu) ---- */

/* The effective timeout of node in microseconds: its own, or the client's. */
int64_t rl_client_timeout_us(const rl_client *c, const rl_node *node);

/* Marks every row that is the same server (same run_id, as last read) as
 * a row with a lower id: duplicate_of is the lowest such id, or 0. Run
 * whenever a run_id is read or a row is moved or removed, so that no pair
 * of rows for one server is left unmarked. A row newly marked says so in
 * last_error. Caller holds c->mu. */
void rl_client_find_duplicates(rl_client *c);

/* Reports an event about no node and no lock (rl_client_report). */
void rl_client_event(const rl_client *c, rl_event_kind kind, const char *msg);

/* Keeps ev in the client's ring and reports it through the owner's
 * callback, if any. */
void rl_client_report(const rl_client *c, const rl_event *ev);

/* "evicting", "cluster" or "refused" (its user may not run a command the
 * scripts need, rl_acl.h) when the node checks (rl_nodecheck.h) keep node
 * out under the present settings, else NULL. */
const char *rl_client_node_unfit(const rl_client *c, const rl_node *node);

/* Whether node shows state "refused": it answers, but not as the user
 * and database it is configured with (AUTH, SELECT, NOAUTH), its INFO or
 * ROLE gave no usable answer, or its user may not run the scripts. */
int rl_client_node_refused(const rl_client *c, const rl_node *node);

/* Votes needed out of c->n nodes. */
int rl_client_quorum(const rl_client *c);

/* The drift allowance for a TTL: ttl * drift_factor + 2 ms, in microseconds. */
int64_t rl_client_drift_us(const rl_client *c, int64_t ttl_ms);

/* Makes sure a TLS node has a context built from its present settings,
 * shared with the client's nodes whose settings are the same; fresh (a
 * row being written) builds one of its own instead, reading the files as
 * they are now, so that a renewed file takes effect and a missing one is
 * reported. Returns 0, or -1 with the reason in err (a file that cannot be
 * loaded, ...). */
int rl_client_tls_prepare(rl_client *c, rl_node *node, int fresh, rl_error *err);

/* With restart_guard on: how many more microseconds node must have been up
 * before its yes counts for a call now (0: it counts; INT64_MAX: its uptime
 * is unknown). The guard period is the largest TTL this connection has used
 * (the current call's included) or restart_guard's own value if larger,
 * plus the drift allowance. 0 when the guard is off. */
int64_t rl_client_guard_left_us(const rl_client *c, const rl_node *node, int64_t now_us);

#endif
