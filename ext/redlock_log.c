/* redlock_log: engine events to sqlite3_log (see redlock_log.h). The
 * callback may run on the auto-extension thread; sqlite3_log is safe to
 * call from any thread and never calls back into the extension.
 * SPDX-License-Identifier: BSD-3-Clause */
#include "redlock_log.h"

#include <string.h>

#include "rl_text.h"

SQLITE_EXTENSION_INIT3

static void on_event(void *ctx, const rl_event *ev) {
    (void)ctx;
    int code;
    switch (ev->kind) {
    case RL_EVENT_NODE_DOWN: code = REDLOCK_LOG_NODE_DOWN; break;
    case RL_EVENT_NODE_UP: code = REDLOCK_LOG_NODE_UP; break;
    case RL_EVENT_LOCK_LOST: code = REDLOCK_LOG_LOCK_LOST; break;
    case RL_EVENT_NO_QUORUM: code = REDLOCK_LOG_NO_QUORUM; break;
    case RL_EVENT_NODE_REFUSED: code = REDLOCK_LOG_NODE_REFUSED; break;
    case RL_EVENT_EXTEND_FAILED: code = REDLOCK_LOG_EXTEND_FAILED; break;
    case RL_EVENT_LOCK_EXPIRED: code = REDLOCK_LOG_LOCK_EXPIRED; break;
    default: return;
    }
    /* sqlite3_log formats into a buffer of 210 bytes and cuts what does
     * not fit, maybe inside a character: cut it first, whole characters. */
    char line[REDLOCK_LOG_MAX + 4];
    sqlite3_log(code, "%s", rl_text_excerpt(line, sizeof line, ev->msg, strlen(ev->msg), REDLOCK_LOG_MAX));
}

void redlock_log_install(rl_client *c) { rl_client_set_events(c, on_event, NULL); }
