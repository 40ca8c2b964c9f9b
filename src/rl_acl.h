/* rl_acl: the commands the lock scripts (rl_scripts.h) run, in one list,
 * and the probe that asks a node, once per connection, which of them its
 * user may run. Redis checks each command a script calls against the ACL
 * of the user running the script, when the script calls it: a user who
 * may run SET but not TYPE takes a lock with SET and can never give it
 * back (the release script fails at its first line). The probe runs
 * redis.acl_check_cmd (Redis 7.0 and later) for every command of the list
 * in one script, so the connection knows before any vote of it counts.
 * Pure: it knows replies, not nodes (rl_nodecheck keeps the answer).
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_ACL_H
#define RL_ACL_H

#include <stddef.h>
#include <stdint.h>

#include "rl_resp.h"
#include "rl_scripts.h"

/* When a command of the list is needed. Optional ones are called with
 * redis.pcall and only cost a feature (EVALSHA: the scripts go in full;
 * PUBLISH, PUBSUB NUMSUB: waiters poll instead of being woken). */
enum { RL_ACL_ALWAYS = 1, RL_ACL_FENCING, RL_ACL_HOLDER, RL_ACL_OPTIONAL };

/* A mask of commands: bit i is command i of the list. */
typedef uint64_t rl_acl_mask;

/* The key the probe checks the commands on, after the key prefix: one of
 * the connections' holder-details keys (RL_CLIENT_DETAILS_TAG), which the
 * acquisitions with holder details write and extensions read, so a user
 * whose key patterns leave it out is told rather than left without them. */
#define RL_ACL_PROBE_KEY RL_CLIENT_DETAILS_TAG "acl-probe"

/* The probe's script, for EVAL with 0 keys and the key prefix followed by
 * RL_ACL_PROBE_KEY as its one argument: an array with 1 for each command
 * of the list the user may run on that key and 0 for the others (refused
 * by the user's commands or key patterns; a command the server does not
 * know, renamed away, too); 0 where the server has no
 * redis.acl_check_cmd. */
const char *rl_acl_probe_script(size_t *len);

/* The commands reply r (to the probe's EVAL) says the user may not run;
 * *known is 1 when r tells (the probe's answer, or EVAL itself refused or
 * unknown), 0 when it does not (an older server, any other error: nothing
 * is known missing then). */
rl_acl_mask rl_acl_probe_missing(const rl_reply *r, int *known);

/* The commands needed under the settings fencing and holder_info. */
rl_acl_mask rl_acl_needed(int fencing, int holder_info);

/* The names of mask's commands, upper case, separated by sep ("TYPE, ZSCORE";
 * with plus set, as ACL rules: "+type +zscore"), into buf; at most max of
 * them, then " and N more". Returns the bytes written. */
size_t rl_acl_names(rl_acl_mask mask, int plus, size_t max, char *buf, size_t buflen);

/* How many commands the list has; command i's name in lower case, words
 * separated by a space ("pubsub numsub"), and when it is needed. */
int rl_acl_count(void);
const char *rl_acl_command(int i, int *need);

#endif
