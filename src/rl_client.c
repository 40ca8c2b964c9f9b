/* rl_client: the node list, its settings and its life cycle (see rl_client.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_client.h"

#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rl_clock.h"
#include "rl_round.h"

rl_client *rl_client_new(void) {
    rl_client *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->set.key_prefix = calloc(1, 1);
    if (!c->set.key_prefix || pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c->set.key_prefix);
        free(c);
        return NULL;
    }
    c->set.timeout_ms = 50;
    c->set.retry_delay_ms = 200;
    c->set.retry_jitter_ms = 100;
    c->set.drift_factor = 0.01;
    c->set.fencing = 1;
    c->set.fence_ttl_ms = 7LL * 24 * 3600 * 1000;
    c->set.reconnect_min_ms = 100;
    c->set.reconnect_max_ms = 5000;
    c->next_id = 1;
    return c;
}

/* Gives cleanups still unsent on stalled connections a bounded chance to
 * leave (at most one node timeout: the node may be hung). Replies owed on
 * active connections were settled already (rl_client_settle). */
static void flush_stale(rl_client *c) {
    int64_t deadline = 0;
    for (;;) {
        struct pollfd pfd[64];
        rl_conn *who[64];
        int k = 0;
        int64_t now = rl_now_us();
        for (int i = 0; i < c->n && k < 64; i++) {
            rl_conn *cn = c->nodes[i]->stale;
            if (!cn || !(rl_conn_events(cn) & POLLOUT)) continue;
            if (!deadline) deadline = now + rl_node_timeout_us(c, c->nodes[i]);
            pfd[k] = (struct pollfd){.fd = cn->fd, .events = POLLOUT};
            who[k++] = cn;
        }
        if (k == 0 || now >= deadline) return;
        if (poll(pfd, (nfds_t)k, (int)((deadline - now + 999) / 1000)) <= 0) return;
        for (int i = 0; i < k; i++)
            if (pfd[i].revents) rl_conn_progress(who[i], pfd[i].revents);
    }
}

static void node_free(rl_node *node) {
    if (!node) return;
    rl_conn_close(node->conn);
    rl_conn_close(node->stale);
    rl_conn_close(node->sub);
    rl_endpoint_clear(&node->ep);
    free(node);
}

