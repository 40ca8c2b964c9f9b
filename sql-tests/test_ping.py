"""redlock_ping(): contacts every node now (down ones too, whatever their
backoff) and returns how many answered; redlock_nodes then shows their real
state."""
# SPDX-License-Identifier: BSD-3-Clause

import harness as h
from harness import check, eq, node_rows, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)


def states(con):
    return [r["state"] for r in node_rows(con)]


def test_ping_shows_real_state_3n():
    with h.Cluster(3) as cl:
        con = h.connect(cl, reconnect_max_ms=600000, reconnect_min_ms=600000)
        eq(states(con), ["idle"] * 3, "states before any call")
        eq(value(con, "SELECT redlock_ping()"), 3, "all three answer")
        eq(states(con), ["up"] * 3, "states after ping")
        cl[1].kill9()
        eq(value(con, "SELECT redlock_ping()"), 2, "one node killed")
        st = states(con)
        eq(st, ["up", "down", "up"], "states after ping with a killed node")
        check(node_rows(con)[1]["last_error"], "the killed node has a last_error")
        cl[1].restart()
        # The node's backoff is ten minutes: only ping's own retry brings it back.
        eq(value(con, "SELECT redlock_ping()"), 3, "the restarted node answers ping at once")
        eq(states(con), ["up"] * 3, "states after the restart")


def test_ping_counts_unfit_nodes_as_answering_1n():
    node = h.RedisNode(extra_args=["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"])
    try:
        con = h.connect([node])
        eq(value(con, "SELECT redlock_ping()"), 1, "an evicting node still answers")
        eq(states(con), ["evicting"], "and shows why it does not vote")
    finally:
        node.terminate()


def test_ping_no_nodes():
    con = h.connect([])
    value(con, "DELETE FROM redlock_nodes")
    eq(value(con, "SELECT redlock_ping()"), 0, "no nodes: none answered")


def test_ping_in_check_constraint_refused_1n():
    """A database file cannot make the reader ping its nodes: the schema
    guard refuses redlock_ping() named in a CHECK constraint."""
    import os
    import sqlite3
    import tempfile
    c = h.shared_cluster(1)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hostile.db")
        db = sqlite3.connect(path, isolation_level=None)
        db.create_function("redlock_ping", 0, lambda: 1, deterministic=True)
        db.execute("CREATE TABLE joblog(tok CHECK (redlock_ping() >= 0))")
        db.close()
        con = h.connect(c)
        con.execute("ATTACH ? AS h", (path,))
        h.redlock_error(con, "INSERT INTO h.joblog(tok) VALUES (1)", contains=("redlock_ping", "joblog"))
        con.execute("DETACH h")
        eq(value(con, "SELECT redlock_ping()"), 1, "a direct call still works")
