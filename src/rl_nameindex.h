/* rl_nameindex: finds an item of an array by its name without scanning
 * the array. The array belongs to the caller, who tells the index of each
 * change (an item appended, an item removed by moving the last one into
 * its place, or anything else); the index keeps positions only and reads
 * names through the caller's accessor, so a name must not change while
 * its item is in the array. Below RL_NAMEINDEX_MIN items it only scans.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_NAMEINDEX_H
#define RL_NAMEINDEX_H

#include <stddef.h>
#include <stdint.h>

#define RL_NAMEINDEX_MIN 16

/* The name of items[i] (its length in *len). */
typedef const char *(*rl_nameindex_name_fn)(const void *items, int i, size_t *len);

/* Open addressing (slot: position + 1, 0 empty), at most a quarter full;
 * FNV-1a from a basis drawn at each build, mixed before the slot is taken
 * from it, so that a list of names chosen in advance is unlikely to make
 * the probes long. valid 0: not built, or dropped; built again on the next
 * lookup. Zero-initialise; free with rl_nameindex_free. */
typedef struct rl_nameindex {
    int *slot;
    size_t mask;
    uint32_t basis;
    int valid;
} rl_nameindex;

/* Position of the item named s (len bytes) among the n items, or -1. Builds
 * the table first when needed; scans when it cannot be allocated. */
int rl_nameindex_find(rl_nameindex *x, const void *items, int n, rl_nameindex_name_fn name, const char *s, size_t len);

/* items[n - 1] was just appended (n: the count now). */
void rl_nameindex_appended(rl_nameindex *x, const void *items, int n, rl_nameindex_name_fn name);

/* items[i] is about to go, items[n - 1] to move into its place (n: the
 * count before; i == n - 1: the last goes). Call before changing items.
 * A table far larger than the items left need is freed here (built again
 * at their size on the next lookup). */
void rl_nameindex_removing(rl_nameindex *x, const void *items, int n, rl_nameindex_name_fn name, int i);

/* The items changed some other way (cleared, compacted, reordered). */
void rl_nameindex_drop(rl_nameindex *x);

void rl_nameindex_free(rl_nameindex *x);

#endif
