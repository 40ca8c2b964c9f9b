"""The scripts of every cycle go by digest (EVALSHA) once a node has run
them on the connection, and a node that lost them (SCRIPT FLUSH) or a user
refused EVALSHA still gets every command, sent again in full.

Run: /usr/bin/python3 sql-tests/run.py test_evalsha
 or: /usr/bin/python3 sql-tests/test_evalsha.py   (prints the evidence)
"""
# SPDX-License-Identifier: BSD-3-Clause

import sys

import harness as h
from faultproxy import FaultProxy
from harness import eq, is_token, note, run_directly as _run_directly, timeout_env as env

USER_PW = "Ev4l-Pa55-word"


def _calls(node):
    """{command: calls} from INFO commandstats, for EVAL and EVALSHA."""
    out = {"eval": 0, "evalsha": 0}
    for line in node.cmd("INFO", "commandstats").splitlines():
        for name in out:
            if line.startswith("cmdstat_%s:" % name):
                out[name] = int(line.split("calls=")[1].split(",")[0])
    return out


def _fresh(nodes):
    for n in nodes:
        n.cmd("SCRIPT", "FLUSH")
        n.cmd("CONFIG", "RESETSTAT")


def _cycle(con, res):
    tok = h.value(con, "SELECT redlock_acquire(?, 10000)", res)
    is_token(tok, "token of %s" % res)
    return tok


def test_cycle_scripts_go_by_digest_after_their_first_run_1n():
    c = h.shared_cluster(1)
    _fresh(c.nodes)
    con = h.connect(env(c))
    for i in range(5):
        _cycle(con, "dg:%d" % i)
        eq(h.value(con, "SELECT redlock_release(?)", "dg:%d" % i), 1, "release %d" % i)
    calls = _calls(c.nodes[0])
    note("5 cycles on a fresh connection: %r" % calls)
    # the first acquire and the first release run in full, as does the new
    # connection's ACL probe (src/rl_acl.h); the 8 after them by digest;
    # and the connection's holder details, written once, in full
    eq(calls, {"eval": 4, "evalsha": 8}, "EVAL and EVALSHA calls")
    con.execute("SELECT redlock_config('evalsha', 0)")
    _fresh(c.nodes)
    _cycle(con, "dg:off")
    eq(h.value(con, "SELECT redlock_release('dg:off')"), 1, "release with evalsha 0")
    eq(_calls(c.nodes[0]), {"eval": 2, "evalsha": 0}, "calls with evalsha 0")


def test_script_flush_between_calls_still_reaches_every_node_3n():
    c = h.shared_cluster(3)
    # every node's answer is needed, so the call waits for node 2's as well:
    # with a majority it may be decided before node 2's NOSCRIPT is read,
    # and an answer read after the decision is never sent again (a cleanup
    # may be on its way behind it)
    con = h.connect(env(c), unsafe_test_quorum=3)
    for i in range(2):  # every cycle script cached on every node
        _cycle(con, "fl:warm%d" % i)
        con.execute("SELECT redlock_release(?)", ("fl:warm%d" % i,))
    _fresh(c.nodes[1:2])  # node 2 forgets them; this connection does not know
    tok = _cycle(con, "fl:a")
    # the acquire answered NOSCRIPT on node 2 and was sent again in full: the
    # lock is on all three nodes, not only on the quorum of the other two
    eq(c.values("fl:a"), [tok] * 3, "fl:a on the nodes")
    stats = h.rows(con, "SELECT id, errors FROM redlock_stats ORDER BY id")
    eq([r[1] for r in stats], [0, 0, 0], "errors per node")
    _fresh(c.nodes[1:2])
    eq(h.value(con, "SELECT redlock_release('fl:a')"), 1, "release after the second flush")
    h.no_key(c, "fl:a", "fl:a after its release", settle_cons=(con,))
    calls = _calls(c.nodes[1])
    note("node 2 after a flush and a release: %r" % calls)
    eq(calls["evalsha"] >= 1 and calls["eval"] >= 1, True, "node 2 got the release by digest, then in full")


