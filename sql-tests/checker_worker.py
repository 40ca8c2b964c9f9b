#!/usr/bin/python3
"""One worker process of the mutual-exclusion checker (see checker.py).

    /usr/bin/python3 checker_worker.py '<json spec>'

Loads the extension (REDLOCK_NODES from the spec), says it is ready and
waits for the common start (await_start: "start_at" and "until" on
time.monotonic(), which is CLOCK_MONOTONIC and so comparable between
processes on one machine), then loops until "until":

    token = redlock_acquire(resource, ttl_ms, wait_ms)       t1: it returned
    left  = redlock_validity(resource), fence = redlock_fence(resource)
    lease = [t1, t1 + left]         (a lower bound of what the engine claims)
    create the marker file with O_CREAT|O_EXCL     (exists already: overlap)
    fenced write 'begin' to the protected resource (fence_store.py)
    read the counter file
    hold for a random part of the validity (sometimes nearly all of it),
    extending it now and then (or auto-extension does), maybe pausing
    itself with SIGSTOP (the checker resumes it after the TTL)
    check the validity; while still valid: write counter + 1 (not atomic)
    fenced write 'end', remove the marker, redlock_release(resource, token)

The hold's interval is [t1, min(lease end, moment the release was sent)].
A worker that was paused must see its lock as lost (validity 0, extend NULL
or release 0) and then does no unfenced work; it still tries a fenced
write, which the resource must reject once a newer holder has written.

It prints one JSON line: counts, error samples, and every hold
(start, end, fence, id) for the checker to compare.
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import random
import signal
import sqlite3
import sys
import time

import fence_store

MIN_WRITE_LEFT_MS = 4    # less validity than this left: the write is abandoned, not risked


def read_counter(path):
    with open(path) as f:
        return int(f.read().strip() or "0")


def write_counter(path, value, me):
    tmp = "%s.%s.tmp" % (path, me)
    with open(tmp, "w") as f:
        f.write("%d\n" % value)
    os.replace(tmp, path)        # a whole value or the old one: never torn


def mark_holder(d, kind, hid, lease_end):
    """The holders' folder d of the shared and fair checkers: writes this
    holder's file ("<kind>.<hid>", holding its lease end) whole, then counts
    the others whose lease still runs. Returns (path, exclusive, shared):
    the file to remove at the end of the hold, and those counts."""
    path = os.path.join(d, "%s.%s" % (kind, hid))
    with open(path + ".tmp", "w") as f:
        f.write("%.6f" % lease_end)
    os.replace(path + ".tmp", path)
    others_x = others_s = 0
    for name in os.listdir(d):
        if name.endswith(".tmp") or name.endswith(hid):
            continue
        try:
            with open(os.path.join(d, name)) as f:
                end = float(f.read() or 0)
        except (OSError, ValueError):
            continue
        if end <= time.monotonic():
            continue
        if name.startswith("exclusive."):
            others_x += 1
        else:
            others_s += 1
    return path, others_x, others_s


def open_connection(spec):
    """A connection of a worker: the extension loaded with REDLOCK_NODES
    from spec["nodes"], then spec["config"] applied with redlock_config.
    The checker workers (exclusive, acquire_many, shared) all open theirs so."""
    os.environ["REDLOCK_NODES"] = spec["nodes"]
    con = sqlite3.connect(":memory:", isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(spec["ext"])
    con.enable_load_extension(False)
    for k, v in spec.get("config", {}).items():
        con.execute("SELECT redlock_config(?, ?)", (k, v))
    return con


def await_start(spec):
    """Says "ready" on stdout (its connection is open), reads the start line
    the checker sends once every worker is ready (start_at and until, on
    time.monotonic(), into spec) and returns at start_at. However long
    loading took (a sanitizer build, a loaded host), every worker starts
    together and runs the whole time."""
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    start_at, until = sys.stdin.readline().split()
    spec["start_at"], spec["until"] = float(start_at), float(until)
    now = time.monotonic()
    if spec["start_at"] > now:
        time.sleep(spec["start_at"] - now)


class Worker:
    def __init__(self, spec):
        self.spec = spec
        self.me = spec["name"]
        self.res = spec["resource"]
        self.ttl = spec["ttl_ms"]
        self.rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
        self.store = fence_store.Store(spec["fence_db"])
        self.out = {"name": self.me, "pid": os.getpid(), "acquisitions": 0, "completed": 0,
                    "overlaps": 0, "nulls": 0, "errors": 0, "error_samples": [],
                    "release_not_1": 0, "extends": 0, "extensions": 0, "extends_lost": 0, "reentries": 0,
                    "reentry_wrong": 0, "paused": 0, "loss_seen": 0, "loss_unseen": 0,
                    "abandoned": 0, "late_writes": 0, "node_changes": 0,
                    "node_changes_refused": 0, "zero_validity": 0, "holds": []}
        self.con = None
        self.uses = 0
        self.connect()

    # -- connection --------------------------------------------------------
    def connect(self):
        if self.con is not None:
            self.con.close()
        self.con = open_connection(self.spec)
        self.uses = 0

    def one(self, sql, *args):
        return self.con.execute(sql, args).fetchone()[0]

    def sample(self, text):
        if len(self.out["error_samples"]) < 4:
            self.out["error_samples"].append(text[:300])

    def chance(self, key):
        return self.rng.random() < self.spec.get(key, 0)

    # -- node-list changes -------------------------------------------------
    def churn_nodes(self):
        """Takes one row out of redlock_nodes and puts the same URL back:
        the same servers, a changed list. Refused while locks are held is
        fine (counted); an error is not."""
        try:
            row = self.con.execute("SELECT id, host, port FROM redlock_nodes ORDER BY random() LIMIT 1").fetchone()
            self.con.execute("DELETE FROM redlock_nodes WHERE id = ?", (row[0],))
            self.con.execute("INSERT INTO redlock_nodes(host, port) VALUES (?, ?)", (row[1], row[2]))
            self.out["node_changes"] += 1
        except sqlite3.Error as e:
            if "hold" in str(e) or "held" in str(e):
                self.out["node_changes_refused"] += 1
            else:
                self.out["errors"] += 1
                self.sample("node change: %s" % e)
            # whatever happened, the list must hold every server again
            have = {(h, p) for h, p in self.con.execute("SELECT host, port FROM redlock_nodes")}
            for url in self.spec["nodes"].split(","):
                hp = url.split("//", 1)[1].rsplit("@", 1)[-1]
                host, port = hp.rsplit(":", 1)
                if (host, int(port)) not in have:
                    self.con.execute("INSERT INTO redlock_nodes(url) VALUES (?)", (url,))

    # -- the marker file -----------------------------------------------------
    def take_marker(self, hid, lease_end):
        """Creates the marker (O_EXCL) holding our id and lease end. One left
        by a holder whose lease has ended (it was paused) is replaced; one of
        a holder still within its lease is an overlap."""
        path = self.spec["marker"]
        for _ in range(3):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, ("%s %.6f" % (hid, lease_end)).encode())
                os.close(fd)
                return True
            except FileExistsError:
                owner, end = self.read_marker()
                if owner is not None and end > time.monotonic():
                    break
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        self.out["overlaps"] += 1
        return False

    def read_marker(self):
        try:
            with open(self.spec["marker"]) as f:
                owner, end = f.read().split()
            return owner, float(end)
        except (OSError, ValueError):
            return None, 0.0

    def drop_marker(self, hid, lost, lease_end):
        """Removes our marker while our lease lasts; past it, it is left to
        the next holder, whose take_marker replaces a marker whose lease has
        ended (and might do so between our read and our unlink). Another
        holder's marker in its place is an overlap only while our lease
        lasts: a holder descheduled past its lease is a late write, counted
        as such."""
        owner, _ = self.read_marker()
        if owner == hid:
            if time.monotonic() < lease_end:  # past it, the next holder may be replacing it
                try:
                    os.unlink(self.spec["marker"])
                except FileNotFoundError:
                    pass
        elif not lost and time.monotonic() < lease_end:
            self.out["overlaps"] += 1     # someone took it while we held the lock

    def lease_from(self, sql, *args):
        """Runs sql (which returns a validity in ms or NULL); returns
        (value, lease end): the end is measured from before the call, a
        lower bound of the end the engine reckons with."""
        t0 = time.monotonic()
        v = self.one(sql, *args)
        return v, (t0 + v / 1000.0 if v else None)

    def pause_here(self, hold):
        """SIGSTOP ourselves; the checker resumes us after more than the TTL.
        Afterwards we must find the lock lost, by one of three checks."""
        self.out["paused"] += 1
        hold["paused"] = True
        os.kill(os.getpid(), signal.SIGSTOP)
        how = self.rng.choice(self.spec.get("pause_checks", ("validity", "extend", "release")))
        if how == "validity":
            lost = self.one("SELECT redlock_validity(?)", self.res) is None
        elif how == "extend":
            v, end = self.lease_from("SELECT redlock_extend(?, ?)", self.res, self.ttl)
            lost = v is None
            if not lost:                # believed: the lease goes on
                hold["lease_end"] = end
        else:
            lost = self.one("SELECT redlock_release(?, ?)", self.res, hold["token"]) == 0
            hold["released"] = True
        if lost:
            self.out["loss_seen"] += 1
        else:
            self.out["loss_unseen"] += 1
            self.sample("paused %s past the TTL, yet the lock was not reported lost (%s)"
                        % (self.me, how))
        return lost or how == "release"

    def hold_ms(self, left):
        r = self.rng.random()
        if r < self.spec.get("nearly_all_p", 0):
            return max(0.0, left - self.rng.uniform(MIN_WRITE_LEFT_MS + 2, MIN_WRITE_LEFT_MS + 8))
        if r < self.spec.get("nearly_all_p", 0) + self.spec.get("long_p", 0):
            return left * self.rng.uniform(0.1, 0.9)
        lo, hi = self.spec["hold_ms"]
        return self.rng.uniform(lo, hi)

    def run_hold(self, tok, t0, t1):
        spec, res = self.spec, self.res
        left, fence, yes = self.con.execute(
            "SELECT redlock_validity(?), redlock_fence(?), (SELECT nodes FROM redlock_locks WHERE resource = ?)",
            (res, res, res)).fetchone()
        hid = "%s#%d" % (self.me, self.out["acquisitions"])
        hold = {"id": hid, "token": tok, "asked": t0, "start": t1, "lease_end": t1 + (left or 0) / 1000.0,
                "fence": fence or 0, "yes": yes or 0, "released": False}
        self.out["acquisitions"] += 1
        if not left:
            # the engine handed out a lock with no validity left: record, hand back
            self.out["zero_validity"] += 1
            hold["lease_end"] = t1
        marker_ok = self.take_marker(hid, hold["lease_end"])
        if fence:
            self.store.write(fence, hid, "begin")
        if self.chance("reenter_p"):
            again = self.one("SELECT redlock_acquire(?, ?)", res, self.ttl)
            self.out["reentries"] += 1
            back = self.one("SELECT redlock_release(?)", res)
            if again != tok or back != 1:
                self.out["reentry_wrong"] += 1
                self.sample("repeated acquire gave %r (held %r), inner release %r" % (again, tok, back))
        if self.chance("churn_p"):
            self.churn_nodes()
        v = read_counter(spec["counter"])
        lost = False
        if left and self.chance("pause_p"):
            lost = self.pause_here(hold)
        # hold, extending before the lease runs out (or auto-extension does)
        target = t1 + self.hold_ms(left or 0) / 1000.0
        if spec.get("long_hold") and self.chance("long_hold_p"):
            target = t1 + self.rng.uniform(0.5, spec["long_hold"]) * self.ttl / 1000.0
        auto = bool(spec.get("config", {}).get("auto_extend"))
        while not lost:
            now = time.monotonic()
            if now >= target:
                break
            extend = False
            if auto:                      # the keeper extends; we read how far
                wake = min(target, now + self.ttl / 4000.0)
            elif target > hold["lease_end"] - 0.002 or self.chance("extend_p"):
                wake = min(target, now + (hold["lease_end"] - now) * self.rng.uniform(0.2, 0.6))
                extend = True
            else:
                wake = target
            if wake > now:
                time.sleep(wake - now)
            if time.monotonic() >= target:
                break
            if auto:
                x, end = self.lease_from("SELECT redlock_validity(?)", res)
            elif extend:
                try:
                    x, end = self.lease_from("SELECT redlock_extend(?, ?)", res, self.ttl)
                except sqlite3.Error as e:       # nodes failed: the lease runs on unchanged
                    self.out["errors"] += 1
                    self.sample("extend: %s" % e)
                    continue
                self.out["extends"] += 1
            else:
                continue
            if not x:
                self.out["extends_lost"] += 1
                lost = True
            else:
                hold["lease_end"] = end
        # check, then do the protected work only while the lock is ours
        if not lost:
            left_now, end = self.lease_from("SELECT redlock_validity(?)", res)
            if left_now:
                hold["lease_end"] = max(hold["lease_end"], end)
            if not left_now:
                lost = True
            elif left_now < MIN_WRITE_LEFT_MS:
                self.out["abandoned"] += 1
            else:
                write_counter(spec["counter"], v + 1, self.me)
                self.out["completed"] += 1
                if time.monotonic() > hold["lease_end"]:
                    self.out["late_writes"] += 1
        if fence:
            # fenced: the resource decides, also for a holder that lost its lock
            self.store.write(fence, hid, "end")
        if marker_ok:
            self.drop_marker(hid, lost, hold["lease_end"])
        if not lost:
            # extensions of this hold as the engine counts them (explicit and automatic)
            n = self.one("SELECT coalesce(max(extensions), 0) FROM redlock_locks WHERE resource = ?", res)
            self.out["extensions"] += n
        t_rel = time.monotonic()
        hold["end"] = min(hold["lease_end"], t_rel)
        if not hold["released"]:
            try:
                r = self.one("SELECT redlock_release(?, ?)", res, tok)
                if r != 1 and not lost and not hold.get("paused"):
                    self.out["release_not_1"] += 1
                    self.sample("release returned %r %.0f ms after the acquire returned (validity was %s ms)"
                                % (r, (t_rel - t1) * 1000, left))
            except sqlite3.Error as e:
                self.out["errors"] += 1
                self.sample("release: %s" % e)
        del hold["token"], hold["released"]
        hold.pop("paused", None)
        self.out["holds"].append(hold)

    def run(self):
        spec = self.spec
        await_start(spec)
        while time.monotonic() < spec["until"]:
            if spec.get("fresh_conn_every") and self.uses >= spec["fresh_conn_every"]:
                self.connect()
            self.uses += 1
            if self.chance("churn_p"):
                self.churn_nodes()
            t0 = time.monotonic()
            try:
                tok = self.one("SELECT redlock_acquire(?, ?, ?)", self.res, self.ttl, spec["wait_ms"])
            except sqlite3.Error as e:
                self.out["errors"] += 1
                self.sample(str(e))
                time.sleep(0.02)
                continue
            t1 = time.monotonic()
            if tok is None:
                self.out["nulls"] += 1
                continue
            self.run_hold(tok, t0, t1)
            if spec.get("think_ms"):
                time.sleep(self.rng.uniform(*spec["think_ms"]) / 1000.0)
        self.out["finished_late_ms"] = round((time.monotonic() - spec["until"]) * 1000)
        self.con.close()
        print(json.dumps(self.out), flush=True)


if __name__ == "__main__":
    Worker(json.loads(sys.argv[1])).run()
