#!/usr/bin/python3
"""A mutual-exclusion checker for redlock, after Jepsen's lock tests.

K worker processes (checker_worker.py), each with its own connection and
the extension loaded, loop for a few seconds: take one lock (with wait_ms),
do a deliberately non-atomic read-sleep-write of a shared counter file and
create an exclusive marker file (O_EXCL) while holding it, remove the
marker, release. Meanwhile the caller may inject faults into the nodes.
The checker then counts:

* acquisitions: holds the workers report;
* lost updates: acquisitions - final counter (two holders at once read the
  same value and one increment is lost);
* overlaps: a worker found the marker already there;
* interval overlaps: two reported holds [start, end] (CLOCK_MONOTONIC,
  shared by all processes) intersect.

violations = lost updates + overlaps + interval overlaps; a correct lock
gives 0. A run can only be trusted if a broken lock run the same way
(negative control) reports violations: see test_checker.py.

Library use (from the sql-tests directory)::

    import checker
    res = checker.run(["redis://127.0.0.1:7001", ...], workers=6, seconds=3,
                      faults=lambda stop, until: ...)
    print(res.summary("clean")); assert res.violations == 0

Command line, against running nodes::

    /usr/bin/python3 sql-tests/checker.py redis://127.0.0.1:7001,redis://... [workers] [seconds]
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
WORKER = os.path.join(HERE, "checker_worker.py")
EXT = os.environ.get("REDLOCK_EXT") or os.path.join(REPO, "redlock")


class Result:
    def __init__(self, reports, counter, seconds):
        self.reports = reports
        self.seconds = seconds
        self.workers = len(reports)
        self.counter = counter
        self.acquisitions = sum(r["acquisitions"] for r in reports)
        self.overlaps = sum(r["overlaps"] for r in reports)
        self.nulls = sum(r["nulls"] for r in reports)
        self.errors = sum(r["errors"] for r in reports)
        self.release_not_1 = sum(r["release_not_1"] for r in reports)
        self.error_samples = [e for r in reports for e in r["error_samples"]][:5]
        # > 0: some worker was still loading when the run started
        self.ready_late_ms = max(r.get("ready_late_ms", 0) for r in reports)
        self.finished_late_ms = max(r.get("finished_late_ms", 0) for r in reports)
        self.lost_updates = self.acquisitions - counter
        holds = sorted((s, e) for r in reports for s, e in r["holds"])
        self.interval_overlaps = 0
        end = None
        for s, e in holds:
            if end is not None and s < end:
                self.interval_overlaps += 1
            end = e if end is None else max(end, e)
        self.violations = self.lost_updates + self.overlaps + self.interval_overlaps

    def summary(self, label):
        return ("checker %-22s workers=%d seconds=%.1f acquisitions=%d violations=%d "
                "(lost_updates=%d overlaps=%d interval_overlaps=%d) nulls=%d errors=%d "
                "release_not_1=%d ready_late_ms=%d finished_late_ms=%d"
                % (label, self.workers, self.seconds, self.acquisitions, self.violations,
                   self.lost_updates, self.overlaps, self.interval_overlaps, self.nulls,
                   self.errors, self.release_not_1, self.ready_late_ms, self.finished_late_ms))


def run(nodes, workers=6, seconds=3.0, resource="checker", ttl_ms=1000, wait_ms=1500,
        hold_ms=(1, 8), config=None, faults=None, worker_nodes=None):
    """Runs one checker round and returns a Result.

    nodes: list of redis:// URLs every worker uses; worker_nodes: optional
    list (one entry per worker) of URL lists instead (for a split-brain
    control). config: redlock_config settings for every worker. faults:
    optional callable(stop_event) run in a thread during the run; it should
    return when stop_event is set (and leave the nodes usable)."""
    d = tempfile.mkdtemp(prefix="redlock-checker-")
    counter = os.path.join(d, "counter")
    marker = os.path.join(d, "marker")
    with open(counter, "w") as f:
        f.write("0\n")
    procs = []
    stop = threading.Event()
    fault_thread = None
    fault_error = []
    try:
        start_at = time.monotonic() + 0.5 + 0.05 * workers    # time to load
        until = start_at + seconds
        for i in range(workers):
            urls = worker_nodes[i % len(worker_nodes)] if worker_nodes else nodes
            spec = {"name": "w%d" % i, "nodes": ",".join(urls), "ext": EXT,
                    "config": config or {}, "resource": resource, "ttl_ms": ttl_ms,
                    "wait_ms": wait_ms, "hold_ms": list(hold_ms), "counter": counter,
                    "marker": marker, "start_at": start_at, "until": until}
            procs.append(subprocess.Popen([PYTHON, WORKER, json.dumps(spec)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        if faults:
            def fault_main():
                try:
                    now = time.monotonic()
                    if start_at > now:
                        time.sleep(start_at - now)
                    faults(stop, until)
                except BaseException as e:          # reported after the run
                    fault_error.append(e)
            fault_thread = threading.Thread(target=fault_main, daemon=True)
            fault_thread.start()
        reports = []
        limit = until + wait_ms / 1000.0 + 20
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1.0, limit - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise AssertionError("checker worker did not finish in time")
            if p.returncode != 0 or not out.strip():
                raise AssertionError("checker worker failed (exit %s): %s"
                                     % (p.returncode, err.strip()[-2000:]))
            reports.append(json.loads(out.strip().splitlines()[-1]))
        stop.set()
        if fault_thread:
            fault_thread.join(30)
        if fault_error:
            raise AssertionError("fault injection failed: %r" % (fault_error[0],))
        with open(counter) as f:
            final = int(f.read().strip())
        return Result(reports, final, seconds)
    finally:
        stop.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    urls = argv[1].split(",")
    workers = int(argv[2]) if len(argv) > 2 else 6
    seconds = float(argv[3]) if len(argv) > 3 else 3.0
    res = run(urls, workers, seconds)
    print(res.summary("cli"))
    return 1 if res.violations else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
