/* rl_client_undo: the points a change of the node list can be undone to,
 * its start and the savepoints opened inside it (see rl_client.h). A copy
 * of the list is made lazily, at the first change after a point, so a
 * savepoint that sees no change of the list costs no copy, and putting the
 * list back never allocates (rl_client_nodes_restore cannot fail).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_client.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int rl_client_undo_start(rl_client_undo *u) {
    memset(u, 0, sizeof *u);
    u->p = calloc(4, sizeof *u->p);
    if (!u->p) return -1;
    u->cap = 4;
    u->p[0].level = -1;
    u->n = 1;
    u->join_level = INT_MAX;
    return 0;
}

/* The lowest point at level or above (at least from), or u->n. */
static int lowest_from(const rl_client_undo *u, int level, int from) {
    int j = from;
    while (j < u->n && u->p[j].level < level) j++;
    return j;
}

/* The first point from j up that holds a copy, or -1. */
static int first_saved(const rl_client_undo *u, int j) {
    for (; j < u->n; j++)
        if (u->p[j].saved) return j;
    return -1;
}

/* Frees the copies of points j and above except keep; n becomes j. */
static void drop_from(rl_client_undo *u, int j, int keep) {
    for (int k = j; k < u->n; k++)
        if (k != keep && u->p[k].saved) rl_client_nodes_free(&u->p[k].list);
    u->n = j;
}

void rl_client_undo_release(rl_client_undo *u, int level) {
    int j = lowest_from(u, level, 1); /* the start is never released */
    if (j >= u->n) return;
    int m = first_saved(u, j);
    /* The point below stood for the same list as j: if it had no copy, the
     * oldest copy above is now its own. */
    if (m >= 0 && !u->p[j - 1].saved) {
        u->p[j - 1].list = u->p[m].list;
        u->p[j - 1].tag = u->p[m].tag;
        u->p[j - 1].saved = 1;
        u->p[m].saved = 0;
    }
    drop_from(u, j, -1);
}

int rl_client_undo_mark(rl_client_undo *u, int level) {
    if (!u->p) return 0;
    rl_client_undo_release(u, level);
    if (u->n == u->cap) {
        rl_undo_point *p = realloc(u->p, (size_t)u->cap * 2 * sizeof *p);
        if (!p) {
            u->broken = 1;
            return -1;
        }
        u->p = p;
        u->cap *= 2;
    }
    memset(&u->p[u->n], 0, sizeof u->p[u->n]);
    u->p[u->n++].level = level;
    if (level < u->join_level) u->join_level = level;
    return 0;
}

int rl_client_undo_before_change(rl_client_undo *u, rl_client *c, int tag) {
    if (!u->p || u->broken) return -1;
    rl_undo_point *top = &u->p[u->n - 1];
    if (top->saved) return 0;
    if (rl_client_nodes_save(c, &top->list) != 0) return -1;
    top->saved = 1;
    top->tag = tag;
    return 0;
}

int rl_client_undo_back_to(rl_client_undo *u, rl_client *c, int level, int *tag) {
    if (!u->p) return 0;
    /* A savepoint opened before the table joined (the host names only
     * those opened after it) stands for the list at the start: the table
     * joined at its first change, so none came between. */
    int j = level < u->join_level ? 0 : lowest_from(u, level, 1);
    if (j >= u->n) return 0; /* opened after the last change: nothing to undo */
    int m = first_saved(u, j), restored = 0;
    if (m >= 0) {
        rl_client_nodes_restore(c, &u->p[m].list);
        *tag = u->p[m].tag;
        restored = 1;
    }
    /* Point j now stands for the list as it is: the savepoint at level
     * (which the host keeps open) is where a later rollback comes back to. */
    drop_from(u, j, -1);
    u->n = j + 1;
    u->p[j].saved = 0;
    if (j > 0) u->p[j].level = level;
    return restored;
}

int rl_client_undo_end(rl_client_undo *u, rl_client *c, int rollback, int *tag) {
    int restored = rollback ? rl_client_undo_back_to(u, c, -1, tag) : 0;
    drop_from(u, 0, -1);
    free(u->p);
    memset(u, 0, sizeof *u);
    return restored;
}
