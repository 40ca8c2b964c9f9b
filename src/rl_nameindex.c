/* rl_nameindex: a position index by name over a caller's array (see
 * rl_nameindex.h). Linear probing, so a removal shifts the entries after
 * it back instead of leaving tombstones.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_nameindex.h"

#include <stdlib.h>
#include <string.h>

#include "rl_random.h"

/* FNV-1a from the basis, then mixed (MurmurHash3's finaliser) before the
 * low bits are taken: FNV's low bits alone depend only on the low bits of
 * each byte, so names that differ in high bits only would share a slot
 * whatever the basis. */
static size_t home(const rl_nameindex *x, const char *s, size_t len) {
    uint32_t h = x->basis;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h & x->mask;
}

static size_t home_of(const rl_nameindex *x, const void *items, rl_nameindex_name_fn name, int i) {
    size_t len;
    const char *s = name(items, i, &len);
    return home(x, s, len);
}

static void put(rl_nameindex *x, const void *items, rl_nameindex_name_fn name, int i) {
    size_t at = home_of(x, items, name, i);
    while (x->slot[at]) at = (at + 1) & x->mask;
    x->slot[at] = i + 1;
}

/* A table for n items (and room to grow to twice that); 0, or -1 on OOM
 * (then not valid). */
static int build(rl_nameindex *x, const void *items, int n, rl_nameindex_name_fn name) {
    size_t slots = 64;
    while (slots < 8 * (size_t)n) slots *= 2;
    free(x->slot);
    x->slot = calloc(slots, sizeof *x->slot);
    x->valid = 0;
    if (!x->slot) return -1;
    x->mask = slots - 1;
    x->basis = 2166136261u ^ (uint32_t)rl_random_between(0, INT32_MAX);
    for (int i = 0; i < n; i++) put(x, items, name, i);
    x->valid = 1;
    return 0;
}

static int scan(const void *items, int n, rl_nameindex_name_fn name, const char *s, size_t len) {
    for (int i = 0; i < n; i++) {
        size_t l;
        const char *t = name(items, i, &l);
        if (l == len && memcmp(t, s, len) == 0) return i;
    }
    return -1;
}

int rl_nameindex_find(rl_nameindex *x, const void *items, int n, rl_nameindex_name_fn name, const char *s, size_t len) {
    if (n < RL_NAMEINDEX_MIN) return scan(items, n, name, s, len);
    if (!x->valid && build(x, items, n, name) != 0) return scan(items, n, name, s, len);
    for (size_t at = home(x, s, len); x->slot[at]; at = (at + 1) & x->mask) {
        int i = x->slot[at] - 1;
        if (i >= n) { /* a removal it was not told of: never read past the items */
            x->valid = 0;
            return scan(items, n, name, s, len);
        }
        size_t l;
        const char *t = name(items, i, &l);
        if (l == len && memcmp(t, s, len) == 0) return i;
    }
    return -1;
}

void rl_nameindex_appended(rl_nameindex *x, const void *items, int n, rl_nameindex_name_fn name) {
    if (!x->valid) return;
    if ((size_t)n * 4 > x->mask + 1) { /* over a quarter full: built again, larger, when next needed */
        x->valid = 0;
        return;
    }
    put(x, items, name, n - 1);
}

/* The slot holding position i, or SIZE_MAX when the table does not have
 * it (a change it was not told of: the caller then drops it rather than
 * trust it). */
static size_t slot_of(const rl_nameindex *x, const void *items, rl_nameindex_name_fn name, int i) {
    for (size_t at = home_of(x, items, name, i); x->slot[at]; at = (at + 1) & x->mask)
        if (x->slot[at] == i + 1) return at;
    return SIZE_MAX;
}

void rl_nameindex_removing(rl_nameindex *x, const void *items, int n, rl_nameindex_name_fn name, int i) {
    if (!x->valid) return;
    if (x->mask + 1 > 64 && (size_t)(n - 1) * 32 < x->mask + 1) {
        /* Under 1/32 full once i goes (built at 1/8 at most): freed, and
         * built again at the size then needed, so a connection that once
         * held many locks does not keep their table. */
        free(x->slot);
        x->slot = NULL;
        x->valid = 0;
        return;
    }
    size_t gap = slot_of(x, items, name, i);
    if (gap == SIZE_MAX) {
        x->valid = 0;
        return;
    }
    x->slot[gap] = 0;
    /* Shift back each entry after the gap whose home is not between the
     * gap and where it sits, so no probe for it stops at the gap. */
    for (size_t at = (gap + 1) & x->mask; x->slot[at]; at = (at + 1) & x->mask) {
        if (x->slot[at] > n) { /* as in rl_nameindex_find */
            x->valid = 0;
            return;
        }
        size_t h = home_of(x, items, name, x->slot[at] - 1);
        int stays = gap < at ? (h > gap && h <= at) : (h > gap || h <= at);
        if (stays) continue;
        x->slot[gap] = x->slot[at];
        x->slot[at] = 0;
        gap = at;
    }
    if (i == n - 1) return;
    size_t last = slot_of(x, items, name, n - 1);
    if (last == SIZE_MAX) x->valid = 0;
    else x->slot[last] = i + 1;
}

void rl_nameindex_drop(rl_nameindex *x) {
    x->valid = 0;
}

void rl_nameindex_free(rl_nameindex *x) {
    free(x->slot);
    memset(x, 0, sizeof *x);
}
