/* rl_random: lock tokens and retry jitter from the kernel's CSPRNG
 * (getrandom(2)). Nothing here falls back to a weaker source: if the kernel
 * cannot give randomness, no token is made and no lock is taken.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_RANDOM_H
#define RL_RANDOM_H

#include <stddef.h>
#include <stdint.h>

#define RL_TOKEN_BYTES 16                  /* 128 random bits: the secret of a token */
/* A token is RL_TOKEN_LEN lowercase hex characters: a public part of
 * RL_TOKEN_PUBLIC_LEN (the holder-details id of the connection that took
 * the lock, a digit that says whether it was a set of names, and the time
 * it took it, rl_lock_holder.c), then the secret. */
#define RL_TOKEN_ID_LEN 16                 /* the holder-details id: 64 random bits */
#define RL_TOKEN_SINCE_LEN 11              /* Unix ms of the acquisition (44 bits: to the year 2527) */
#define RL_TOKEN_PUBLIC_LEN (RL_TOKEN_ID_LEN + 1 + RL_TOKEN_SINCE_LEN)
#define RL_TOKEN_LEN (RL_TOKEN_PUBLIC_LEN + RL_TOKEN_BYTES * 2)

/* Writes a fresh token into out: the RL_TOKEN_PUBLIC_LEN characters of
 * pub, then RL_TOKEN_BYTES random bytes as hex, and a NUL. Returns 0, or
 * -1 when getrandom failed (out is then an empty string). */
int rl_token_new(char out[RL_TOKEN_LEN + 1], const char *pub);

/* n random bytes as 2n lowercase hex characters into out (no NUL), from
 * getrandom itself. Returns 0, or -1 when the kernel gave none. */
int rl_random_hex(char *out, size_t n);

/* A uniformly random integer in [lo, hi] (lo <= hi); returns lo when the
 * kernel gives no randomness (only used for retry jitter). */
int64_t rl_random_between(int64_t lo, int64_t hi);

#endif
