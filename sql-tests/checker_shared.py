#!/usr/bin/python3
"""The shared-lock checker: shared and exclusive holders, and holder limits,
under faults.

W worker processes (checker_shared_worker.py) loop for a few seconds taking
one name shared (redlock_acquire_shared with max_holders k, 0: no limit) or,
now and then, exclusively, while the caller injects faults into the nodes
(checker.py's kill -9 / restart after the TTL and SIGSTOP of a rotating
minority). Each hold is an interval [acquire returned, + reported validity]
on CLOCK_MONOTONIC, cut short by the release: a subset of the hold's real
life on a correct engine. The checker sweeps the intervals and counts:

* exclusive_overlaps: moments an exclusive holder's interval meets any other
  holder's (exclusive or shared);
* over_limit: moments with more than k shared holders (k > 0);
* live_violations: what the workers saw themselves through a directory of
  hold files (kind, lease end) while holding.

violations = their sum; max_concurrent is the largest number of shared
holders seen at once (it shows k is reached, not just respected). A run is
trusted only beside a negative control: the same run with the votes needed
lowered (unsafe_test_quorum) must report violations (test_checker_shared.py).

    import checker_shared as cs
    res = cs.run(urls, workers=6, seconds=3, max_holders=2, exclusive_p=0.2, faults=...)
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import subprocess
import tempfile
import threading

import checker

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
WORKER = os.path.join(HERE, "checker_shared_worker.py")
EXT = os.path.abspath(os.environ.get("REDLOCK_EXT") or os.path.join(REPO, "redlock"))


def sweep(holds, k):
    """(exclusive_overlaps, over_limit, max_concurrent_shared) over the holds'
    intervals; an interval is half-open [start, end)."""
    ev = []
    for h in holds:
        if h["end"] <= h["start"]:
            continue
        ev.append((h["start"], 1, h["kind"]))
        ev.append((h["end"], 0, h["kind"]))
    ev.sort(key=lambda e: (e[0], e[1]))   # ends before starts at the same moment
    x = s = 0
    excl_bad = over = top = 0
    for _, start, kind in ev:
        if kind == "exclusive":
            x += 1 if start else -1
        else:
            s += 1 if start else -1
        if start:
            if x > 1 or (x >= 1 and s >= 1):
                excl_bad += 1
            if k and s > k:
                over += 1
            top = max(top, s)
    return excl_bad, over, top


class Result:
    def __init__(self, reports, k, seconds):
        self.reports, self.k, self.seconds = reports, k, seconds
        self.workers = len(reports)
        for key in ("acquisitions", "shared", "exclusive", "nulls", "errors", "live_violations",
                    "release_not_1"):
            setattr(self, key, sum(r[key] for r in reports))
        self.samples = [e for r in reports for e in r["error_samples"] + r["violation_samples"]][:6]
        self.holds = [h for r in reports for h in r["holds"]]
        self.exclusive_overlaps, self.over_limit, self.max_concurrent = sweep(self.holds, k)
        self.violations = self.exclusive_overlaps + self.over_limit + self.live_violations

    def summary(self, label):
        return ("checker_shared %-22s k=%d workers=%d seconds=%.1f acquisitions=%d (shared=%d exclusive=%d) "
                "violations=%d (exclusive_overlaps=%d over_limit=%d live=%d) max_concurrent_shared=%d "
                "nulls=%d errors=%d release_not_1=%d%s"
                % (label, self.k, self.workers, self.seconds, self.acquisitions, self.shared, self.exclusive,
                   self.violations, self.exclusive_overlaps, self.over_limit, self.live_violations,
                   self.max_concurrent, self.nulls, self.errors, self.release_not_1,
                   (" samples=%r" % self.samples) if self.samples else ""))


def run(nodes, workers=6, seconds=3.0, max_holders=0, exclusive_p=0.0, resource="checker-shared",
        ttl_ms=1000, wait_ms=1500, hold_ms=(1, 8), long_p=0.1, think_ms=None, config=None, faults=None):
    d = tempfile.mkdtemp(prefix="redlock-checker-shared-")
    holders = os.path.join(d, "holders")
    os.mkdir(holders)
    procs, threads = [], []
    stop = threading.Event()
    try:
        for i in range(workers):
            spec = {"name": "w%d" % i, "nodes": ",".join(nodes), "ext": EXT, "config": config or {},
                    "resource": resource, "ttl_ms": ttl_ms, "wait_ms": wait_ms, "max_holders": max_holders,
                    "exclusive_p": exclusive_p, "hold_ms": list(hold_ms), "long_p": long_p,
                    "think_ms": list(think_ms) if think_ms else None, "holders_dir": holders}
            procs.append(subprocess.Popen([PYTHON, WORKER, json.dumps(spec)], cwd=HERE, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        start_at, until = checker.start_workers(procs, seconds, "checker worker")
        reports = checker.await_workers(procs, threads, faults, stop, start_at, until, wait_ms, "checker worker")
        return Result(reports, max_holders, seconds)
    finally:
        checker.end_run(stop, procs, d)


# ---------------------------------------------------------------------------
# Scenarios (5 nodes): test_checker_shared.py runs them for a few seconds,
# `make checker` for CHECKER_SECONDS each (this file's main).
# ---------------------------------------------------------------------------

TTL_MS = 600
FAST_RECONNECT = {"retry_delay_ms": 20, "retry_jitter_ms": 10}


def _urls(c):
    return [n.url for n in c]


def mixed_sigstop(seconds):
    """Shared (no limit) and exclusive holders; SIGSTOP/CONT of a rotating
    minority of two nodes."""
    import checker
    import harness as h
    with h.Cluster(5) as c:
        log = []
        res = run(_urls(c), workers=6, seconds=seconds, exclusive_p=0.3, ttl_ms=TTL_MS, config=FAST_RECONNECT,
                  faults=checker.stop_cont(c, log))
        return res, "safe", len(log)


def mixed_kill9(seconds):
    """The same with kill -9 of a rotating minority of two, restarted after the TTL."""
    import checker
    import harness as h
    with h.Cluster(5) as c:
        log = []
        res = run(_urls(c), workers=6, seconds=seconds, exclusive_p=0.3, ttl_ms=TTL_MS, config=FAST_RECONNECT,
                  faults=checker.kill_restart(c, TTL_MS, log))
        return res, "safe", len(log)


def limit2_kill9(seconds):
    """k = 2 (q = 4 of 5: one node may fail), kill -9 of one node at a time."""
    import checker
    import harness as h
    with h.Cluster(5) as c:
        log = []
        res = run(_urls(c), workers=6, seconds=seconds, max_holders=2, exclusive_p=0.1, ttl_ms=TTL_MS,
                  config=FAST_RECONNECT, faults=checker.kill_restart(c, TTL_MS, log, size=1))
        return res, "safe", len(log)


def limit3_sigstop(seconds):
    """k = 3 (q = 4 of 5), SIGSTOP/CONT of one node at a time."""
    import checker
    import harness as h
    with h.Cluster(5) as c:
        log = []
        res = run(_urls(c), workers=7, seconds=seconds, max_holders=3, exclusive_p=0.1, ttl_ms=TTL_MS,
                  config=FAST_RECONNECT, faults=checker.stop_cont(c, log, size=1))
        return res, "safe", len(log)


def negative_limit2_majority(seconds):
    """NEGATIVE: k = 2 counted with a majority (unsafe_test_quorum = 3 of 5):
    racing holders find different nodes full, and three get a majority each."""
    import harness as h
    with h.Cluster(5) as c:
        res = run(_urls(c), workers=8, seconds=seconds, max_holders=2, ttl_ms=TTL_MS, hold_ms=(2, 10),
                  config=dict(FAST_RECONNECT, unsafe_test_quorum=3))
        return res, "broken", None


SCENARIOS = [
    ("shared + exclusive, SIGSTOP of a minority", mixed_sigstop),
    ("shared + exclusive, kill -9 of a minority", mixed_kill9),
    ("k = 2, kill -9 of one node", limit2_kill9),
    ("k = 3, SIGSTOP of one node", limit3_sigstop),
    ("NEGATIVE: k = 2 with a majority quorum", negative_limit2_majority),
]


def problems(res, expect, faults_done):
    out = []
    if expect == "safe":
        if res.violations:
            out.append("%d violations" % res.violations)
        if res.acquisitions < 20:
            out.append("only %d acquisitions" % res.acquisitions)
        if res.k and res.max_concurrent < 2:
            out.append("never more than %d shared holders at once: the limit was not exercised" % res.max_concurrent)
        if faults_done is not None and faults_done < 1:
            out.append("the fault never happened")
    elif not res.violations:
        out.append(checker.NO_VIOLATION_FOUND + ": the checker cannot be trusted")
    return out


def main(argv):
    return checker.run_scenarios(
        argv, SCENARIOS, problems, ("acquisitions", "most shared holders at once", "violations"),
        lambda res: ("%d" % res.acquisitions, "%d" % res.max_concurrent, "%d" % res.violations))


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
