#!/usr/bin/python3
"""One worker process of the shared-lock checker (see checker_shared.py).

    /usr/bin/python3 checker_shared_worker.py '<json spec>'

Loads the extension, says it is ready and waits for the common start
(checker_worker.await_start: "start_at" and "until" on time.monotonic(),
shared by the processes of one machine), then loops until "until": takes the lock
shared (redlock_acquire_shared with the spec's max_holders) or, with
probability exclusive_p, exclusively (redlock_acquire); while holding it,
puts a file for its hold into the holders directory (its kind and lease
end) and looks at the others: an exclusive holder beside any live holder,
or more than max_holders live shared holders, is counted as a live
violation. It holds for a few ms (sometimes a good part of the validity),
removes its file, releases, and records the hold's interval [acquire
returned, min(lease end, release sent)] for the checker's sweep.
It prints one JSON line."""
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
    res, ttl, k = spec["resource"], spec["ttl_ms"], spec["max_holders"]
    d = spec["holders_dir"]
    out = {"name": spec["name"], "acquisitions": 0, "shared": 0, "exclusive": 0, "nulls": 0, "errors": 0,
           "error_samples": [], "live_violations": 0, "violation_samples": [], "release_not_1": 0, "holds": []}
    await_start(spec)
    n = 0
    while time.monotonic() < spec["until"]:
        excl = rng.random() < spec.get("exclusive_p", 0)
        try:
            if excl:
                tok = con.execute("SELECT redlock_acquire(?, ?, ?)", (res, ttl, spec["wait_ms"])).fetchone()[0]
            else:
                tok = con.execute("SELECT redlock_acquire_shared(?, ?, ?, ?)",
                                  (res, ttl, spec["wait_ms"], k)).fetchone()[0]
        except sqlite3.Error as e:
            out["errors"] += 1
            if len(out["error_samples"]) < 4:
                out["error_samples"].append(str(e)[:300])
            time.sleep(0.02)
            continue
        t1 = time.monotonic()
        if tok is None:
            out["nulls"] += 1
            continue
        left = con.execute("SELECT redlock_validity(?)", (res,)).fetchone()[0] or 0
        lease_end = t1 + left / 1000.0
        n += 1
        hid = "%s-%d" % (spec["name"], n)
        kind = "exclusive" if excl else "shared"
        out["acquisitions"] += 1
        out[kind] += 1
        path, others_x, others_s = mark_holder(d, kind, hid, lease_end)  # and who else holds it now
        bad = (excl and others_x + others_s > 0) or (not excl and others_x > 0) or \
              (not excl and k and others_s + 1 > k)
        if bad and time.monotonic() < lease_end:
            out["live_violations"] += 1
            if len(out["violation_samples"]) < 4:
                out["violation_samples"].append("%s beside %d exclusive and %d shared live holders"
                                                % (kind, others_x, others_s))
        hold = rng.uniform(*spec["hold_ms"]) / 1000.0
        if rng.random() < spec.get("long_p", 0):
            hold = left / 1000.0 * rng.uniform(0.1, 0.7)
        time.sleep(max(0.0, min(hold, lease_end - time.monotonic() - 0.004)))
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        t_rel = time.monotonic()
        out["holds"].append({"kind": kind, "start": t1, "end": min(lease_end, t_rel), "id": hid})
        try:
            r = con.execute("SELECT redlock_release(?, ?)", (res, tok)).fetchone()[0]
            if r != 1 and t_rel < lease_end:
                out["release_not_1"] += 1
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
