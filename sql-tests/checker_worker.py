#!/usr/bin/python3
"""One worker process of the mutual-exclusion checker (see checker.py).

    /usr/bin/python3 checker_worker.py '<json spec>'

Loads the extension (REDLOCK_NODES from the spec), waits until spec
"start_at" (time.monotonic(), which is CLOCK_MONOTONIC and so comparable
between processes on one machine), then loops until "until":

    token = redlock_acquire(resource, ttl_ms, wait_ms)
    create the marker file with O_CREAT|O_EXCL     (exists already: overlap)
    read the counter file, sleep a little, write counter + 1   (not atomic)
    remove the marker
    redlock_release(resource, token)

and prints one JSON line: acquisitions, overlaps, nulls, errors (first few
messages), and the [start, end] of every hold for the checker to compare.
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import random
import sqlite3
import sys
import time


def read_counter(path):
    with open(path) as f:
        return int(f.read().strip() or "0")


def write_counter(path, value, me):
    tmp = "%s.%s.tmp" % (path, me)
    with open(tmp, "w") as f:
        f.write("%d\n" % value)
    os.replace(tmp, path)        # a whole value or the old one: never torn


def main(spec):
    me = spec["name"]
    os.environ["REDLOCK_NODES"] = spec["nodes"]
    con = sqlite3.connect(":memory:", isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(spec["ext"])
    con.enable_load_extension(False)
    for k, v in spec.get("config", {}).items():
        con.execute("SELECT redlock_config(?, ?)", (k, v))
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
    out = {"name": me, "acquisitions": 0, "overlaps": 0, "nulls": 0, "errors": 0,
           "error_samples": [], "release_not_1": 0, "holds": []}
    counter, marker = spec["counter"], spec["marker"]
    hold_lo, hold_hi = spec["hold_ms"]
    now = time.monotonic()
    out["ready_late_ms"] = round((now - spec["start_at"]) * 1000)   # > 0: loaded after the start
    if spec["start_at"] > now:
        time.sleep(spec["start_at"] - now)
    while time.monotonic() < spec["until"]:
        try:
            tok = con.execute("SELECT redlock_acquire(?, ?, ?)",
                              (spec["resource"], spec["ttl_ms"], spec["wait_ms"])).fetchone()[0]
        except sqlite3.Error as e:
            out["errors"] += 1
            if len(out["error_samples"]) < 3:
                out["error_samples"].append(str(e)[:300])
            time.sleep(0.02)
            continue
        if tok is None:
            out["nulls"] += 1
            continue
        t_start = time.monotonic()
        overlap = False
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            os.write(fd, me.encode())
            os.close(fd)
        except FileExistsError:
            overlap = True
            out["overlaps"] += 1
        v = read_counter(counter)
        time.sleep(rng.uniform(hold_lo, hold_hi) / 1000.0)
        write_counter(counter, v + 1, me)
        out["acquisitions"] += 1
        if not overlap:
            try:
                os.unlink(marker)
            except FileNotFoundError:   # someone else removed ours: also an overlap
                out["overlaps"] += 1
        t_end = time.monotonic()
        out["holds"].append([t_start, t_end])
        try:
            r = con.execute("SELECT redlock_release(?, ?)", (spec["resource"], tok)).fetchone()[0]
            if r != 1:
                out["release_not_1"] += 1
                if len(out["error_samples"]) < 3:
                    out["error_samples"].append("release returned %r %.0f ms after the acquire returned"
                                                % (r, (time.monotonic() - t_start) * 1000))
        except sqlite3.Error as e:
            out["errors"] += 1
            if len(out["error_samples"]) < 3:
                out["error_samples"].append(str(e)[:300])
    out["finished_late_ms"] = round((time.monotonic() - spec["until"]) * 1000)
    con.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