void rl_client_free(rl_client *c) {
    if (!c) return;
    rl_client_settle(c); /* late replies still act (fence write-backs), bounded */
    pthread_mutex_lock(&c->mu);
    flush_stale(c);
    for (int i = 0; i < c->n; i++) node_free(c->nodes[i]);
    free(c->nodes);
    for (int i = 0; i < RL_RECENT_FENCED; i++) free(c->recent_fenced[i].fkey);
    free(c->set.key_prefix);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Resolves ep->host once, now, so no DNS lookup ever runs on the lock path. */
static int resolve(const rl_endpoint *ep, struct sockaddr_storage *addr, socklen_t *len, char *err, size_t errlen) {
    struct addrinfo hints = {0}, *res = NULL;
    char port[16];
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_family = AF_UNSPEC;
    snprintf(port, sizeof port, "%d", ep->port);
    int rc = getaddrinfo(ep->host, port, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", ep->host, gai_strerror(rc));
        return -1;
    }
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static int find_index(const rl_client *c, int64_t id) {
    for (int i = 0; i < c->n; i++)
        if (c->nodes[i]->id == id) return i;
    return -1;
}

static int same_target(const rl_endpoint *a, const rl_endpoint *b) {
    return a->port == b->port && a->db == b->db && strcmp(a->host, b->host) == 0;
}

int64_t rl_client_add_node(rl_client *c, const rl_endpoint *ep, int64_t id, char *err, size_t errlen) {
    if (rl_endpoint_check(ep, err, errlen) != 0) return -1;
    rl_node *node = calloc(1, sizeof *node);
    if (!node) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (resolve(ep, &node->addr, &node->addrlen, err, errlen) != 0) {
        free(node);
        return -1;
    }
    if (rl_endpoint_copy(&node->ep, ep) != 0) {
        free(node);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    int64_t rc = -1;
    if (id > 0 && find_index(c, id) >= 0) {
        snprintf(err, errlen, "a node with id %lld exists already", (long long)id);
        goto out;
    }
    for (int i = 0; i < c->n; i++)
        if (same_target(&c->nodes[i]->ep, ep)) {
            snprintf(err, errlen, "node %s:%d/%d is listed already (node %lld); each node must be listed once",
                     ep->host, ep->port, ep->db, (long long)c->nodes[i]->id);
            goto out;
        }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 8;
        rl_node **nn = realloc(c->nodes, (size_t)cap * sizeof *nn);
        if (!nn) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        c->nodes = nn;
        c->cap = cap;
    }
    node->id = id > 0 ? id : c->next_id;
    if (node->id >= c->next_id) c->next_id = node->id + 1;
    c->nodes[c->n++] = node;
    rc = node->id;
    node = NULL;
out:
    pthread_mutex_unlock(&c->mu);
    node_free(node);
    return rc;
}

int rl_client_update_node(rl_client *c, int64_t id, const rl_endpoint *ep, char *err, size_t errlen) {
    if (rl_endpoint_check(ep, err, errlen) != 0) return -1;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    rl_endpoint copy;
    if (resolve(ep, &addr, &addrlen, err, errlen) != 0) return -1;
    if (rl_endpoint_copy(&copy, ep) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    int i = find_index(c, id), rc = -1;
    if (i < 0) {
        snprintf(err, errlen, "no node with id %lld", (long long)id);
        goto out;
    }
    for (int j = 0; j < c->n; j++)
        if (j != i && same_target(&c->nodes[j]->ep, ep)) {
            snprintf(err, errlen, "node %s:%d/%d is listed already (node %lld); each node must be listed once",
                     ep->host, ep->port, ep->db, (long long)c->nodes[j]->id);
            goto out;
        }
    rl_node *node = c->nodes[i];
    rl_conn_close(node->conn);
    rl_conn_close(node->stale);
    rl_conn_close(node->sub);
    rl_endpoint_clear(&node->ep);
    int64_t nid = node->id;
    memset(node, 0, sizeof *node);
    node->id = nid;
    node->ep = copy;
    node->addr = addr;
    node->addrlen = addrlen;
    memset(&copy, 0, sizeof copy);
    rc = 0;
out:
    pthread_mutex_unlock(&c->mu);
    rl_endpoint_clear(&copy);
    return rc;
}

int rl_client_remove_node(rl_client *c, int64_t id) {
    pthread_mutex_lock(&c->mu);
    int i = find_index(c, id);
    if (i >= 0) {
        node_free(c->nodes[i]);
        memmove(&c->nodes[i], &c->nodes[i + 1], (size_t)(c->n - i - 1) * sizeof *c->nodes);
        c->n--;
        for (int j = 0; j < c->n; j++)
            if (c->nodes[j]->duplicate_of == id) c->nodes[j]->duplicate_of = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return i >= 0 ? 0 : -1;
}

static const char *state_name(const rl_node *node, int64_t now) {
    if (node->health == RL_HEALTH_DOWN) return "down";
    if (node->duplicate_of) return "duplicate";
    if (node->is_replica) return "replica";
    if (node->guard_until_us > now) return "restarting";
    if (node->health == RL_HEALTH_IDLE) return "idle";
    return "up";
}

int rl_client_node_view(rl_client *c, int i, rl_node_view *out) {
    int rc = -1;
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&c->mu);
    if (i >= 0 && i < c->n) {
        rl_node *node = c->nodes[i];
        if (rl_endpoint_copy(&out->ep, &node->ep) == 0) {
            out->id = node->id;
            out->timeout_ms = rl_node_timeout_us(c, node) / 1000;
            out->state = state_name(node, rl_now_us());
            snprintf(out->last_error, sizeof out->last_error, "%s", node->last_error);
            rc = 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int rl_client_node_count(rl_client *c) {
    pthread_mutex_lock(&c->mu);
    int n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}

void rl_client_forget_after_fork(rl_client *c) {
    pthread_mutex_init(&c->mu, NULL);
    for (int i = 0; i < c->n; i++) {
        rl_node *node = c->nodes[i];
        /* close() of a copied descriptor sends nothing: the parent's stays open. */
        rl_conn_close(node->conn);
        rl_conn_close(node->stale);
        rl_conn_close(node->sub);
        node->conn = node->stale = node->sub = NULL;
        node->sub_ready = 0;
        node->health = RL_HEALTH_IDLE;
        node->retry_at_us = node->backoff_ms = 0;
    }
}

int64_t rl_node_timeout_us(const rl_client *c, const rl_node *n) {
    return (n->ep.timeout_ms > 0 ? n->ep.timeout_ms : c->set.timeout_ms) * 1000;
}

int rl_client_quorum(const rl_client *c) {
    if (c->set.unsafe_test_quorum > 0) return (int)c->set.unsafe_test_quorum;
    return c->n / 2 + 1;
}
