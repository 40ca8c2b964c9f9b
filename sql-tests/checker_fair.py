#!/usr/bin/python3
"""The fair-queue checker: waiters served in arrival order, under faults.

W worker processes (checker_fair_worker.py) with redlock_config('fair', 1)
loop for a few seconds taking one name (exclusively, or shared now and
then) with wait_ms, holding it for a few ms and giving it back, while the
caller injects faults into a minority of the nodes (checker.py's kill -9
and restart after the TTL, SIGSTOP/SIGCONT). The checker counts:

* violations: moments two holders' intervals meet where one of them is
  exclusive (checker_shared.sweep over [acquire returned, lease end or
  release]) plus what the workers saw themselves through their hold files
  while holding: the queue must never cost mutual exclusion;
* inversions: pairs of waits a, b where a began more than MARGIN_S before
  b (time.monotonic(), shared by the machine's processes), b began before
  a got the lock, and b got it first; a wait that ended without the lock,
  and a pair of shared waits (woken together, in no order), are left out.
  Fair waiting keeps them near 0 (a node fault can make an entry reach too
  few nodes, and that waiter then waits as one that does not queue);
  waiting without the queue has them in every run;
* the longest wait, and how many waits ended without the lock (nulls).

    import checker_fair as cf
    res = cf.run(urls, workers=6, seconds=3, faults=...)

Scenarios: fair workers on a clean run, under kill -9 and restart of a
rotating minority, and under SIGSTOP of one; the negative control runs the
same workers with fair 0 and must report inversions.
`make checker` runs them for CHECKER_SECONDS each (this file's main);
test_checker_fair.py in `make test` for 1.5 s; mutants.py against a build
whose waiters ignore the head of the queue (caught by the inversions).
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import subprocess
import tempfile
import threading

import checker
import checker_shared

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
WORKER = os.path.join(HERE, "checker_fair_worker.py")
EXT = os.path.abspath(os.environ.get("REDLOCK_EXT") or os.path.join(REPO, "redlock"))

MARGIN_S = 0.02   # waits that began closer together than this are not ordered
TTL_MS = 600
# Fast retries make a waiter that ignores the queue (fair 0, or the mutant)
# try often; a short lease makes the queue's turns frequent too.
CONFIG = {"fair": 1, "retry_delay_ms": 20, "retry_jitter_ms": 10, "queue_lease_ms": 400,
          "reconnect_min_ms": 20, "reconnect_max_ms": 100}
MIN_ACQUISITIONS = 20


def inversions(waits):
    """(pairs out of order, pairs compared) among waits [start, got, ok, kind].
    Two shared waits are not ordered: a shared waiter yields only to the
    exclusive entries ahead, and one release wakes the readers before the
    first exclusive entry together, which then land in any order."""
    done = sorted((w for w in waits if w[2]), key=lambda w: w[0])
    bad = compared = 0
    for i, a in enumerate(done):
        for b in done[i + 1:]:
            if b[0] >= a[1]:
                break                 # b began after a got the lock: not rivals
            if b[0] - a[0] <= MARGIN_S or (a[3] == "s" and b[3] == "s"):
                continue
            compared += 1
            if b[1] < a[1]:
                bad += 1
    return bad, compared


class Result:
    def __init__(self, reports, seconds):
        self.reports, self.seconds = reports, seconds
        self.workers = len(reports)
        for key in ("acquisitions", "nulls", "errors", "live_violations"):
            setattr(self, key, sum(r[key] for r in reports))
        self.samples = [e for r in reports for e in r["error_samples"] + r["violation_samples"]][:6]
        self.holds = [h for r in reports for h in r["holds"]]
        self.waits = [w for r in reports for w in r["waits"]]
        overlaps, _, _ = checker_shared.sweep(self.holds, 0)
        self.exclusive_overlaps = overlaps
        self.violations = overlaps + self.live_violations
        self.inversions, self.compared = inversions(self.waits)
        served = [w[1] - w[0] for w in self.waits if w[2]]
        self.longest_wait_ms = int(max(served) * 1000) if served else 0
        self.longest_any_ms = int(max((w[1] - w[0] for w in self.waits), default=0) * 1000)

    def allowed_inversions(self):
        """What a fair run may show under faults: 2 % of the pairs compared
        (at least 2). The negative control and the mutant show far more."""
        return max(2, self.compared // 50)

    def summary(self, label):
        return ("checker_fair %-20s workers=%d seconds=%.1f acquisitions=%d violations=%d "
                "(exclusive_overlaps=%d live=%d) inversions=%d of %d pairs compared (allowed %d) "
                "longest_wait_ms=%d (without the lock: %d) nulls=%d errors=%d%s"
                % (label, self.workers, self.seconds, self.acquisitions, self.violations, self.exclusive_overlaps,
                   self.live_violations, self.inversions, self.compared, self.allowed_inversions(),
                   self.longest_wait_ms, self.longest_any_ms, self.nulls, self.errors,
                   (" samples=%r" % self.samples) if self.samples else ""))


def run(nodes, workers=6, seconds=3.0, resource="checker-fair", ttl_ms=TTL_MS, wait_ms=4000, hold_ms=(2, 8),
        shared_p=0.0, think_ms=None, config=None, faults=None):
    d = tempfile.mkdtemp(prefix="redlock-checker-fair-")
    holders = os.path.join(d, "holders")
    os.mkdir(holders)
    procs, threads = [], []
    stop = threading.Event()
    try:
        for i in range(workers):
            spec = {"name": "w%d" % i, "nodes": ",".join(nodes), "ext": EXT,
                    "config": CONFIG if config is None else config, "resource": resource, "ttl_ms": ttl_ms,
                    "wait_ms": wait_ms, "hold_ms": list(hold_ms), "shared_p": shared_p,
                    "think_ms": list(think_ms) if think_ms else None, "holders_dir": holders}
            procs.append(subprocess.Popen([PYTHON, WORKER, json.dumps(spec)], cwd=HERE, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        start_at, until = checker.start_workers(procs, seconds, "checker_fair worker")
        reports = checker.await_workers(procs, threads, faults, stop, start_at, until, wait_ms,
                                        "checker_fair worker")
        return Result(reports, seconds)
    finally:
        checker.end_run(stop, procs, d)


# ---------------------------------------------------------------------------
# Scenarios (5 nodes): each returns (Result, expectation, faults done).
#   fair     0 violations, inversions within allowed_inversions()
#   unfair   a negative control: 0 violations, inversions beyond that
# ---------------------------------------------------------------------------

def _urls(c):
    return [n.url for n in c]


def fair_clean(seconds):
    import harness as h
    with h.Cluster(5) as c:
        return run(_urls(c), seconds=seconds), "fair", None


def fair_kill9_restart(seconds):
    """kill -9 of a rotating minority of two, restarted empty after the TTL:
    the restarted nodes forgot the queue, and the waiters' turns put it back."""
    import harness as h
    with h.Cluster(5) as c:
        log = []
        res = run(_urls(c), seconds=seconds, faults=checker.kill_restart(c, TTL_MS, log))
        return res, "fair", len(log)


