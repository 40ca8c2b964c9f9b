/* rl_nodecheck: the checks that rule out nodes which cannot keep locks
 * (see rl_nodecheck.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_nodecheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rl_nodecheck_info_field(const char *text, const char *name, char *out, size_t outlen) {
    size_t nl = strlen(name);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1;
            size_t k = strcspn(v, "\r\n");
            if (k >= outlen) k = outlen - 1;
            memcpy(out, v, k);
            out[k] = '\0';
            return 0;
        }
    }
    return -1;
}

int rl_nodecheck_blocked(const rl_client *c, const rl_node *node, char *why, size_t whylen) {
    const char *unfit = rl_client_node_unfit(c, node);
    if (!unfit) return 0;
    if (unfit[0] == 'c') {
        snprintf(why, whylen,
                 "node has cluster_enabled:1: a Redis Cluster node is not an independent master; its vote does not "
                 "count (list standalone masters, or SELECT redlock_config('allow_cluster_nodes', 1))");
        return 1;
    }
    {
        snprintf(why, whylen,
                 "node evicts keys (maxmemory %lld, maxmemory-policy %s) and can drop a lock key under memory "
                 "pressure; its vote does not count (set maxmemory-policy noeviction on the node, or SELECT "
                 "redlock_config('allow_evicting_nodes', 1))",
                 (long long)node->maxmemory, node->maxmemory_policy);
        return 1;
    }
    return 0;
}

int rl_nodecheck_on_info(rl_client *c, rl_node *node, const rl_reply *r) {
    if (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS) return 0;
    char v[64];
    if (rl_nodecheck_info_field(r->str, "maxmemory", v, sizeof v) == 0 &&
        rl_nodecheck_info_field(r->str, "maxmemory_policy", node->maxmemory_policy,
                                                              sizeof node->maxmemory_policy) == 0) {
        long long mm = strtoll(v, NULL, 10); /* a broken server may say anything */
        node->maxmemory = mm > 0 ? mm : 0;
        rl_text_clean_inplace(node->maxmemory_policy, sizeof node->maxmemory_policy);
        node->checks_known |= RL_CHECK_MEMORY;
    }
    if (rl_nodecheck_info_field(r->str, "cluster_enabled", v, sizeof v) == 0) {
        node->in_cluster = strcmp(v, "0") != 0;
        node->checks_known |= RL_CHECK_CLUSTER;
    }
    char why[256];
    if (node->checks_known == RL_CHECK_ALL && !node->check_reported && rl_nodecheck_blocked(c, node, why, sizeof why)) {
        node->check_reported = 1;
        snprintf(node->last_error, sizeof node->last_error, "%.255s", why);
        return 1;
    }
    return 0;
}
