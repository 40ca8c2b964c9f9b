#!/usr/bin/python3
"""The mutual-exclusion checker for several names at once
(redlock_acquire_many), after checker.py.

K worker processes, each with its own connection, loop for a few seconds:
pick 2 or 3 names at random out of a small pool (so the sets of different
workers overlap), take them all with redlock_acquire_many(json, ttl,
wait_ms) (or, one time in four, one name alone with redlock_acquire, so
that a name's fencing numbers come from its own counter and from the
fencing floor of the sets in turn), and while holding them, for every name of the set: create that
name's O_EXCL marker file, write with that name's fencing number to that
name's protected resource (fence_store.py), and do a deliberately
non-atomic read-sleep-write of that name's counter file; then give the set
back, by redlock_release_many or name by name with redlock_release. Some
holders SIGSTOP themselves past the TTL and must then find every name of
their set lost. Meanwhile the caller may inject faults into the nodes.

Per name, the checker requires what checker.py requires of its one lock:
no two holds of the name overlap in time (a hold is [acquire_many
returned, + the validity redlock_locks reported for that name], cut short
by the release, on CLOCK_MONOTONIC), no lost update of its counter, no
marker found in place, fencing numbers rising in the order the holds
started, and no stale write accepted by its resource. violations is the
sum over the names, plus paused holders that did not see their loss. A
negative control (unsafe_test_quorum 1) must report violations.

    /usr/bin/python3 sql-tests/checker_many.py --worker '<json spec>'   (internal)
"""
# SPDX-License-Identifier: BSD-3-Clause

import fcntl
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
import fence_store
from checker_worker import await_start, open_connection, read_counter as checker_read, write_counter

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
POOL = ["many:%d" % i for i in range(5)]
MIN_WRITE_LEFT_MS = 4


def _paths(d, name):
    safe = name.replace(":", "_")
    return {"counter": os.path.join(d, "counter." + safe), "marker": os.path.join(d, "marker." + safe),
            "fence_db": os.path.join(d, "fences.%s.db" % safe)}


# --------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------

