#!/usr/bin/python3
"""One waiter process of the fair-queue tests (test_fair.py) and checker
(checker_fair.py).

    /usr/bin/python3 fair_waiter.py '<json spec>'

Loads the extension (REDLOCK_NODES from spec["nodes"], then spec["config"]
through redlock_config), says "ready" and waits for a line on stdin; then
takes spec["res"] exclusively (kind "x", redlock_acquire) or shared (kind
"s", redlock_acquire_shared) with spec["ttl_ms"] and spec["wait_ms"],
holds it for spec["hold_ms"], releases it and prints one JSON line:
name, start and got (time.monotonic() just before the acquire and just
after it returned: CLOCK_MONOTONIC, the same in every process of the
machine), released, and whether it got a token (or the error).
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import sqlite3
import sys
import time


def main(spec):
    os.environ["REDLOCK_NODES"] = spec["nodes"]
    con = sqlite3.connect(":memory:", isolation_level=None)
    con.enable_load_extension(True)
    con.load_extension(spec["ext"])
    con.enable_load_extension(False)
    for k, v in spec.get("config", {}).items():
        con.execute("SELECT redlock_config(?, ?)", (k, v))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    out = {"name": spec["name"], "kind": spec.get("kind", "x"), "tok": False}
    fn = "redlock_acquire_shared" if spec.get("kind") == "s" else "redlock_acquire"
    out["start"] = time.monotonic()
    try:
        tok = con.execute("SELECT %s(?, ?, ?)" % fn, (spec["res"], spec["ttl_ms"], spec["wait_ms"])).fetchone()[0]
    except sqlite3.Error as e:
        tok, out["error"] = None, str(e)
    out["got"] = time.monotonic()
    if tok:
        out["tok"] = True
        time.sleep(spec.get("hold_ms", 0) / 1000.0)
        out["released"] = time.monotonic()
        con.execute("SELECT redlock_release(?, ?)", (spec["res"], tok)).fetchone()
    con.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
