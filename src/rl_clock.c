/* rl_clock: monotonic time for deadlines and validity (see rl_clock.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_clock.h"

#include <errno.h>
#include <time.h>

int64_t rl_now_us(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0) clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t rl_clock_wall_ms(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void rl_sleep_us(int64_t us) {
    if (us <= 0) return;
    struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}
