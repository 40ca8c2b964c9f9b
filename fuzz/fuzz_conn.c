/* fuzz_conn: arbitrary bytes from the server side of a socket pair into an
 * rl_conn that has a fuzzed number of commands outstanding: rl_conn_progress
 * reads them, rl_conn_next_reply hands out replies matched to their tags in
 * order. A reply nobody asked for, or a protocol error, must break the
 * connection (and never hand out a reply with the wrong tag).
 * SPDX-License-Identifier: BSD-3-Clause */
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "rl_client.h"
#include "rl_conn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_in in = {data, size};
    int sv[2];
    FUZZ_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
    rl_conn *c = calloc(1, sizeof *c);
    FUZZ_CHECK(c, "calloc");
    c->fd = sv[0];
    c->reader = rl_reader_new();
    FUZZ_CHECK(c->reader, "reader");

    /* Up to 15 commands outstanding, tagged 1..n. */
    unsigned outstanding = fuzz_byte(&in) % 16;
    for (unsigned i = 0; i < outstanding; i++) {
        const char *argv[3] = {"SET", "k", "v"};
        size_t lens[3] = {3, 1, 1};
        rl_tag tag = {.op = i + 1, .kind = RL_K_ACQUIRE, .deadline_us = 0};
        FUZZ_CHECK(rl_conn_send(c, &tag, 3, argv, lens) == 0, "send: %s", c->err.msg);
    }
    size_t chunk = fuzz_byte(&in) % 32;
    /* At most ~64 writes per input: syscalls, not parsing, would cost the time. */
    if (chunk && in.n / chunk > 64) chunk = in.n / 64 + 1;
    uint64_t expect = 1;
    int broken = 0;
    char sink[4096];
    while (in.n && !broken) {
        size_t got;
        const uint8_t *p = fuzz_bytes(&in, chunk ? chunk : in.n, &got);
        FUZZ_CHECK(write(sv[1], p, got) == (ssize_t)got, "write");
        while (read(sv[1], sink, sizeof sink) > 0) {
        }
        if (rl_conn_progress(c, POLLIN) != 0) broken = 1;
        for (;;) {
            rl_tag tag;
            rl_reply *r;
            int rc = rl_conn_next_reply(c, &tag, &r);
            if (rc == 1) {
                FUZZ_CHECK(r != NULL, "reply");
                FUZZ_CHECK(tag.op == expect, "reply matched to command %llu, expected %llu", (unsigned long long)tag.op,
                           (unsigned long long)expect);
                FUZZ_CHECK(expect <= outstanding, "more replies than commands");
                expect++;
                rl_reply_free(r);
                continue;
            }
            FUZZ_CHECK(r == NULL, "reply handed out with rc %d", rc);
            if (rc < 0) {
                FUZZ_CHECK(c->broken && c->err.msg[0] && c->err.kind != RL_ERR_NONE, "failed without breaking the connection");
                broken = 1;
            }
            break;
        }
        if (c->broken) FUZZ_CHECK(rl_conn_events(c) == 0, "a broken connection still wants events");
    }
    close(sv[1]);
    rl_conn_close(c);
    return 0;
}
