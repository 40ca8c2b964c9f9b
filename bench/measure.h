/* measure.h: the clock, CPU-time and sorting helpers shared by bench/bare.c
 * (the bare hiredis baseline) and bench/driver.c (redlock through SQLite),
 * so both sides of every ratio in the table are measured the same way.
 * SPDX-License-Identifier: BSD-3-Clause */
#ifndef BENCH_MEASURE_H
#define BENCH_MEASURE_H

#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC (shared by every process of one run). */
static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* User plus system CPU time of this process, in microseconds. */
static inline double cpu_us(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* CPU this process has spent in user space, in microseconds: with cpu_us()
 * it splits a client's cost into its own code and the kernel's. */
static inline double user_cpu_us(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec * 1e6 + (double)ru.ru_utime.tv_usec;
}

/* qsort comparator for int64_t, for the latency percentiles. */
static inline int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

#endif
