#!/usr/bin/python3
"""One process of test_xact's order proof: `jobs` times

    BEGIN; SELECT redlock_acquire_xact('jobs', 5000, 20000);
    SELECT max(n) FROM j; INSERT INTO j VALUES (max + 1); COMMIT

on one database file (its journal mode is the file's), with a busy
timeout. Says "ready", waits for a line on stdin (so the processes start
together), runs the jobs and exits 0; a job that fails ends it with the
error on stderr.

    /usr/bin/python3 xact_jobs.py '<json spec: ext, nodes, db, jobs, config>'
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import sqlite3
import sys


def main(spec):
    os.environ["REDLOCK_NODES"] = spec["nodes"]
    con = sqlite3.connect(spec["db"], isolation_level=None, timeout=30)
    con.enable_load_extension(True)
    con.load_extension(spec["ext"])
    for k, v in spec.get("config", {}).items():
        con.execute("SELECT redlock_config(?, ?)", (k, v))
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    sys.stdin.readline()
    for _ in range(spec["jobs"]):
        con.execute("BEGIN")
        if con.execute("SELECT redlock_acquire_xact('jobs', 5000, 20000)").fetchone()[0] is None:
            raise SystemExit("the lock was not taken within 20 s")
        top = con.execute("SELECT max(n) FROM j").fetchone()[0] or 0
        con.execute("INSERT INTO j VALUES (?)", (top + 1,))
        con.execute("COMMIT")
    con.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
