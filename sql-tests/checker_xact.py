#!/usr/bin/python3
"""The checker for locks of a transaction (redlock_acquire_xact).

K worker processes loop for a few seconds over one database file (WAL
mode); each job is one transaction on it:

    BEGIN; redlock_acquire_xact(resource, ttl_ms, wait_ms)
    n = SELECT max(n) FROM jobs
    the fenced write (fence_store.write_in, with the lock's fencing number)
    INSERT INTO jobs VALUES (n + 1, hold, fence, paused)
    now and then: SIGSTOP itself past the TTL (resumed after 1.5 TTL)
    COMMIT

A job paused before its COMMIT has lost its lock (its process, keeper
included, was stopped past the TTL): the COMMIT guard must refuse it. After
the run the checker counts, in what was committed:

* late commits: jobs that paused past their TTL and still committed;
* stale commits: writes the fenced store judged stale (a newer fencing
  number had written) that were committed all the same;
* lost updates: committed jobs whose n is not one more than that of the job
  committed before (commit order is insert order: a writer keeps the file's
  write lock from its first write to its COMMIT);
* fence disorder: a committed job whose fencing number is not larger than
  the one committed before;
* interval overlaps: holds [acquire returned, min(+ validity, COMMIT
  sent)] that overlap (checker.py's measure; the release comes after).

A job that read first cannot wait for the file's write lock that a paused
job keeps (SQLite answers SQLITE_BUSY at once): it rolls back and tries
again (counted as busy).

violations = their sum: 0 on a correct engine. Its negative controls are
the mutants xact-guard-off and xact-release-before-commit (mutants.py).

    checker_xact.run(urls, workers=4, seconds=3, ...) -> Result
    /usr/bin/python3 checker_xact.py --worker '<json spec>'    (one worker)
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import checker
import checker_worker
import fence_store

HERE = os.path.dirname(os.path.abspath(__file__))


class Result:
    def __init__(self, reports, committed, log, seconds, pauses):
        self.seconds, self.workers, self.pauses = seconds, len(reports), pauses

        def total(key):
            return sum(r[key] for r in reports)
        for key in ("acquisitions", "nulls", "errors", "busy", "paused", "refused",
                    "refused_unpaused"):
            setattr(self, key, total(key))
        self.error_samples = [e for r in reports for e in r["error_samples"]][:6]
        self.committed = len(committed)
        self.late_commits = sum(1 for _, _, _, paused in committed if paused)
        self.lost_updates = sum(1 for i, (n, _, _, _) in enumerate(committed) if n != i + 1)
        fences = [f for _, _, f, _ in committed if f]
        self.fences_checked = len(fences)
        self.fence_disorder = sum(1 for a, b in zip(fences, fences[1:]) if b <= a)
        self.stale_accepted = sum(1 for _, _, _, accepted in log if not accepted)
        holds = [h for r in reports for h in r["holds"]]
        self.interval_overlaps = len(checker._interval_overlaps(holds))
        self.loss_unseen = self.late_commits
        self.stale_rejected = self.refused   # the matrix's column: here, COMMITs the guard refused
        self.violations = (self.late_commits + self.stale_accepted + self.lost_updates +
                           self.fence_disorder + self.interval_overlaps)

    def summary(self, label):
        return ("checker %-24s workers=%d seconds=%.1f acquisitions=%d committed=%d "
                "violations=%d (late_commits=%d stale_commits=%d lost_updates=%d "
                "fence_disorder=%d interval_overlaps=%d) paused=%d commits_refused=%d "
                "(of jobs not paused: %d) busy=%d nulls=%d errors=%d"
                % (label, self.workers, self.seconds, self.acquisitions, self.committed,
                   self.violations, self.late_commits, self.stale_accepted, self.lost_updates,
                   self.fence_disorder, self.interval_overlaps, self.paused, self.refused,
                   self.refused_unpaused, self.busy, self.nulls, self.errors))


def run(nodes, workers=4, seconds=3.0, resource="xjobs", ttl_ms=300, wait_ms=1500, pause_p=0.15,
        worker_config=None):
    """One run; worker_config: redlock_config settings of the workers in
    turn (default: half with auto_extend)."""
    d = tempfile.mkdtemp(prefix="redlock-checker-xact-")
    db = os.path.join(d, "jobs.db")
    fence_store.Store.create(db)
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("CREATE TABLE jobs(n INTEGER NOT NULL, hold TEXT, fence INTEGER, paused INTEGER)")
    con.close()
    configs = worker_config or [{}, {"auto_extend": 1}]
    procs, threads, pauses, stop = [], [], [], threading.Event()
    try:
        for i in range(workers):
            spec = {"name": "x%d" % i, "ext": checker.EXT, "nodes": ",".join(nodes), "db": db,
                    "resource": resource, "ttl_ms": ttl_ms, "wait_ms": wait_ms, "pause_p": pause_p,
                    "config": dict({"timeout_ms": 200}, **configs[i % len(configs)])}
            argv = [checker.PYTHON, os.path.abspath(__file__), "--worker", json.dumps(spec)]
            procs.append(subprocess.Popen(argv, cwd=HERE, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        start_at, until = checker.start_workers(procs, seconds, "xact checker worker")
        t = threading.Thread(target=checker._resume_paused,
                             args=(procs, ttl_ms / 1000.0 * 1.5, stop, pauses), daemon=True)
        t.start()
        threads.append(t)
        reports = checker.await_workers(procs, threads, None, stop, start_at, until, wait_ms,
                                        "xact checker worker")
        con = sqlite3.connect(db)
        committed = con.execute("SELECT n, hold, fence, paused FROM jobs ORDER BY rowid").fetchall()
        con.close()
        return Result(reports, committed, fence_store.read_log(db), seconds, len(pauses))
    finally:
        checker.end_run(stop, procs, d)


def worker(spec):
    os.environ["REDLOCK_NODES"] = spec["nodes"]
    con = sqlite3.connect(spec["db"], isolation_level=None, timeout=30)
    con.enable_load_extension(True)
    con.load_extension(spec["ext"])
    for k, v in spec["config"].items():
        con.execute("SELECT redlock_config(?, ?)", (k, v))
    res, me = spec["resource"], spec["name"]
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
    out = {"acquisitions": 0, "nulls": 0, "errors": 0, "busy": 0, "paused": 0, "refused": 0,
           "refused_unpaused": 0, "error_samples": [], "holds": []}

    def sample(text):
        if len(out["error_samples"]) < 4:
            out["error_samples"].append(text[:300])
    checker_worker.await_start(spec)
    k = 0
    while time.monotonic() < spec["until"]:
        k += 1
        hid = "%s#%d" % (me, k)
        con.execute("BEGIN")
        try:
            tok = con.execute("SELECT redlock_acquire_xact(?, ?, ?)",
                              (res, spec["ttl_ms"], spec["wait_ms"])).fetchone()[0]
        except sqlite3.Error as e:
            out["errors"] += 1
            sample("acquire: %s" % e)
            con.execute("ROLLBACK")
            continue
        t1 = time.monotonic()
        if tok is None:
            out["nulls"] += 1
            con.execute("ROLLBACK")
            continue
        left, fence = con.execute("SELECT redlock_validity(?), redlock_fence(?)",
                                  (res, res)).fetchone()
        out["acquisitions"] += 1
        hold = {"id": hid, "start": t1, "lease_end": t1 + (left or 0) / 1000.0, "fence": fence or 0}
        paused = rng.random() < spec["pause_p"]
        try:
            top = con.execute("SELECT coalesce(max(n), 0) FROM jobs").fetchone()[0]
            fence_store.write_in(con, fence or 0, hid, "job")
            con.execute("INSERT INTO jobs VALUES (?, ?, ?, ?)", (top + 1, hid, fence, int(paused)))
            if paused:
                out["paused"] += 1
                os.kill(os.getpid(), signal.SIGSTOP)   # past the TTL, before COMMIT
            else:
                time.sleep(rng.uniform(0.001, 0.005))
            hold["end"] = min(hold["lease_end"], time.monotonic())  # the release comes after this
            con.execute("COMMIT")
        except sqlite3.Error as e:
            # before the ROLLBACK releases it
            hold.setdefault("end", min(hold["lease_end"], time.monotonic()))
            if e.sqlite_errorcode in (sqlite3.SQLITE_BUSY, 517):  # SQLITE_BUSY_SNAPSHOT
                # A job that read first cannot wait to write while a paused
                # one keeps the file's write lock: it gives up, and tries again.
                out["busy"] += 1
                time.sleep(rng.uniform(0.005, 0.02))
            elif "COMMIT refused" in str(e):
                out["refused"] += 1
                if not paused:        # ran out waiting for the file: refused rightly, but noted
                    out["refused_unpaused"] += 1
            else:
                out["errors"] += 1
                sample("job: %s" % e)
            if con.in_transaction:
                con.execute("ROLLBACK")
        hold.setdefault("end", min(hold["lease_end"], time.monotonic()))
        out["holds"].append(hold)
    con.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(json.loads(sys.argv[2]))
    else:
        print(__doc__)
        sys.exit(2)
