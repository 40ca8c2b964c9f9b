#!/usr/bin/python3
"""One worker process of the fair-queue checker (see checker_fair.py).

    /usr/bin/python3 checker_fair_worker.py '<json spec>'

Loads the extension (checker_worker.open_connection), says it is ready and
waits for the common start (checker_worker.await_start), then loops until
"until": notes time.monotonic() (start), takes the lock (exclusively, or
shared with probability shared_p) with wait_ms, notes the time it returned
(got); while holding it, puts a file for its hold into the holders
directory and looks at the others (an exclusive holder beside any live
holder, or a shared one beside an exclusive one, is a live violation),
holds for a few ms, removes its file and releases. It records every wait
(start, got, whether it got the lock) and every hold's interval [got,
min(lease end, release sent)], and prints one JSON line.
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import random
import sqlite3
import sys
import time

from checker_worker import await_start, mark_holder, open_connection


def main(spec):
    rng = random.Random(os.getpid() ^ int(time.time() * 1e6))
    con = open_connection(spec)
    res, ttl, d = spec["resource"], spec["ttl_ms"], spec["holders_dir"]
    out = {"name": spec["name"], "acquisitions": 0, "nulls": 0, "errors": 0, "error_samples": [],
           "live_violations": 0, "violation_samples": [], "waits": [], "holds": []}
    await_start(spec)
    n = 0
    while time.monotonic() < spec["until"]:
        shared = rng.random() < spec.get("shared_p", 0)
        kind = "shared" if shared else "exclusive"
        t0 = time.monotonic()
        try:
            if shared:
                tok = con.execute("SELECT redlock_acquire_shared(?, ?, ?)", (res, ttl, spec["wait_ms"])).fetchone()[0]
            else:
                tok = con.execute("SELECT redlock_acquire(?, ?, ?)", (res, ttl, spec["wait_ms"])).fetchone()[0]
        except sqlite3.Error as e:
            out["errors"] += 1
            if len(out["error_samples"]) < 4:
                out["error_samples"].append(str(e)[:300])
            time.sleep(0.02)
            continue
        t1 = time.monotonic()
        out["waits"].append([t0, t1, 1 if tok else 0, kind[0]])
        if tok is None:
            out["nulls"] += 1
            continue
        left = con.execute("SELECT redlock_validity(?)", (res,)).fetchone()[0] or 0
        lease_end = t1 + left / 1000.0
        n += 1
        hid = "%s-%d" % (spec["name"], n)
        out["acquisitions"] += 1
        path, others_x, others_s = mark_holder(d, kind, hid, lease_end)
        if (others_x or (not shared and others_s)) and time.monotonic() < lease_end:
            out["live_violations"] += 1
            if len(out["violation_samples"]) < 4:
                out["violation_samples"].append("%s beside %d exclusive and %d shared live holders"
                                                % (kind, others_x, others_s))
        hold = rng.uniform(*spec["hold_ms"]) / 1000.0
        time.sleep(max(0.0, min(hold, lease_end - time.monotonic() - 0.004)))
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        t_rel = time.monotonic()
        out["holds"].append({"kind": kind, "start": t1, "end": min(lease_end, t_rel), "id": hid})
        try:
            con.execute("SELECT redlock_release(?, ?)", (res, tok)).fetchone()
        except sqlite3.Error as e:
            out["errors"] += 1
            if len(out["error_samples"]) < 4:
                out["error_samples"].append("release: %s" % str(e)[:300])
        if spec.get("think_ms"):
            time.sleep(rng.uniform(*spec["think_ms"]) / 1000.0)
    con.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
