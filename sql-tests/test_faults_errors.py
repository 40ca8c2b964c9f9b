"""Faults, error replies: one node of three at a time answers with an error
(NOAUTH, WRONGPASS, WRONGTYPE, READONLY, OOM, MISCONF, LOADING; NOSCRIPT
must not happen at all). Each is provoked for real on a real redis-server.
For each: the lock is still taken on the two healthy nodes, the node's
redlock_nodes.last_error shows the reason, and the error is never counted as
a yes: with unsafe_test_quorum = 3 (every node must say yes) the acquire
fails."""
# SPDX-License-Identifier: BSD-3-Clause

import shutil
import time

import harness as h
from harness import check, eq, holds, is_token, node_rows, report, value


def last_error(con, port):
    for r in node_rows(con):
        if r["port"] == port:
            return r["last_error"]
    raise AssertionError("no redlock_nodes row for port %d" % port)


def _one_bad_node(bad, good, bad_url, reason, key="e", may_hold=False, label=None):
    """bad answers with an error reply containing `reason`; good are two
    healthy nodes. bad_url is how the extension reaches bad."""
    urls = [bad_url] + [g.url for g in good]
    con = h.connect(urls)
    tok = is_token(value(con, "SELECT redlock_acquire(?, 10000)", key),
                   "acquire with one node answering %s" % reason)
    holds(good, key, tok, 10000, "healthy nodes")
    try:
        on_bad = bad.cmd("GET", key)
    except h.RedisError as e:          # LOADING: it cannot even be read
        on_bad = e
    check(may_hold or on_bad != tok, "the node answering %s holds our token" % reason)
    err = last_error(con, bad.port)
    check(isinstance(err, str) and reason in err,
          "last_error of the node answering %s: %r" % (reason, err))
    v = value(con, "SELECT redlock_extend(?, 10000)", key)
    check(isinstance(v, int) and v > 0, "extend with one node answering %s: %r" % (reason, v))
    eq(value(con, "SELECT redlock_release(?)", key), 1, "release with one node answering %s" % reason)
    h.settle(con)  # decided by the healthy nodes: the bad node's release may still be on its way
    for g in good:
        eq(g.cmd("EXISTS", key), 0, "key on %s after release" % g.addr)
    if may_hold:
        eq(bad.cmd("EXISTS", key), 0, "key on the node answering %s after release" % reason)

    # every node must say yes: the error reply must not be one
    strict = h.connect(urls, unsafe_test_quorum=3)
    try:
        r = value(strict, "SELECT redlock_acquire(?, 10000)", key + "3")
    except Exception as e:
        r = e
        msg = str(e)
        check(msg.startswith("redlock: ") and ("%s:%d" % (bad.host, bad.port)) in msg
              and reason in msg, "error with quorum 3 should name the %s node: %r" % (reason, msg))
    check(not isinstance(r, str), "acquire with quorum 3 and one node answering %s returned "
          "a token %r: an error reply was counted as a yes" % (reason, r))
    check(isinstance(r, Exception), "acquire with quorum 3 and one node answering %s returned "
          "%r: an error reply is a failure (an error), not a no (NULL)" % (reason, r))
    for g in good:
        h.wait_until(lambda: g.cmd("EXISTS", key + "3") == 0, 2,
                     what="the failed attempt's key on %s to be cleaned up" % g.addr)
    report("error-reply %-9s last_error=%r; quorum-3 acquire -> error naming the node"
           % (label or reason, err[:70]))


def test_noauth_3n():
    """The server requires a password; the node is configured without one."""
    bad = h.RedisNode(password="s3cret")
    with h.Cluster(2) as good:
        _one_bad_node(bad, good.nodes, bad.url, "NOAUTH")


def test_wrongpass_3n():
    """The server requires a password; the node is configured with a wrong one."""
    bad = h.RedisNode(password="s3cret")
    with h.Cluster(2) as good:
        _one_bad_node(bad, good.nodes, "redis://:wrong@%s" % bad.addr, "WRONGPASS")


def test_wrongpass_acl_user_on_open_server_3n():
    """The node is configured as ACL user alice with a wrong password on a
    server whose default user needs none: AUTH fails but the connection
    still works as the default user. It must not vote as if it were alice."""
    bad = h.RedisNode()
    bad.cmd("ACL", "SETUSER", "alice", "on", ">alicepw", "~*", "&*", "+@all")
    with h.Cluster(2) as good:
        # the commands pipelined behind the failed AUTH still run there (as
        # the default user): the key may be there, but never as a yes
        _one_bad_node(bad, good.nodes, "redis://alice:wrongpw@%s" % bad.addr, "WRONGPASS",
                      may_hold=True, label="WRONGPASS(ACL user, open default user)")


