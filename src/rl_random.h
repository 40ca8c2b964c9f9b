/* rl_random: lock tokens and retry jitter from the kernel's CSPRNG
 * (getrandom(2)). Nothing here falls back to a weaker source: if the kernel
 * cannot give randomness, no token is made and no lock is taken.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_RANDOM_H
#define RL_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#define RL_TOKEN_BYTES 16                  /* 128 bits */
#define RL_TOKEN_LEN (RL_TOKEN_BYTES * 2)  /* as lowercase hex */

/* Writes a fresh token as RL_TOKEN_LEN hex characters plus a NUL into out.
 * Returns 0, or -1 when getrandom failed (out is then an empty string). */
int rl_token_new(char out[RL_TOKEN_LEN + 1]);

/* A uniformly random integer in [lo, hi] (lo <= hi); returns lo when the
 * kernel gives no randomness (only used for retry jitter). */
int64_t rl_random_between(int64_t lo, int64_t hi);

#endif
