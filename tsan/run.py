#!/usr/bin/python3
"""make tsan: runs build/tsan/tsan (tsan/tsan.c) against the extension
built with -fsanitize=thread, on three redis-server nodes started here:
8 threads with a connection each, then 8 threads sharing one serialized
connection. A step passes when the driver did what healthy nodes make
certain and ThreadSanitizer reported nothing.

Usage: /usr/bin/python3 tsan/run.py BUILD_DIR [SECONDS]
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "sql-tests"))
import harness as h  # noqa: E402


def main():
    build = os.path.abspath(sys.argv[1])
    seconds = sys.argv[2] if len(sys.argv) > 2 else "8"
    passed = failed = 0
    with h.Cluster(3) as c:
        # TSan makes every call several times slower: a generous node
        # timeout, so a busy host does not fail the calls themselves.
        env = dict(os.environ, REDLOCK_NODES=h.timeout_env(c, 2000), REDLOCK_TSAN_EXT=os.path.join(build, "redlock"),
                   TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1")
        for mode in ("conns", "shared"):
            try:
                r = subprocess.run([os.path.join(build, "tsan"), mode, seconds], env=env, capture_output=True,
                                   text=True, timeout=float(seconds) * 10 + 60)
                out, err, rc = r.stdout, r.stderr, r.returncode
            except subprocess.TimeoutExpired as e:
                out, err, rc = e.stdout or "", (e.stderr or "") + "\ntimed out", -1
            if isinstance(out, bytes):
                out, err = out.decode(errors="replace"), err.decode(errors="replace")
            races = err.count("WARNING: ThreadSanitizer")
            ok = rc == 0 and races == 0
            if ok:
                passed += 1
                print("PASS tsan.%s: %s" % (mode, out.strip()))
            else:
                failed += 1
                print("FAIL tsan.%s: exit %s, %d ThreadSanitizer report(s)\n%s%s" % (mode, rc, races, out, err[-8000:]))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
