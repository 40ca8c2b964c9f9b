/* rl_settings: the named settings of a client, with their types, ranges and
 * defaults, read and written by name (redlock_config in SQL).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_SETTINGS_H
#define RL_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "rl_error.h"
#include "rl_client.h"

enum { RL_SETTING_INT, RL_SETTING_REAL, RL_SETTING_TEXT };

typedef struct rl_setting_value {
    int type;
    int64_t i;
    double r;
    char *text;  /* TEXT: owned by whoever filled it (rl_setting_get mallocs) */
    const char *got; /* type -1: what was given instead, e.g. "text" (for the error) */
} rl_setting_value;

/* Reads setting name into *out; for TEXT, out->text is malloc'ed and the
 * caller frees it. Returns 0, or -1 with a message in err. Takes c->mu. */
int rl_setting_get(rl_client *c, const char *name, rl_setting_value *out, rl_error *err);

/* Sets setting name from *in (in->type must match the setting's type).
 * Returns 0, or -1 with a message in err saying what is allowed. */
int rl_setting_set(rl_client *c, const char *name, const rl_setting_value *in, rl_error *err);

/* The type of setting name, or -1 when there is none. */
int rl_setting_type(const char *name);

#endif