def test_wrongtype_3n():
    """The lock's key holds a list on one node: SET NX answers nil there (a
    no), and the release and extend scripts, which look at the key's type
    first (a shared lock's key is a sorted set), answer "not ours" there
    without touching it: a plain no, not an error."""
    bad = h.RedisNode()
    bad.cmd("RPUSH", "e", "a-list")
    bad.cmd("RPUSH", "e3", "a-list")
    with h.Cluster(2) as good:
        urls = [bad.url] + [g.url for g in good]
        con = h.connect(urls)
        tok = is_token(value(con, "SELECT redlock_acquire('e', 10000)"), "acquire, one key a list")
        holds(good, "e", tok, 10000, "healthy nodes")
        v = value(con, "SELECT redlock_extend('e', 10000)")
        check(isinstance(v, int) and v > 0, "extend with one key a list: %r" % (v,))
        err = last_error(con, bad.port)
        check(err is None or "WRONGTYPE" not in err, "last_error after extend: %r" % (err,))
        eq(value(con, "SELECT redlock_release('e')"), 1, "release with one key a list")
        eq(bad.cmd("TYPE", "e"), "list", "the list is untouched")
        strict = h.connect(urls, unsafe_test_quorum=3)
        eq(value(strict, "SELECT redlock_acquire('e3', 10000)"), None,
           "acquire with quorum 3 and the key a list on one node (a no, not a yes)")
        report("key of another type: a no, last_error=%r; quorum-3 acquire -> NULL" % (err or "")[:70])


def test_readonly_replica_3n():
    """One node is a read-only replica (of a fourth server): SET answers
    READONLY; the node is flagged 'replica'."""
    master = h.RedisNode()
    bad = h.RedisNode()
    bad.cmd("REPLICAOF", master.host, master.port)
    with h.Cluster(2) as good:
        _one_bad_node(bad, good.nodes, bad.url, "READONLY")
        con = h.connect([bad.url] + [g.url for g in good])
        value(con, "SELECT redlock_release('x', redlock_acquire('x', 1000))")
        eq(node_rows(con)[0]["state"], "replica", "state of the replica node")


def test_oom_3n():
    bad = h.RedisNode()
    for i in range(100):
        bad.cmd("SET", "fill%d" % i, "x" * 100)
    bad.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
    bad.cmd("CONFIG", "SET", "maxmemory", "1")
    with h.Cluster(2) as good:
        _one_bad_node(bad, good.nodes, bad.url, "OOM")


def test_misconf_3n():
    """RDB snapshots fail (the data directory is gone) with save rules on and
    stop-writes-on-bgsave-error yes: writes answer MISCONF."""
    bad = h.RedisNode()
    bad.cmd("SET", "something", "to-save")
    bad.cmd("CONFIG", "SET", "stop-writes-on-bgsave-error", "yes")
    bad.cmd("CONFIG", "SET", "save", "3600 1")
    shutil.rmtree(bad.dir)          # its cwd: the snapshot cannot be written
    bad.cmd("BGSAVE")
    h.wait_until(lambda: "rdb_last_bgsave_status:err" in bad.cmd("INFO", "persistence"), 10,
                 what="BGSAVE to fail")
    with h.Cluster(2) as good:
        _one_bad_node(bad, good.nodes, bad.url, "MISCONF")


class LoadingNode(h.RedisNode):
    """A node that counts as started while it answers LOADING."""

    def _wait_ready(self, proc, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                c = h.Resp(self.host, self.port, timeout=1.0)
                try:
                    return c.cmd("PING") == "PONG"
                except h.RedisError as e:
                    return "LOADING" in str(e)
                finally:
                    c.close()
            except OSError:
                time.sleep(0.01)
        return False


def test_loading_3n():
    """A restarted node that is still loading its snapshot answers LOADING
    (made slow for real with the key-load-delay setting)."""
    bad = LoadingNode(extra_args=["--key-load-delay", "250",
                                  "--loading-process-events-interval-bytes", "1024"])
    bad.cmd("EVAL", "for i=1,tonumber(ARGV[1]) do redis.call('set','fill'..i,'v') end", 0, 20000)
    bad.cmd("SAVE")
    bad.kill9()
    bad.restart()                   # loading 20000 keys at 250 us each: ~5 s
    with h.Cluster(2) as good:
        _one_bad_node(bad, good.nodes, bad.url, "LOADING")
    check("loading:1" in bad.cmd("INFO", "persistence"),
          "the node finished loading before the test was done: the test proved nothing")


def test_noscript_never_3n():
    """The engine sends its scripts with EVAL: flushing every node's script
    cache (as a restart does) changes nothing; release still returns 1."""
    with h.Cluster(3) as c:
        con = h.connect(c, unsafe_test_quorum=3)
        for round_no in range(2):
            tok = is_token(value(con, "SELECT redlock_acquire('ns', 10000)"), "acquire")
            for node in c:
                node.cmd("SCRIPT", "FLUSH")
            v = value(con, "SELECT redlock_extend('ns', 10000)")
            check(isinstance(v, int) and v > 0, "extend after SCRIPT FLUSH: %r" % (v,))
            for node in c:
                node.cmd("SCRIPT", "FLUSH")
            eq(value(con, "SELECT redlock_release('ns', ?)", tok), 1, "release after SCRIPT FLUSH")
        for r in node_rows(con):
            check(r["last_error"] is None, "last_error after SCRIPT FLUSH: %r" % (r["last_error"],))
        report("error-reply NOSCRIPT never seen: extend and release after SCRIPT FLUSH work")
