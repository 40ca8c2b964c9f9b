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

#include "rl_conn.h"
#include "rl_endpoint.h"
#include "rl_text.h"
#include "rl_tls.h"

/* What a tagged command is (rl_tag.kind). */
enum {
    RL_K_AUTH = 1,    /* connection set-up */
    RL_K_SELECT,
    RL_K_INFO,
    RL_K_ROLE,
    RL_K_ACQUIRE,     /* SET key token NX PX ttl */
    RL_K_ACQUIRE_FENCED, /* the same plus INCR of the fence counter, one script */
    RL_K_RELEASE,     /* compare-and-delete script */
    RL_K_EXTEND,      /* compare-and-pexpire script */
    RL_K_WRITEBACK,   /* raise a lagging fence counter */
    RL_K_CLEANUP,     /* compare-and-delete nobody waits for */
    RL_K_ACQUIRE_SHARED, /* add a shared holder (rl_shared.h) */
    RL_K_MARK,        /* writer-waiting marker; nothing is decided on it */
};

enum { RL_HEALTH_IDLE, RL_HEALTH_UP, RL_HEALTH_DOWN };

typedef struct rl_node {
    int64_t id;
    rl_endpoint ep;
    struct sockaddr_storage addr;  /* resolved when configured */
    socklen_t addrlen;
    rl_conn *conn;          /* the connection commands go on, or NULL */
    rl_conn *stale;         /* a stalled connection kept only so late replies are
                               read and queued cleanups reach the node; or NULL */
    rl_conn *sub;           /* pub/sub connection for release wake-ups (rl_wait.c) */
    int sub_ready;          /* sub has confirmed its subscriptions */
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
    char last_error[256];
    uint64_t cfg;           /* which configuration (rl_client.cfg_count when
                               added or last updated) */
    rl_tls_peer tls;        /* TLS nodes: context and session (rl_tls.h) */
} rl_node;

typedef struct rl_settings {
    int64_t timeout_ms;       /* per-node connect+reply timeout, default 50 */
    int64_t retry_delay_ms;   /* 200 */
    int64_t retry_jitter_ms;  /* 100 */
    double drift_factor;      /* 0.01 */
    char *key_prefix;         /* owned, NUL-terminated, "" by default */
    int64_t fencing;          /* 1 */
    int64_t fence_ttl_ms;     /* 7 days; 0: the counter never expires */
    int64_t restart_guard;    /* 0: off; 1: on; more: on, with at least this
                                 many ms as the largest TTL any client uses */
    int64_t reconnect_min_ms; /* 100 */
    int64_t reconnect_max_ms; /* 5000 */
    int64_t auto_extend;      /* 0 */
    int64_t unsafe_test_quorum; /* 0: majority; tests only */
    int64_t tls_verify;       /* 1: check server certificates and host names */
    char *tls_ca_file, *tls_ca_dir, *tls_cert_file, *tls_key_file; /* owned; "": not set */
} rl_settings;

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

typedef struct rl_client {
    pthread_mutex_t mu;
    rl_node **nodes;
    int n, cap;
    int64_t next_id;     /* the next id given automatically; 0: none left */
    uint64_t cfg_count;  /* node configurations made so far (rl_node.cfg) */
    rl_settings set;
    uint64_t op;         /* counts operations; tags replies */
    int64_t max_ttl_ms;  /* largest TTL used so far (restart guard, stale connections) */
    rl_fenced_op recent_fenced[RL_RECENT_FENCED];
    int recent_next;
    /* Asked every RL_CANCEL_PERIOD_US while an acquire waits (on the
     * caller's thread, c->mu not held); nonzero ends the wait. NULL: never. */
    int (*cancel)(void *ctx);
    void *cancel_ctx;
    unsigned tls_gen;    /* counts writes of tls_* settings: contexts built
                            before the last one are rebuilt */
} rl_client;

#define RL_CANCEL_PERIOD_US 5000

/* A new client with default settings and no nodes; NULL on OOM. */
rl_client *rl_client_new(void);

/* Sets the callback a waiting acquire asks every RL_CANCEL_PERIOD_US
 * (NULL: never cancelled). Set once, before the client is used. */
void rl_client_set_cancel(rl_client *c, int (*cancel)(void *ctx), void *ctx);

/* Waits (bounded by each node's timeout) for replies still owed, which act
 * as late replies do (rl_client_settle), gives cleanups queued on stalled
 * connections a bounded chance to leave, then closes every connection and
 * frees the client. Held locks are not released
 * here: the owner does that first (rl_registry_release_all). */
void rl_client_free(rl_client *c);

/* Adds a node (the endpoint is copied; its host is resolved now). Returns
 * the new id (> 0), or -1 with a message in err. Takes c->mu. */
