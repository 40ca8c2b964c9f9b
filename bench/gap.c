/* gap: how long a client takes from a reply to its next request.
 *
 * Loaded with LD_PRELOAD into the driver (our extension in SQLite) or the
 * bare hiredis client, it wraps the socket calls both make (send and recv
 * for the extension, write and read for hiredis) and times the span from
 * the end of a read that returned reply bytes to the start of the next
 * write of a request. On one node every cycle has two such spans (after
 * the acquire's reply, after the release's), and nothing else runs in
 * them: it is the client's own time on the critical path, the part of a
 * cycle a faster client can shorten; the rest is the network and the
 * server. Both clients pay the same two clock reads per round trip here.
 *
 * Only spans that start with a reply count: of a round's writes to several
 * nodes only the first is timed, so the figure means most on one node.
 * Single-threaded use is assumed (the bench's cycles do all their I/O on
 * one thread).
 *
 * With GAP_FILE set, the process writes one JSON line there as it exits:
 * {"gaps": count, "gap_p50_us": median, "gap_mean_us": mean}. Without it,
 * it only passes the calls through.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define GAP_BUCKET_NS 10
#define GAP_BUCKETS 20000 /* spans of 200 us and more share the last bucket */
#define GAP_FDS 1024      /* descriptors above this are not looked at */

static uint32_t histogram[GAP_BUCKETS];
static uint64_t count, sum_ns;
static int64_t reply_end_ns; /* end of the last read of reply bytes; 0: none since the last request */
static unsigned char fd_kind[GAP_FDS]; /* 0 not looked at yet, 1 socket, 2 other */

static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_read)(int, void *, size_t);

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int is_socket(int fd) {
    if (fd < 0 || fd >= GAP_FDS) return 0;
    if (!fd_kind[fd]) {
        struct stat st;
        fd_kind[fd] = fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? 1 : 2;
    }
    return fd_kind[fd] == 1;
}

static void request_starts(int fd) {
    if (!reply_end_ns || !is_socket(fd)) return;
    int64_t span = now_ns() - reply_end_ns;
    reply_end_ns = 0;
    size_t b = span < 0 ? 0 : (size_t)(span / GAP_BUCKET_NS);
    histogram[b < GAP_BUCKETS ? b : GAP_BUCKETS - 1]++;
    count++;
    sum_ns += span < 0 ? 0 : (uint64_t)span;
}

static void reply_read(int fd, ssize_t n) {
    if (n > 0 && is_socket(fd)) reply_end_ns = now_ns();
}

/* A socket's descriptor may be reused for a file after close: forget it. */
int close(int fd) {
    static int (*real_close)(int);
    if (!real_close) real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
    if (fd >= 0 && fd < GAP_FDS) fd_kind[fd] = 0;
    return real_close(fd);
}

ssize_t send(int fd, const void *buf, size_t len, int flags) {
    if (!real_send) real_send = (ssize_t(*)(int, const void *, size_t, int))dlsym(RTLD_NEXT, "send");
    request_starts(fd);
    return real_send(fd, buf, len, flags);
}

ssize_t write(int fd, const void *buf, size_t len) {
    if (!real_write) real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    request_starts(fd);
    return real_write(fd, buf, len);
}

ssize_t recv(int fd, void *buf, size_t len, int flags) {
    if (!real_recv) real_recv = (ssize_t(*)(int, void *, size_t, int))dlsym(RTLD_NEXT, "recv");
    ssize_t n = real_recv(fd, buf, len, flags);
    reply_read(fd, n);
    return n;
}

ssize_t read(int fd, void *buf, size_t len) {
    if (!real_read) real_read = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    ssize_t n = real_read(fd, buf, len);
    reply_read(fd, n);
    return n;
}

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("GAP_FILE");
    if (!path || !count) return;
    uint64_t half = (count + 1) / 2, seen = 0;
    size_t b = 0;
    for (; b < GAP_BUCKETS; b++)
        if ((seen += histogram[b]) >= half) break;
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"gaps\": %llu, \"gap_p50_us\": %.3f, \"gap_mean_us\": %.3f}\n", (unsigned long long)count,
            ((double)b + 0.5) * GAP_BUCKET_NS / 1e3, (double)sum_ns / (double)count / 1e3);
    fclose(f);
}
