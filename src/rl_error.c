/* rl_error: setting an error's kind and message (see rl_error.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_error.h"

#include <stdarg.h>
#include <stdio.h>

int rl_error_set(rl_error *e, rl_error_kind kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    e->kind = kind;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void rl_error_clear(rl_error *e) {
    e->kind = RL_ERR_NONE;
    e->msg[0] = '\0';
}
