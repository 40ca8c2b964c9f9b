#!/usr/bin/python3
"""make soak: a long run of the mutual-exclusion checker (checker.py) under
random faults, watching the workers' memory and file descriptors.

6 worker processes (a connection each, auto-extension on for some holds)
contend for one lock on 5 nodes for SOAK_SECONDS (600 by default) while a
fault thread keeps picking, every 5-20 s, one of: a rotating minority
killed with kill -9 and restarted, a rotating group stopped with SIGSTOP
and continued, or a quiet spell. Every 30 s each worker's VmRSS and open
file descriptors are sampled from /proc. At the end: the checker's
violations (must be 0), and a table of the samples; RSS and descriptors
must be flat (after the first minute: RSS grows less than 2 MiB per worker,
the most descriptors a worker has open in the last third of the run at
most 2 above the most in the first third; a worker's own record of its holds, kept for
its report, is allowed for). Not part of `make test` or CI: minutes, not
seconds.

Usage: /usr/bin/python3 sql-tests/soak.py [SECONDS]
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import random
import sys
import threading
import time

import checker
import harness as h

WORKERS = 6
TTL_MS = 1000
SAMPLE_S = 30.0
WARM_S = 60.0


def _workers():
    """pid of every live checker worker that is a child of this process."""
    me, out = os.getpid(), []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                cmd = f.read()
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if ppid == me and b"checker_worker.py" in cmd:
            out.append(int(d))
    return sorted(out)


def _sample(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
        fds = len(os.listdir("/proc/%d/fd" % pid))
    except (OSError, StopIteration):
        return None
    return rss, fds


def _random_faults(cluster, log, rng):
    kinds = [("kill -9 + restart", lambda: checker.kill_restart(cluster, TTL_MS, log, size=2)),
             ("SIGSTOP + SIGCONT", lambda: checker.stop_cont(cluster, log, size=2)),
             ("quiet", None)]
    counts = {k: 0 for k, _ in kinds}

    def faults(stop, until):
        while not stop.is_set() and time.monotonic() < until:
            name, make = rng.choice(kinds)
            counts[name] += 1
            seg_end = min(until, time.monotonic() + rng.uniform(5, 20))
            if make is None:
                stop.wait(max(0.0, seg_end - time.monotonic()))
            else:
                make()(stop, seg_end)
    return faults, counts


def last_t(samples):
    return samples[-1][0]


def main(argv):
    seconds = float(argv[1]) if len(argv) > 1 else float(os.environ.get("SOAK_SECONDS", "600"))
    rng = random.Random(int(os.environ.get("SOAK_SEED", str(int(time.time())))))
    every = min(SAMPLE_S, seconds / 10.0)
    warm = min(WARM_S, seconds / 4.0)
    samples = []           # (t, {pid: (rss, fds)})
    stop = threading.Event()
    t0 = time.monotonic()

    def sampler():
        next_t = t0 + min(5.0, every)
        while not stop.wait(max(0.0, next_t - time.monotonic())):
            got = {pid: _sample(pid) for pid in _workers()}
            samples.append((time.monotonic() - t0, {p: s for p, s in got.items() if s}))
            next_t += every

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    log = []
    with h.Cluster(5) as c:
        faults, counts = _random_faults(c, log, rng)
        res = checker.run([n.url + "?timeout_ms=200" for n in c], workers=WORKERS, seconds=seconds, ttl_ms=TTL_MS,
                          faults=faults, config={"auto_extend": 1, "reconnect_min_ms": 20, "reconnect_max_ms": 100}, extend_p=0.2)
    stop.set()
    th.join(5)
    print(res.summary("soak %.0f s, faults %s" % (seconds, counts)))
    print()
    print("%8s %8s %12s %12s %8s %8s" % ("t (s)", "workers", "RSS KiB avg", "RSS KiB max", "fds avg", "fds max"))
    for t, s in samples:
        if not s:
            continue
        rss = [v[0] for v in s.values()]
        fds = [v[1] for v in s.values()]
        print("%8.0f %8d %12.0f %12d %8.1f %8d" % (t, len(s), sum(rss) / len(rss), max(rss), sum(fds) / len(fds),
                                                  max(fds)))
    problems = []
    if res.violations:
        problems.append("%d violations" % res.violations)
    steady = [(t, s) for t, s in samples if t >= warm and s]
    if len(steady) >= 2:
        first, last = steady[0][1], steady[-1][1]
        # Each worker keeps every hold it made, for its report at the end
        # (a Python dict, under 1 KiB): that much growth is the checker's.
        per_worker_holds = res.acquisitions / max(1, res.workers)
        allowed = 2048 + per_worker_holds * (last_t(steady) - steady[0][0]) / max(1.0, seconds)
        print("RSS growth allowed per worker after the first %.0f s: %.0f KiB (2 MiB + 1 KiB per hold it made "
              "meanwhile)" % (warm, allowed))
        for pid in sorted(set(first) & set(last)):
            grow = last[pid][0] - first[pid][0]
            if grow >= allowed:
                problems.append("worker %d: RSS grew %d KiB after the first %.0f s" % (pid, grow, warm))
        # Open descriptors move with the faults (a killed node has no
        # connection, a stalled one may keep a second): flat means the last
        # third of the run never needs more than the first third did.
        third = max(1, len(steady) // 3)
        for pid in sorted(set(first) & set(last)):
            early = max(s[pid][1] for _, s in steady[:third] if pid in s)
            late = max(s[pid][1] for _, s in steady[-third:] if pid in s)
            if late > early + 2:
                problems.append("worker %d: at most %d fds early, %d late" % (pid, early, late))
    else:
        problems.append("too few samples after the first %.0f s to judge RSS and fds" % warm)
    print()
    print("soak: " + ("; ".join(problems) if problems else "0 violations, RSS and fds flat"))
    print("%d passed, %d failed" % (0 if problems else 1, 1 if problems else 0))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
