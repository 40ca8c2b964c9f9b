/* rl_nodecheck: the checks that rule out nodes which cannot keep locks
 * (see rl_nodecheck.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_nodecheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_acl.h"

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

/* Why node's user keeps it out: the commands it may not run, named, and
 * the ACL rules that let them (both cut to fit a reason). */
static void acl_refused(const rl_client *c, const rl_node *node, char *why, size_t whylen) {
    rl_acl_mask m = rl_acl_needed((int)c->set.fencing, (int)c->set.holder_info);
    const char *user = node->ep.username ? node->ep.username : "default";
    char names[80], rules[80];
    rl_acl_names(node->acl_missing & m, 0, 5, names, sizeof names);
    rl_acl_names(node->acl_missing & m, 1, 5, rules, sizeof rules);
    snprintf(why, whylen,
             "user %.32s may not run %s on the lock's keys (refused by its ACL, or renamed); "
             "its vote does not count (ACL SETUSER %.32s %s ~%.24s*)",
             user, names, user, rules, c->set.key_prefix);
}

int rl_nodecheck_blocked(const rl_client *c, const rl_node *node, char *why, size_t whylen) {
    const char *unfit = rl_client_node_unfit(c, node);
    if (!unfit) return 0;
    if (unfit[0] == 'r') {
        acl_refused(c, node, why, whylen);
        return 1;
    }
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

int rl_nodecheck_on_acl(rl_client *c, rl_node *node, const rl_reply *r) {
    int told;
    node->acl_missing = rl_acl_probe_missing(r, &told);
    const char *unfit = rl_client_node_unfit(c, node);
    if (!unfit || unfit[0] != 'r' || node->check_reported || node->auth_failed) return 0;
    node->check_reported = 1;
    acl_refused(c, node, node->last_error, sizeof node->last_error);
    return 1;
}