class Worker:
    def __init__(self, spec):
        self.spec = spec
        self.me = spec["name"]
        self.ttl = spec["ttl_ms"]
        self.rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
        self.paths = {n: _paths(spec["dir"], n) for n in spec["pool"]}
        self.stores = {n: fence_store.Store(self.paths[n]["fence_db"]) for n in spec["pool"]}
        self.out = {"name": self.me, "acquisitions": 0, "sets": 0, "completed": {}, "overlaps": 0, "nulls": 0,
                    "errors": 0, "error_samples": [], "release_short": 0, "paused": 0, "abandoned": 0, "late_writes": 0, "loss_seen": 0,
                    "loss_unseen": 0, "zero_validity": 0, "holds": [], "incidents": []}
        self.con = open_connection(spec)

    def incident(self, text):
        """What a violation found in the worker was, for the checker's report."""
        if len(self.out["incidents"]) < 20:
            self.out["incidents"].append("%s t=%.6f %s" % (self.me, time.monotonic(), text))

    def sample(self, text):
        if len(self.out["error_samples"]) < 4:
            self.out["error_samples"].append(text[:300])

    def marker_lock(self, name):
        """Held while a marker is looked at and then created or removed, so
        that a late holder removing its own marker cannot remove the next
        holder's instead (a race of the checker, not of the lock)."""
        fd = os.open(self.paths[name]["marker"] + ".lk", os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def marker_unlock(self, fd):
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)

    def take_marker(self, name, hid, lease_end):
        fd = self.marker_lock(name)
        try:
            return self._take_marker(name, hid, lease_end)
        finally:
            self.marker_unlock(fd)

    def _take_marker(self, name, hid, lease_end):
        path = self.paths[name]["marker"]
        for _ in range(3):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, ("%s %.6f" % (hid, lease_end)).encode())
                os.close(fd)
                return True
            except FileExistsError:
                owner, end = self.read_marker(name)
                if owner is not None and end > time.monotonic():
                    break
                try:
                    os.unlink(path)          # left by a holder whose lease has ended
                except FileNotFoundError:
                    pass
        owner, end = self.read_marker(name)
        self.out["overlaps"] += 1
        self.incident("marker of %s held by %s (lease to %.6f) when %s took the name (lease to %.6f)"
                      % (name, owner, end, hid, lease_end))
        return False

    def read_marker(self, name):
        try:
            with open(self.paths[name]["marker"]) as f:
                owner, end = f.read().split()
            return owner, float(end)
        except (OSError, ValueError):
            return None, 0.0

    def hold_ms(self, left):
        r = self.rng.random()
        if r < 0.06:
            return max(0.0, left - self.rng.uniform(MIN_WRITE_LEFT_MS + 2, MIN_WRITE_LEFT_MS + 8))
        if r < 0.18:
            return left * self.rng.uniform(0.1, 0.9)
        return self.rng.uniform(1, 8)

    def validity(self, names):
        """The least validity left over names, measured from before the call."""
        t0 = time.monotonic()
        vals = [self.con.execute("SELECT redlock_validity(?)", (n,)).fetchone()[0] for n in names]
        v = 0 if None in vals else min(vals)  # NULL: not held with validity left
        return v, t0 + v / 1000.0

    def run_set(self, names, tok, t1):
        rows = {r[0]: r[1:] for r in self.con.execute(
            "SELECT resource, validity_ms, fence, nodes, token FROM redlock_locks")}
        self.out["sets"] += 1
        holds, lost = {}, False
        for n in names:
            left, fence, yes, t = rows.get(n, (0, 0, 0, None))
            if t != tok:
                self.out["errors"] += 1
                self.sample("redlock_locks row of %s: token %r, expected the set's" % (n, t))
            hid = "%s#%d" % (self.me, self.out["acquisitions"])
            self.out["acquisitions"] += 1
            if not left:
                self.out["zero_validity"] += 1
            h = {"res": n, "id": hid, "start": t1, "lease_end": t1 + (left or 0) / 1000.0, "fence": fence or 0,
                 "yes": yes or 0}
            h["marker"] = self.take_marker(n, hid, h["lease_end"])
            if fence:
                self.stores[n].write(fence, hid, "begin")
            h["v"] = checker_read(self.paths[n]["counter"])
            holds[n] = h
        left = min(rows.get(n, (0,))[0] or 0 for n in names)
        if left and self.rng.random() < self.spec.get("pause_p", 0):
            self.out["paused"] += 1
            os.kill(os.getpid(), signal.SIGSTOP)   # the checker resumes us after 1.5 TTL
            v, _ = self.validity(names)
            if v == 0:
                self.out["loss_seen"] += 1
            else:
                self.out["loss_unseen"] += 1
                self.sample("paused past the TTL, yet validity %d" % v)
                self.incident("paused past the TTL holding %s, yet validity %d" % (names, v))
            lost = True
        if not lost:
            target = t1 + self.hold_ms(left) / 1000.0
            now = time.monotonic()
            if target > now:
                time.sleep(target - now)
            v, end = self.validity(names)
            if v >= MIN_WRITE_LEFT_MS:
                for n in names:
                    h = holds[n]
                    h["lease_end"] = max(h["lease_end"], end)
                    # One name after another: each write only while the lease
                    # still has room for it, as the one-name worker does once.
                    if time.monotonic() + MIN_WRITE_LEFT_MS / 1000.0 > end:
                        self.out["abandoned"] += 1
                        continue
                    write_counter(self.paths[n]["counter"], h["v"] + 1, self.me)
                    self.out["completed"][n] = self.out["completed"].get(n, 0) + 1
                    if time.monotonic() > end:
                        self.out["late_writes"] += 1
            elif not v:
                lost = True
        for n in names:
            h = holds[n]
            if h["fence"]:
                self.stores[n].write(h["fence"], h["id"], "end")
            if h["marker"]:
                fd = self.marker_lock(n)
                try:
                    owner, _ = self.read_marker(n)
                    if owner == h["id"]:
                        os.unlink(self.paths[n]["marker"])
                finally:
                    self.marker_unlock(fd)
                if owner == h["id"]:
                    pass
                elif not lost and time.monotonic() < h["lease_end"]:
                    self.out["overlaps"] += 1    # taken from us within our lease
                    self.incident("marker of %s taken from %s by %s within its lease (start %.6f, lease to %.6f)"
                                  % (n, h["id"], owner, h["start"], h["lease_end"]))
        t_rel = time.monotonic()
        for n in names:
            h = holds[n]
            h["end"] = min(h["lease_end"], t_rel)
            for k in ("marker", "v"):
                del h[k]
            self.out["holds"].append(h)
        try:
            if self.rng.random() < 0.5:
                got = self.con.execute("SELECT redlock_release_many(?, ?)", (json.dumps(names), tok)).fetchone()[0]
            else:
                got = sum(self.con.execute("SELECT redlock_release(?)", (n,)).fetchone()[0] or 0 for n in names)
            if got != len(names) and not lost:
                self.out["release_short"] += 1
        except sqlite3.Error as e:
            self.out["errors"] += 1
            self.sample("release: %s" % e)

    def run(self):
        spec = self.spec
        await_start(spec)
        while time.monotonic() < spec["until"]:
            alone = self.rng.random() < 0.25
            names = self.rng.sample(spec["pool"], 1 if alone else self.rng.randint(2, 3))
            try:
                if alone:
                    tok = self.con.execute("SELECT redlock_acquire(?, ?, ?)",
                                           (names[0], self.ttl, spec["wait_ms"])).fetchone()[0]
                else:
                    tok = self.con.execute("SELECT redlock_acquire_many(?, ?, ?)",
                                           (json.dumps(names), self.ttl, spec["wait_ms"])).fetchone()[0]
            except sqlite3.Error as e:
                self.out["errors"] += 1
                self.sample(str(e))
                time.sleep(0.02)
                continue
            t1 = time.monotonic()
            if tok is None:
                self.out["nulls"] += 1
                continue
            self.run_set(names, tok, t1)
            # whatever happened, nothing of the set stays listed for the next one
            self.con.execute("SELECT redlock_release_all()")
        self.con.close()
        print(json.dumps(self.out), flush=True)