def test_release_decided_before_a_late_noscript_still_runs_there_3n():
    """The release is decided by nodes 1 and 2 while node 3, whose replies
    are slow, still owes its answer; node 3 lost the script (SCRIPT FLUSH),
    so that answer, late, is NOSCRIPT: the release never ran there. It is
    sent again in full, so the key does not stay on node 3 for its TTL."""
    with h.Cluster(3) as c:
        p = FaultProxy(c[2].host, c[2].port)
        try:
            con = h.connect([c[0].url, c[1].url, p.url], timeout_ms=5000)
            for i in range(2):  # every script cached on every node's connection
                _cycle(con, "ln:%d" % i)
                eq(h.value(con, "SELECT redlock_release(?)", "ln:%d" % i), 1, "release %d" % i)
            h.settle(con)
            tok = is_token(h.value(con, "SELECT redlock_acquire('ln', 60000)"), "token of ln")
            h.settle(con)
            eq([n.get("ln") for n in c], [tok] * 3, "the lock on every node")
            c[2].cmd("SCRIPT", "FLUSH")
            p.delay_replies(300)
            eq(h.value(con, "SELECT redlock_release('ln')"), 1, "release, decided by nodes 1 and 2")
            eq([c[0].get("ln"), c[1].get("ln")], [None, None], "the key on nodes 1 and 2")
            h.wait_until(lambda: h.value(con, "SELECT redlock_ping()") is not None and c[2].get("ln") is None,
                         10, interval=0.05, what="the key on node 3, after its late NOSCRIPT")
        finally:
            p.close()


def test_script_flush_on_the_only_node_is_not_an_error_1n():
    c = h.shared_cluster(1)
    con = h.connect(env(c))
    _cycle(con, "fo:warm")
    con.execute("SELECT redlock_release('fo:warm')")
    _fresh(c.nodes)
    tok = _cycle(con, "fo:a")
    eq(c.values("fo:a"), [tok], "fo:a on the node")
    _fresh(c.nodes)
    eq(h.value(con, "SELECT redlock_release('fo:a')"), 1, "release after a flush")
    eq(c.nodes[0].get("fo:a"), None, "fo:a after its release")


def test_user_refused_evalsha_gets_every_command_in_full_1n():
    n = h.RedisNode()
    n.cmd("ACL", "SETUSER", "noevalsha", "on", ">" + USER_PW, "~*", "&*", "+@all", "-evalsha")
    url = "redis://noevalsha:%s@127.0.0.1:%d?timeout_ms=250" % (USER_PW, n.port)
    con = h.connect(url)
    for i in range(4):
        _cycle(con, "ne:%d" % i)
        eq(h.value(con, "SELECT redlock_release(?)", "ne:%d" % i), 1, "release %d" % i)
    eq([n.get("ne:%d" % i) for i in range(4)], [None] * 4, "keys after their releases")
    calls = _calls(n)
    note("a user without EVALSHA, 4 cycles: %r" % calls)
    eq(calls["evalsha"], 0, "EVALSHA calls that ran")


def test_server_without_evalsha_gets_every_command_in_full_1n():
    """A server where EVALSHA is renamed away (rename-command, as some
    managed services do) answers 'unknown command': the command did not
    run, so it goes again in full within the same call, and the connection
    stops trying EVALSHA. Every call works, none fails on alternate cycles."""
    n = h.RedisNode(extra_args=["--rename-command", "EVALSHA", ""])
    try:
        con = h.connect("redis://127.0.0.1:%d?timeout_ms=250" % n.port)
        for i in range(6):
            _cycle(con, "nu:%d" % i)
            eq(h.value(con, "SELECT redlock_release(?)", "nu:%d" % i), 1, "release %d" % i)
        eq([n.get("nu:%d" % i) for i in range(6)], [None] * 6, "keys after their releases")
        eq(h.value(con, "SELECT errors FROM redlock_stats"), 0, "errors counted for the node")
        note("a server without EVALSHA, 6 cycles: %r" % _calls(n))
    finally:
        n.terminate()


if __name__ == "__main__":
    sys.exit(_run_directly(globals()))