int64_t rl_client_add_node(rl_client *c, const rl_endpoint *ep, int64_t id, char *err, size_t errlen);

/* Replaces node id's endpoint (its connections are closed). Returns 0, or -1
 * with a message in err. Takes c->mu. */
int rl_client_update_node(rl_client *c, int64_t id, const rl_endpoint *ep, char *err, size_t errlen);

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
 * rl_node_list_free. */
void rl_client_nodes_restore(rl_client *c, rl_node_list *list);

/* Frees a saved list (a zeroed one is fine). */
void rl_node_list_free(rl_node_list *list);

/* Copies what a reader of the node list sees of node index i. */
typedef struct rl_node_view {
    int64_t id;
    rl_endpoint ep;            /* owned copy: rl_endpoint_clear it */
    int64_t timeout_ms;        /* effective */
    const char *state;         /* static string */
    char last_error[256];
    int64_t tls_resumed;       /* TLS handshakes that resumed a session */
} rl_node_view;

/* Fills *out with a snapshot of the node at index i (0-based). Returns 0, or
 * -1 when i is out of range or on OOM. Takes c->mu. */
int rl_client_node_view(rl_client *c, int i, rl_node_view *out);

/* Number of nodes (takes c->mu). */
int rl_client_node_count(rl_client *c);

/* In a child process after fork(): re-creates c->mu (it may have been copied
 * locked) and drops every inherited connection without sending a byte, so
 * the child never writes to or reads from the parent's sockets. Node
 * settings stay; connections are made anew on the next call. */
void rl_client_forget_after_fork(rl_client *c);

/* ---- internal to the engine (callers hold c->mu) ---- */

/* The effective timeout of a node in microseconds. */
int64_t rl_node_timeout_us(const rl_client *c, const rl_node *n);

/* Votes needed out of c->n nodes. */
int rl_client_quorum(const rl_client *c);

/* Makes sure a TLS node has a context built from its present settings
 * (shared with nodes whose settings are the same). Returns 0, or -1 with
 * the reason in err (a file that cannot be loaded, ...). */
int rl_node_tls_prepare(rl_client *c, rl_node *node, char *err, size_t errlen);

/* Opens a connection to node: plain, or TLS for a rediss:// node. Returns
 * it (the handshake still to come), or NULL with the reason in err. */
rl_conn *rl_node_open(rl_client *c, rl_node *node, char *err, size_t errlen);

/* Opens a connection to node and queues its set-up commands (AUTH, SELECT,
 * INFO, ROLE) tagged with op. Returns 0, or -1 with node marked down. */
int rl_node_connect(rl_client *c, rl_node *node, uint64_t op, int64_t deadline_us);

/* Marks node down for a growing backoff. With stalled set, its connection
 * is kept as the stale one (late replies and cleanups still flow); else it
 * is closed. why becomes last_error. */
void rl_node_mark_down(rl_client *c, rl_node *node, const char *why, int stalled);

/* Marks node up after a timely reply. */
void rl_node_mark_up(rl_node *node);

/* Handles a reply to a set-up command (AUTH, SELECT, INFO, ROLE). */
void rl_node_on_setup_reply(rl_client *c, rl_node *node, int kind, const rl_reply *r);

/* Why a yes from node must not count (its INFO or ROLE not read on this
 * connection, replica, duplicate, restart guard), written into why; 0 when
 * it counts. guard_applies: acquire and extend. */
int rl_node_vote_blocked(const rl_client *c, const rl_node *node, int guard_applies, char *why, size_t whylen);

/* With restart_guard on: how many more microseconds node must have been up
 * before its yes counts for a call now (0: it counts; INT64_MAX: its uptime
 * is unknown). The guard period is the largest TTL this connection has used
 * (the current call's included) or restart_guard's own value if larger,
 * plus the drift allowance. 0 when the guard is off. */
int64_t rl_node_guard_left_us(const rl_client *c, const rl_node *node, int64_t now_us);

/* The drift allowance for a TTL: ttl * drift_factor + 2 ms, in microseconds. */
int64_t rl_client_drift_us(const rl_client *c, int64_t ttl_ms);

/* The AUTH command for node into argv (AUTH [user] password; a user name
 * alone logs in with an empty password, as ACL users marked nopass do).
 * Returns its argc, or 0 when the node needs no AUTH. */
int rl_node_auth_argv(const rl_node *node, const char *argv[3]);

/* What a command to node may carry that its reply must not show: the
 * node's password, and token when not NULL (rl_text_from_server). */
rl_secrets rl_node_secrets(const rl_node *node, const char *token, size_t toklen);

/* "node 2 127.0.0.1:6380" into buf. */
void rl_node_name(const rl_node *node, char *buf, size_t buflen);

#endif
