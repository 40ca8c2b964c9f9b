#!/usr/bin/python3
"""What the COMMIT guard of redlock_acquire_xact costs per commit.

Starts 3 redis-server nodes of its own on free loopback ports, then, on a
database file in WAL and in rollback-journal mode, with synchronous=OFF (no
fsync to hide a CPU cost) and FULL (the default), times with
CLOCK_MONOTONIC the median of N jobs of each kind:

    session  SELECT redlock_acquire; BEGIN; INSERT; COMMIT; SELECT redlock_release
    xact     BEGIN; SELECT redlock_acquire_xact; INSERT; COMMIT (the release is in COMMIT)

and, of each, the COMMIT alone and the lock calls. "guard" is the xact
COMMIT less the session COMMIT and the session release: what xSync adds
(the guard's check, and in rollback-journal mode the early flush that takes
the file's EXCLUSIVE lock before it). Prints one table; asserts nothing.

    /usr/bin/python3 bench/xact_commit.py [N]      (default 1000)
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nodes(n):
    procs, urls = [], []
    for _ in range(n):
        port = free_port()
        argv = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        urls.append("redis://127.0.0.1:%d" % port)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.01)
    return procs, urls


def connect(path, urls, mode, sync):
    os.environ["REDLOCK_NODES"] = ",".join(urls)
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=%s" % mode)
    con.execute("PRAGMA synchronous=%s" % sync)
    con.execute("CREATE TABLE IF NOT EXISTS j(n)")
    con.enable_load_extension(True)
    con.load_extension(os.path.join(REPO, "redlock"))
    return con


def timed(con, sql, laps):
    t0 = time.monotonic_ns()
    con.execute(sql).fetchall()
    laps.append(time.monotonic_ns() - t0)


def measure(con, n):
    s = {k: [] for k in ("s_job", "s_commit", "s_release", "s_acquire", "x_job", "x_commit",
                         "x_acquire")}
    for i in range(n):
        t0 = time.monotonic_ns()
        timed(con, "SELECT redlock_acquire('bx', 10000)", s["s_acquire"])
        con.execute("BEGIN")
        con.execute("INSERT INTO j VALUES (1)")
        timed(con, "COMMIT", s["s_commit"])
        timed(con, "SELECT redlock_release('bx')", s["s_release"])
        s["s_job"].append(time.monotonic_ns() - t0)
        t0 = time.monotonic_ns()
        con.execute("BEGIN")
        timed(con, "SELECT redlock_acquire_xact('bx', 10000)", s["x_acquire"])
        con.execute("INSERT INTO j VALUES (1)")
        timed(con, "COMMIT", s["x_commit"])
        s["x_job"].append(time.monotonic_ns() - t0)
    return {k: statistics.median(v) / 1000.0 for k, v in s.items()}


def main(argv):
    n = int(argv[1]) if len(argv) > 1 else 1000
    procs, urls = start_nodes(3)
    try:
        print("| journal mode, synchronous | session job | xact job | session COMMIT + release "
              "| xact COMMIT | guard | acquire / acquire_xact |")
        print("|---|---|---|---|---|---|---|")
        for mode, sync in (("wal", "OFF"), ("delete", "OFF"), ("wal", "FULL"), ("delete", "FULL")):
            with tempfile.TemporaryDirectory() as d:
                con = connect(os.path.join(d, "b.db"), urls, mode, sync)
                measure(con, 100)  # warm-up
                m = measure(con, n)
                con.close()
            guard = m["x_commit"] - m["s_commit"] - m["s_release"]
            print("| %s, %s | %.0f us | %.0f us | %.0f + %.0f us | %.0f us | %+.0f us "
                  "| %.0f / %.0f us |"
                  % (mode, sync, m["s_job"], m["x_job"], m["s_commit"], m["s_release"],
                     m["x_commit"], guard, m["s_acquire"], m["x_acquire"]))
        print("\n3 local nodes, %d jobs of each kind per mode, medians" % n)
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
