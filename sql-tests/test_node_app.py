"""The extension in a Node app on better-sqlite3 (README "From Node"):
db.loadExtension, a lock taken and released; a wait_ms on the main thread
blocks the event loop (no timer runs during it); the same wait in a worker
thread does not. Skipped when node or npm is missing.

Run: /usr/bin/python3 sql-tests/run.py test_node_app
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import subprocess
import unittest

import harness as h
from harness import check, eq, is_token, no_key

NODE, NODE_WHY = h.node_setup()


def test_better_sqlite3_takes_and_releases_a_lock_3n():
    if NODE is None:
        raise unittest.SkipTest(NODE_WHY)
    c = h.shared_cluster(3)
    r = subprocess.run([NODE, os.path.join(h.NODE_DIR, "app.js"), h.EXT_SO, "node:app"], cwd=h.NODE_DIR,
                       env=h.node_env(c), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=25)
    eq(r.returncode, 0, "node app.js exit status (stderr: %s)" % r.stderr.strip()[-500:])
    out = json.loads(r.stdout)
    tok = is_token(out["token"], "the token in Node")
    check(0 < out["validity"] <= 30000, "validity in Node: %r" % out)
    eq(out["blocked_result"], None, "a second connection is refused after its wait")
    eq(out["ticks_during_blocking_wait"], 0, "timers during a wait_ms on the main thread")
    eq(out["worker_result"], None, "the worker's acquire is refused after its wait")
    check(out["ticks_during_worker_wait"] > 0, "the event loop ran while the worker waited: %r" % out)
    eq(out["released"], 1, "released in Node")
    no_key(c, "node:app", "after the Node app")
    check(tok not in r.stderr, "no token on stderr")
