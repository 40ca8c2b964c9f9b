/* rl_proc: the process's id without a system call per question, and
 * memory wiped in forked children (see rl_proc.h).
 * SPDX-License-Identifier: BSD-3-Clause */
#include "rl_proc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

void *rl_proc_wiped_on_fork(size_t len) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (madvise(p, len, MADV_WIPEONFORK) != 0) {
        munmap(p, len);
        return NULL;
    }
    return p;
}

/* The cached id: 0 in a fresh process and, the page being wiped, in every
 * forked child, which then asks the kernel once. */
static _Atomic pid_t *cached;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void setup(void) { cached = rl_proc_wiped_on_fork((size_t)sysconf(_SC_PAGESIZE)); }

pid_t rl_proc_pid(void) {
    pthread_once(&once, setup);
    if (!cached) return getpid();
    pid_t pid = atomic_load_explicit(cached, memory_order_relaxed);
    if (pid == 0) {
        pid = getpid();
        atomic_store_explicit(cached, pid, memory_order_relaxed);
    }
    return pid;
}