# --------------------------------------------------------------------------
# the checker
# --------------------------------------------------------------------------

class Result:
    """Per name, what checker.Result checks of its one lock; summed."""

    def __init__(self, reports, counters, logs, seconds, pauses):
        self.reports, self.seconds, self.workers, self.pauses = reports, seconds, len(reports), pauses

        def total(key):
            return sum(r.get(key, 0) for r in reports)
        for key in ("acquisitions", "sets", "overlaps", "nulls", "errors", "release_short", "paused",
                    "loss_seen", "loss_unseen", "zero_validity", "abandoned", "late_writes"):
            setattr(self, key, total(key))
        self.error_samples = [e for r in reports for e in r["error_samples"]][:6]
        holds = [h for r in reports for h in r["holds"]]
        self.lost_updates = self.interval_overlaps = self.fence_disorder = 0
        self.fences_checked = self.stale_accepted = self.stale_rejected = 0
        self.per_name = {}
        self.details = [i for r in reports for i in r.get("incidents", [])]

        def show(x):
            return "%s[%s..%s fence=%s yes=%s]" % (x["id"], "%.6f" % x["start"], "%.6f" % x["end"], x["fence"], x["yes"])
        for name, final in counters.items():
            mine = [h for h in holds if h["res"] == name]
            completed = sum(r["completed"].get(name, 0) for r in reports)
            lost = completed - final
            pair_list = checker._interval_overlaps(mine)
            pairs = len(pair_list)
            disorder, checked = checker._fence_disorder(mine)
            stale = checker._stale_accepted(logs[name], mine)
            for a, b in pair_list[:10]:
                self.details.append("interval overlap on %s: %s still held when %s started" % (name, show(a), show(b)))
            if lost:
                self.details.append("lost updates on %s: %d writes completed, counter %d" % (name, completed, final))
            if disorder:
                top = None
                for x in sorted((x for x in mine if x["fence"] > 0), key=lambda x: x["start"]):
                    if top is not None and x["fence"] <= top["fence"]:
                        self.details.append("fence disorder on %s: %s after %s" % (name, show(x), show(top)))
                    if top is None or x["fence"] > top["fence"]:
                        top = x
            if stale:
                self.details.append("stale writes accepted on %s: %d" % (name, stale))
            self.lost_updates += lost
            self.interval_overlaps += pairs
            self.fence_disorder += disorder
            self.fences_checked += checked
            self.stale_accepted += stale
            self.stale_rejected += sum(1 for e in logs[name] if not e[3])
            self.per_name[name] = len(mine)
        self.violations = (self.lost_updates + self.overlaps + self.interval_overlaps + self.fence_disorder +
                           self.stale_accepted + self.loss_unseen)

    def summary(self, label):
        return ("checker_many %-20s workers=%d seconds=%.1f sets=%d acquisitions=%d violations=%d "
                "(interval_overlaps=%d lost_updates=%d overlaps=%d fence_disorder=%d stale_accepted=%d "
                "loss_unseen=%d) fences_checked=%d stale_rejected=%d paused=%d loss_seen=%d nulls=%d errors=%d "
                "release_short=%d zero_validity=%d abandoned=%d late_writes=%d holds_per_name=%s"
                % (label, self.workers, self.seconds, self.sets, self.acquisitions, self.violations,
                   self.interval_overlaps, self.lost_updates, self.overlaps, self.fence_disorder,
                   self.stale_accepted, self.loss_unseen, self.fences_checked, self.stale_rejected, self.paused,
                   self.loss_seen, self.nulls, self.errors, self.release_short, self.zero_validity,
                   self.abandoned, self.late_writes, self.per_name)
                + "".join("\n  violation: " + d for d in self.details))


