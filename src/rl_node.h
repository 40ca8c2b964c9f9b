/* rl_node: one node of a client: opening its connection with the set-up
 * commands, marking it down with a growing backoff or up again, reading
 * what INFO and ROLE say about it, and deciding whether its vote may count.
 * Callers hold the client's mutex.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_NODE_H
#define RL_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "rl_client.h"
#include "rl_conn.h"
#include "rl_text.h"

/* Opens a connection to node: plain, or TLS for a rediss:// node. Returns
 * it (the handshake still to come), or NULL with the reason in err. */
rl_conn *rl_node_open(rl_client *c, rl_node *node, rl_error *err);

/* Opens a connection to node and queues its set-up commands (AUTH, SELECT,
 * INFO, ROLE) tagged with op. Returns 0, or -1 with node marked down. */
int rl_node_connect(rl_client *c, rl_node *node, uint64_t op, int64_t deadline_us);

/* Marks node down for a growing backoff. With stalled set, its connection
 * is kept as the stale one (late replies and cleanups still flow); else it
 * is closed. why becomes last_error. */
void rl_node_mark_down(rl_client *c, rl_node *node, const char *why, int stalled);

/* After a tls_* setting changed (caller holds c->mu): no connection made
 * under the old value (unverified, another CA or client certificate) votes
 * or carries a password again. Each TLS node's connection is closed, or,
 * when replies are still owed on it, kept as the stalled one to drain
 * (rl_node_mark_down); the next call connects anew with the new value. */
void rl_node_drop_tls_connections(rl_client *c);

/* Keeps a cleanup (argc arguments) of a failed attempt for node until the
 * node answers it without an error, or until the key it deletes has
 * expired by itself (the largest TTL c used, from now). rl_node_send_owed sends it, on the node's
 * current connection and again on the next one while unanswered. Returns
 * 0, or -1 when RL_NODE_OWED_MAX are kept already or without memory (the
 * cleanup is not kept). */
int rl_node_owe_cleanup(const rl_client *c, rl_node *node, int argc, const char *const *argv, const size_t *lens);

/* Sends on conn, the node's current connection, the owed cleanups not yet
 * sent on it, and drops those whose keys have expired. Returns 0, or -1
 * when conn broke (the cleanups are kept for the next one). */
int rl_node_send_owed(rl_node *node, rl_conn *conn, int64_t deadline_us);

/* The node answered owed cleanup id: done unless the answer was an error
 * (failed), after which it goes again with a later command to the node,
 * 100 ms after the first error, twice as long after each next, at most 5 s. */
void rl_node_owed_answered(rl_node *node, uint32_t id, int failed);

/* Marks node up after a timely reply. */
void rl_node_mark_up(rl_client *c, rl_node *node);

/* Whether reply r (to any command) is NOAUTH: the server needs a password
 * and this connection gave none. node is then refused as if its AUTH had
 * failed (no answer of this connection counts), and last_error says where
 * the password goes, unless a failed AUTH or SELECT said why first. */
int rl_node_on_noauth(rl_node *node, const rl_reply *r);

/* Handles a reply to a set-up command (AUTH, SELECT, INFO, ROLE), or to
 * the write of the holder details (RL_K_DETAILS): one that failed is tried
 * again no sooner than RL_NODE_DETAILS_RETRY_US later. */
#define RL_NODE_DETAILS_RETRY_US 10000000
void rl_node_on_setup_reply(rl_client *c, rl_node *node, int kind, const rl_reply *r);

/* Whether INFO, ROLE and the node checks have answered on node's current
 * connection: until then it cannot be told apart from the other nodes. */
int rl_node_known(const rl_node *node);

/* Whether node is a duplicate (the same server as a row with a lower id)
 * on another database than that row: its answers are about other keys and
 * never count. On the same database, what its command did is the server's
 * answer, which rl_round.c counts once whichever row gave it. */
int rl_node_duplicate_elsewhere(const rl_client *c, const rl_node *node);

/* Why a yes from node must not count (its INFO or ROLE not read on this
 * connection, replica, duplicate on another database, restart guard),
 * written into why; 0 when it counts. Node checks (rl_nodecheck_blocked)
 * and one answer per server (rl_round.c) are the caller's. guard_applies:
 * acquire and extend; the restart guard is judged at now, when the reply
 * was seen. */
int rl_node_vote_blocked(const rl_client *c, const rl_node *node, int guard_applies, int64_t now, char *why,
                         size_t whylen);

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
