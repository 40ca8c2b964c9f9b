/* floor: the least a lock client inside SQLite can cost, for the bench's
 * "time from a reply to the next request" rows (see bench/gap.c).
 *
 * A loadable extension that stands in for redlock.so under `driver cycles`:
 * redlock_acquire(name, ttl) and redlock_release(name, token) each make one
 * PING round trip to the first node of REDLOCK_NODES over a blocking socket
 * (a 32-character token is returned, 1 for a release), and
 * redlock_config(name, value) returns value. No lock is taken: what it
 * measures is SQLite's own share of the span between two calls, the part no
 * extension can remove, with almost nothing of a client's own added. Only
 * "redis://host:port" with a numeric IPv4 host is understood.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int node_fd = -1; /* the one connection, opened by the first call */

/* Connects to host:port of the first URL in REDLOCK_NODES. */
static int connect_first_node(void) {
    const char *urls = getenv("REDLOCK_NODES");
    char host[64];
    unsigned port = 0;
    if (!urls || sscanf(urls, "redis://%63[0-9.]:%u", host, &port) != 2 || port == 0 || port > 65535) return -1;
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One PING and its "+PONG\r\n" (7 bytes, read whole). */
static int ping(void) {
    static const char cmd[] = "*1\r\n$4\r\nPING\r\n";
    char reply[16];
    size_t got = 0;
    if (node_fd < 0 && (node_fd = connect_first_node()) < 0) return -1;
    if (send(node_fd, cmd, sizeof cmd - 1, MSG_NOSIGNAL) != (ssize_t)(sizeof cmd - 1)) return -1;
    while (got < 7) {
        ssize_t n = recv(node_fd, reply + got, sizeof reply - got, 0);
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    return memcmp(reply, "+PONG\r\n", 7) == 0 ? 0 : -1;
}

static void fn_acquire(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc, (void)argv;
    if (ping() != 0) sqlite3_result_error(ctx, "floor: no PONG from the first node", -1);
    else sqlite3_result_text(ctx, "00000000000000000000000000000000", 32, SQLITE_TRANSIENT);
}

static void fn_release(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc, (void)argv;
    if (ping() != 0) sqlite3_result_error(ctx, "floor: no PONG from the first node", -1);
    else sqlite3_result_int(ctx, 1);
}

static void fn_config(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    (void)argc;
    sqlite3_result_value(ctx, argv[1]);
}

int sqlite3_redlock_init(sqlite3 *db, char **err, const sqlite3_api_routines *api);
int sqlite3_redlock_init(sqlite3 *db, char **err, const sqlite3_api_routines *api) {
    (void)err;
    SQLITE_EXTENSION_INIT2(api);
    int rc = sqlite3_create_function(db, "redlock_acquire", 2, SQLITE_UTF8, NULL, fn_acquire, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_create_function(db, "redlock_release", 2, SQLITE_UTF8, NULL, fn_release, NULL, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_create_function(db, "redlock_config", 2, SQLITE_UTF8, NULL, fn_config, NULL, NULL);
    return rc;
}
