/* fuzz_url: rl_endpoint_parse_url on arbitrary bytes.
 *
 * Invariants: a refusal leaves the endpoint cleared and gives a message that
 * repeats nothing of the input; an accepted URL passes rl_endpoint_check;
 * the URL shown back (rl_endpoint_format_url) never depends on the password
 * and parses again to the same host, port, db, user name and TLS options;
 * copies are exact.
 * SPDX-License-Identifier: BSD-3-Clause */
#include <string.h>

#include "fuzz_common.h"
#include "rl_endpoint.h"

static int same_opt(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rl_error e, again_e;
    char *err = e.msg, *again_err = again_e.msg;
    rl_endpoint ep, again, copy;
    memset(err, 'x', sizeof e.msg);
    int rc = rl_endpoint_parse_url((const char *)data, size, &ep, &e);
    if (rc != 0) {
        FUZZ_CHECK(rc == -1, "rc %d", rc);
        FUZZ_CHECK(!ep.host && !ep.username && !ep.password, "a refused URL left strings behind");
        FUZZ_CHECK(memchr(err, '\0', sizeof e.msg) && err[0] && e.kind != RL_ERR_NONE, "no message");
        for (const char *p = err; *p; p++)
            FUZZ_CHECK(*p >= 32 && *p < 127, "unprintable byte in the message '%s'", err);
        return 0;
    }
    FUZZ_CHECK(ep.host && ep.host[0] && strlen(ep.host) <= RL_HOST_MAX, "host");
    FUZZ_CHECK(ep.port >= 1 && ep.port <= 65535, "port %d", ep.port);
    FUZZ_CHECK(ep.db >= 0 && ep.db <= RL_DB_MAX, "db %d", ep.db);
    FUZZ_CHECK(ep.timeout_ms >= 0 && ep.timeout_ms <= RL_TIMEOUT_MAX_MS, "timeout %d", ep.timeout_ms);
    FUZZ_CHECK(rl_endpoint_check(&ep, &e) == 0, "a parsed URL fails rl_endpoint_check: %s", err);

    /* The URL shown back must not depend on the password's value. */
    char shown[4 * RL_URL_MAX], shown_other[4 * RL_URL_MAX];
    rl_endpoint_format_url(&ep, shown, sizeof shown);
    char *real_pw = ep.password;
    if (real_pw) {
        ep.password = "x";
        rl_endpoint_format_url(&ep, shown_other, sizeof shown_other);
        ep.password = real_pw;
        FUZZ_CHECK(strcmp(shown, shown_other) == 0, "the shown URL depends on the password: '%s' vs '%s'", shown,
                   shown_other);
    }

    /* And it reads back as the same node. */
    rc = rl_endpoint_parse_url(shown, strlen(shown), &again, &again_e);
    FUZZ_CHECK(rc == 0, "the shown URL '%s' does not parse: %s", shown, again_err);
    FUZZ_CHECK(strcmp(again.host, ep.host) == 0, "host '%s' -> '%s'", ep.host, again.host);
    FUZZ_CHECK(again.port == ep.port && again.db == ep.db, "port/db %d/%d -> %d/%d", ep.port, ep.db, again.port,
               again.db);
    FUZZ_CHECK(same_opt(again.username, ep.username), "user name '%s' -> '%s' (shown as '%s')",
               ep.username ? ep.username : "(null)", again.username ? again.username : "(null)", shown);
    FUZZ_CHECK(!again.password == !ep.password, "password presence changed (shown as '%s')", shown);
    const rl_tls_opts *o = &ep.tls_opts, *a = &again.tls_opts;
    FUZZ_CHECK(again.tls == ep.tls && a->verify == o->verify && same_opt(a->ca_file, o->ca_file) &&
                   same_opt(a->ca_dir, o->ca_dir) && same_opt(a->cert_file, o->cert_file) &&
                   same_opt(a->key_file, o->key_file),
               "TLS options changed (shown as '%s')", shown);
    rl_endpoint_clear(&again);

    FUZZ_CHECK(rl_endpoint_copy(&copy, &ep) == 0, "copy");
    FUZZ_CHECK(strcmp(copy.host, ep.host) == 0 && same_opt(copy.username, ep.username) &&
                   same_opt(copy.password, ep.password) && copy.port == ep.port && copy.db == ep.db &&
                   copy.timeout_ms == ep.timeout_ms,
               "copy differs");
    rl_endpoint_clear(&copy);
    rl_endpoint_clear(&ep);
    FUZZ_CHECK(!ep.host && !ep.username && !ep.password, "clear");
    return 0;
}
