/* rl_evalsha: the scripts of every lock cycle sent by their SHA1 digest
 * (EVALSHA) to a node known to have them cached, instead of in full.
 *
 * A script sent in full costs the node a SHA1 of its text and both sides
 * its bytes on every call. Redis caches a script once EVAL ran it, so after
 * a good answer to an EVAL on a connection the next calls of that script
 * there go by digest. A node that answers NOSCRIPT (SCRIPT FLUSH, a restart
 * behind a proxy, a cache that evicts) gets that command again in full on
 * the same connection, and EVAL from then on until it answers one again
 * (rl_round.c): the command never ran, so sending it again is safe. A user
 * refused EVALSHA itself gets the same, and EVAL for the rest of that
 * connection.
 * Other commands (cleanups, many names) always go in full.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_EVALSHA_H
#define RL_EVALSHA_H

#include <stddef.h>

/* How many scripts go by digest; their index is below this. */
#define RL_EVALSHA_SCRIPTS 6

/* The index (0 ..) of the script whose text is s (len bytes) among those
 * sent by digest, or -1. */
int rl_evalsha_index(const char *s, size_t len);

/* The text of script i (its length in *len). */
const char *rl_evalsha_script(int i, size_t *len);

/* The 40 hex digits of script i's SHA1, or NULL when it could not be
 * computed (then the script always goes in full). */
const char *rl_evalsha_digest(int i);

/* What the error text (len bytes) an EVALSHA got says of it. */
enum {
    RL_EVALSHA_RAN = 0,     /* an error raised inside the script: it may have done part of its work */
    RL_EVALSHA_NOSCRIPT,    /* did not run: the node lacks the script */
    RL_EVALSHA_REFUSED,     /* did not run: NOPERM for the EVALSHA command itself (EVAL allowed), or
                             * no such command (renamed away, a server or proxy without it) */
};
int rl_evalsha_not_run(const char *text, size_t len);

#endif
