/* rl_proc: which process this is, and memory that a forked child never
 * inherits, without a system call on every question. Both rest on one
 * kernel feature, MADV_WIPEONFORK (Linux 4.14): a page so marked reads as
 * zeros in a child created by any fork. Where the kernel lacks it, every
 * answer falls back to a system call and nothing is cached.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_PROC_H
#define RL_PROC_H

#include <stddef.h>
#include <sys/types.h>

/* getpid(), answered from memory after the first call of each process. */
pid_t rl_proc_pid(void);

/* A zeroed page-aligned block of len bytes that reads as zeros again in
 * every child after fork(), or NULL where the kernel cannot do that. It is
 * never freed: one per module, for the life of the process, since the
 * library is linked never to be unloaded (-z nodelete, see the Makefile). */
void *rl_proc_wiped_on_fork(size_t len);

#endif
