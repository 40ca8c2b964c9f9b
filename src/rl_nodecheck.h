/* rl_nodecheck: whether a node can keep a lock at all. A node with a
 * maxmemory limit and an eviction policy other than noeviction can drop a
 * lock key under memory pressure (volatile-* policies pick exactly the keys
 * with a TTL, which every lock key has); a node of a Redis Cluster is not
 * an independent master. Both are read from INFO (sections memory and
 * cluster) on every new connection; until both are known, or while one of
 * them rules the node out and no setting allows it, its yes votes do not
 * count. A node whose user may not run a command the scripts need under
 * the present settings (the ACL probe, rl_acl.h, sent last on every new
 * connection) could take a lock it cannot release or extend: none of its
 * answers counts either.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_NODECHECK_H
#define RL_NODECHECK_H

#include <stddef.h>

#include "rl_client.h"

/* Bits of rl_node.checks_known. */
enum { RL_CHECK_MEMORY = 1, RL_CHECK_CLUSTER = 2, RL_CHECK_ALL = 3 };

/* Reads an INFO memory or INFO cluster reply (RL_K_NODECHECK) into node.
 * Returns 1 the first time this connection finds the node unfit and not
 * allowed (why in last_error), else 0. Caller holds c->mu. */
int rl_nodecheck_on_info(rl_client *c, rl_node *node, const rl_reply *r);

/* Reads the ACL probe's reply (RL_K_ACL) into node: the commands its user
 * may not run (none known when the server cannot tell: an older Redis).
 * Returns 1 the first time this connection finds the node refused for
 * them (why in last_error, unless its AUTH or SELECT failed), else 0.
 * Caller holds c->mu. */
int rl_nodecheck_on_acl(rl_client *c, rl_node *node, const rl_reply *r);

/* Finds "name:value\r\n" in an INFO text (every section rl_node and this
 * module read) and copies value, cut to outlen - 1 bytes, into out.
 * Returns 0, or -1 when name is not there. */
int rl_nodecheck_info_field(const char *text, const char *name, char *out, size_t outlen);

/* Why node's answers must not count (evicting or cluster, not allowed by
 * the settings; a user refused commands the scripts need), into why; 0
 * when the checks let them count. */
int rl_nodecheck_blocked(const rl_client *c, const rl_node *node, char *why, size_t whylen);

#endif