def run(nodes, workers=6, seconds=3.0, ttl_ms=300, wait_ms=1000, config=None, faults=None, pool=POOL,
        **behaviour):
    """One run on the redis:// URLs in nodes; returns a Result. faults: as
    for checker.run. behaviour: pause_p."""
    d = tempfile.mkdtemp(prefix="redlock-checker-many-")
    for name in pool:
        p = _paths(d, name)
        fence_store.Store.create(p["fence_db"])
        with open(p["counter"], "w") as f:
            f.write("0\n")
    procs, threads, pauses = [], [], []
    stop = threading.Event()
    try:
        for i in range(workers):
            spec = {"name": "w%d" % i, "nodes": ",".join(nodes), "ext": checker.EXT, "config": config or {},
                    "ttl_ms": ttl_ms, "wait_ms": wait_ms, "dir": d, "pool": list(pool)}
            spec.update(behaviour)
            procs.append(subprocess.Popen([PYTHON, os.path.abspath(__file__), "--worker", json.dumps(spec)],
                                          cwd=HERE, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        start_at, until = checker.start_workers(procs, seconds, "checker_many worker")
        if behaviour.get("pause_p"):
            t = threading.Thread(target=checker._resume_paused, daemon=True,
                                 args=(procs, ttl_ms / 1000.0 * 1.5, stop, pauses))
            t.start()
            threads.append(t)
        reports = checker.await_workers(procs, threads, faults, stop, start_at, until, wait_ms, "checker_many worker")
        counters = {n: checker_read(_paths(d, n)["counter"]) for n in pool}
        logs = {n: fence_store.read_log(_paths(d, n)["fence_db"]) for n in pool}
        return Result(reports, counters, logs, seconds, len(pauses))
    finally:
        checker.end_run(stop, procs, d)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        Worker(json.loads(sys.argv[2])).run()
    else:
        print(__doc__)
        sys.exit(2)
