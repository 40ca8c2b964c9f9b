"""redlock_events: the connection's last 100 events (what sqlite3_log
carries: node down, up and refused, acquisitions without a quorum, locks
lost), read from the shell, Python's default mode and Node: kinds, nodes,
names, messages, times, oldest first; bounded to the last 100; no token or
password in them.

Run: /usr/bin/python3 sql-tests/run.py test_events
"""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import subprocess
import time
import unittest

import harness as h
from harness import check, eq, is_token, value, wait_until

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

TTL = 900  # ms: the keeper extends at a third of it, so a deleted key is found gone within 300 ms


def _default_mode(nodes, database=":memory:", **config):
    """A connection in Python's default sqlite3 mode (isolation_level "":
    the module opens a transaction before INSERT/UPDATE/DELETE)."""
    con = h.connect(nodes, database, **config)
    con.isolation_level = ""
    return con


def test_events_in_python_default_mode_3n():
    with h.Cluster(3) as c:
        con = _default_mode(h.timeout_env(c), auto_extend=1)
        eq(h.rows(con, "SELECT * FROM redlock_events"), [], "no event while all is well")
        tok = is_token(value(con, "SELECT redlock_acquire('job', ?)", TTL))
        c[1].kill9()
        eq(value(con, "SELECT redlock_ping()"), 2, "ping with node 2 killed")
        for n in (c[0], c[2]):
            n.cmd("DEL", "job")
        wait_until(lambda: value(con, "SELECT count(*) FROM redlock_events WHERE kind = 'lock_lost'"),
                   what="the keeper to find 'job' lost")
        c[1].restart()
        eq(value(con, "SELECT redlock_ping()"), 3, "ping after the restart")
        rows = h.rows(con, "SELECT id, kind, node_id, resource, message, time_ms, age_ms FROM redlock_events")
        eq([(k, n, r) for _, k, n, r, _, _, _ in rows],
           [("node_down", 2, None), ("lock_lost", None, "job"), ("node_up", 2, None)], "kinds, nodes, names")
        eq([r[0] for r in rows], sorted(r[0] for r in rows), "oldest first")
        check(rows[0][4].startswith("redlock: node 2 127.0.0.1:%d marked down" % c[1].port), "message: %r" % rows[0][4])
        check(rows[1][4].startswith("redlock: lock 'job' lost"), "message: %r" % rows[1][4])
        now_ms = int(time.time() * 1000)
        for r in rows:
            check(abs(r[5] - now_ms) < 60000 and 0 <= r[6] < 60000, "time_ms and age_ms: %r" % (r,))
        check(tok not in repr(rows), "no token in the events")
        eq(h.rows(con, "SELECT count(*) FROM redlock_events WHERE id > 1"), [(2,)], "filtered by id")
        check(not con.in_transaction, "reading events opened no transaction")


def test_events_in_shell_3n():
    with h.Cluster(3) as c:
        c[2].kill9()
        out = h.sh("""SELECT redlock_ping();
SELECT redlock_config('auto_extend', 1);
SELECT redlock_acquire('job', %d) IS NOT NULL;
%s
%s
SELECT kind, coalesce(node_id, '-'), coalesce(resource, '-') FROM redlock_events;
""" % (TTL, "".join(".system %s -p %d DEL job >/dev/null\n" % (h.REDIS_CLI, n.port) for n in c[:2]),
            h.spin_until("(SELECT count(*) FROM redlock_events WHERE kind = 'lock_lost' AND i >= 0) > 0")), c, "shell")
        eq(out[-2:], ["node_down|3|-", "lock_lost|-|job"], "the events, as the shell prints them")


def test_events_bounded_and_without_secrets_1n():
    node = h.RedisNode(password="s3cret-pw")
    try:
        con = h.connect(node)
        tok = is_token(value(con, "SELECT redlock_acquire('x', 30000)"))
        node.kill9()
        for i in range(150):
            h.redlock_error(con, "SELECT redlock_acquire('n%d', 1000)" % i, contains=("could not lock",))
        rows = h.rows(con, "SELECT id, kind, resource, message FROM redlock_events")
        eq(len(rows), 100, "events kept")
        eq(rows[-1][0] - rows[0][0], 99, "the last 100, in order")
        eq((rows[-1][1], rows[-1][2]), ("no_quorum", "n149"), "the newest")
        text = repr(rows)
        check("s3cret-pw" not in text and tok not in text, "no password or token in the events")
    finally:
        node.terminate()


NODE, NODE_WHY = h.node_setup()


def test_events_in_node_3n():
    if NODE is None:
        raise unittest.SkipTest(NODE_WHY)
    with h.Cluster(3) as c:
        c[0].kill9()
        r = subprocess.run([NODE, os.path.join(h.NODE_DIR, "events.js"), h.EXT_SO], cwd=h.NODE_DIR,
                           env=h.node_env(h.timeout_env(c)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=25)
        eq(r.returncode, 0, "node events.js exit status (stderr: %s)" % r.stderr.strip()[-500:])
        out = json.loads(r.stdout)
        eq(out["ping"], 2, "ping in Node")
        eq([(e["kind"], e["node_id"], e["resource"]) for e in out["events"]], [("node_down", 1, None)],
           "events in Node")
        e = out["events"][0]
        check(e["message"].startswith("redlock: node 1 127.0.0.1:%d marked down" % c[0].port), "message: %r" % e)
        check(e["id"] == 1 and e["time_ms"] > 0 and e["age_ms"] >= 0, "id and times in Node: %r" % e)


if __name__ == "__main__":
    raise SystemExit(h.run_directly(globals()))