def fair_sigstop(seconds):
    """SIGSTOP/SIGCONT of a rotating minority of two nodes."""
    import harness as h
    with h.Cluster(5) as c:
        log = []
        res = run(_urls(c), seconds=seconds, faults=checker.stop_cont(c, log))
        return res, "fair", len(log)


def fair_shared_sigstop(seconds):
    """Shared and exclusive fair waiters (a third shared), SIGSTOP of one node."""
    import harness as h
    with h.Cluster(5) as c:
        log = []
        res = run(_urls(c), seconds=seconds, shared_p=0.35, faults=checker.stop_cont(c, log, size=1))
        return res, "fair", len(log)


def negative_not_fair(seconds):
    """NEGATIVE: the same workers with fair 0: waiters race for each
    release, and the checker must see the order broken."""
    import harness as h
    with h.Cluster(5) as c:
        res = run(_urls(c), seconds=seconds, config=dict(CONFIG, fair=0))
        return res, "unfair", None


SCENARIOS = [
    ("fair waiters, clean", fair_clean),
    ("fair waiters, kill -9 + restart of a minority", fair_kill9_restart),
    ("fair waiters, SIGSTOP of a minority", fair_sigstop),
    ("fair shared + exclusive waiters, SIGSTOP of a node", fair_shared_sigstop),
    ("NEGATIVE: the same waiters with fair 0", negative_not_fair),
]


def problems(res, expect, faults_done):
    out = []
    if res.violations:
        out.append("%d violations" % res.violations)
    if res.acquisitions < MIN_ACQUISITIONS:
        out.append("only %d acquisitions" % res.acquisitions)
    if expect == "fair":
        if res.inversions > res.allowed_inversions():
            out.append("%d order inversions of %d pairs (at most %d allowed)"
                       % (res.inversions, res.compared, res.allowed_inversions()))
        if faults_done is not None and faults_done < 1:
            out.append("the fault never happened")
    elif res.inversions <= res.allowed_inversions():
        out.append(checker.NO_VIOLATION_FOUND + " (%d inversions of %d pairs): the order check cannot be trusted"
                   % (res.inversions, res.compared))
    return out


def main(argv):
    return checker.run_scenarios(
        argv, SCENARIOS, problems, ("acquisitions", "violations", "order inversions", "longest wait (ms)"),
        lambda res: ("%d" % res.acquisitions, "%d" % res.violations, "%d of %d" % (res.inversions, res.compared),
                     "%d" % res.longest_wait_ms))


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
