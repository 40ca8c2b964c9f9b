/* rl_clock: the one clock every deadline and lock validity is measured on.
 * It is monotonic and keeps counting while the machine is suspended
 * (CLOCK_BOOTTIME), because Redis keeps expiring keys while we sleep.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef RL_CLOCK_H
#define RL_CLOCK_H

#include <stdint.h>

/* Microseconds since an arbitrary fixed point; never goes backwards. */
int64_t rl_now_us(void);

/* Milliseconds since the Unix epoch on the wall clock. Never used for a
 * deadline or a validity: only for the order of a fair queue (rl_queue.h),
 * which must be the same on every node and so comes from the waiter. */
int64_t rl_clock_wall_ms(void);

/* Sleeps for `us` microseconds (no-op when us <= 0). */
void rl_sleep_us(int64_t us);

#endif
