"""Nodes that cannot keep locks: a node that evicts keys (maxmemory with a
policy other than noeviction) and a node of a Redis Cluster are read from
INFO when first contacted, shown in redlock_nodes.state, and their votes do
not count unless allow_evicting_nodes / allow_cluster_nodes say so."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import tempfile

import harness as h
from harness import check, eq, is_token, node_rows, redlock_error, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)


def evicting_node():
    return h.RedisNode(extra_args=["--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru"])


def cluster_node():
    d = tempfile.mkdtemp(prefix="redlock-test-cluster-")
    return h.RedisNode(extra_args=["--cluster-enabled", "yes",
                                   "--cluster-config-file", os.path.join(d, "nodes.conf")])


def test_evicting_node_refused_then_allowed_1n():
    node = evicting_node()
    try:
        con = h.connect([node])
        eq(node_rows(con)[0]["state"], "idle", "state before any call")
        msg = redlock_error(con, "SELECT redlock_acquire('ev', 10000)",
                            contains=("node 1 127.0.0.1:%d" % node.port, "maxmemory-policy volatile-lru",
                                      "allow_evicting_nodes"))
        check("noeviction" in msg, "the error says what to change: %r" % msg)
        h.settle(con)
        r = node_rows(con)[0]
        eq(r["state"], "evicting", "state of an evicting node")
        check("volatile-lru" in (r["last_error"] or ""), "last_error says why: %r" % r["last_error"])
        eq(node.get("ev"), None, "the lock key was cleaned up on the refused node")
        eq(value(con, "SELECT redlock_config('allow_evicting_nodes')"), 0, "off by default")
        value(con, "SELECT redlock_config('allow_evicting_nodes', 1)")
        is_token(value(con, "SELECT redlock_acquire('ev', 10000)"), "acquire once allowed")
        eq(node_rows(con)[0]["state"], "up", "state once allowed")
        eq(value(con, "SELECT redlock_release('ev')"), 1, "release")
    finally:
        node.terminate()


def test_evicting_node_outvoted_3n():
    """Two fit nodes still make a quorum of three; the evicting one's yes is not counted."""
    with h.Cluster(2) as cl:
        bad = evicting_node()
        try:
            con = h.connect(list(cl) + [bad])
            is_token(value(con, "SELECT redlock_acquire('ev3', 10000)"), "two fit nodes out of three")
            h.settle(con)
            eq([r["state"] for r in node_rows(con)], ["up", "up", "evicting"], "states")
            eq(value(con, "SELECT redlock_release('ev3')"), 1, "release")
        finally:
            bad.terminate()


def test_noeviction_with_maxmemory_is_fine_1n():
    node = h.RedisNode(extra_args=["--maxmemory", "100mb", "--maxmemory-policy", "noeviction"])
    try:
        con = h.connect([node])
        is_token(value(con, "SELECT redlock_acquire('ne', 10000)"), "noeviction node votes")
        eq(node_rows(con)[0]["state"], "up", "state")
    finally:
        node.terminate()


def test_cluster_node_refused_then_allowed_1n():
    node = cluster_node()
    try:
        con = h.connect([node], fencing=0)
        redlock_error(con, "SELECT redlock_acquire('cl', 10000)",
                      contains=("node 1 127.0.0.1:%d" % node.port, "cluster", "allow_cluster_nodes"))
        h.settle(con)
        eq(node_rows(con)[0]["state"], "cluster", "state of a cluster node")
        eq(value(con, "SELECT redlock_config('allow_cluster_nodes')"), 0, "off by default")
        value(con, "SELECT redlock_config('allow_cluster_nodes', 1)")
        eq(node_rows(con)[0]["state"], "up", "state once allowed")
    finally:
        node.terminate()


def test_cluster_node_fences_names_of_one_hash_tag_1n():
    """On a cluster node (allowed), every key a fenced call touches must be
    in one slot: the counter <key>:fence and the fencing floor follow the
    name's hash tag, so names with a tag are fenced alone and in sets; a
    name without one is refused by the node (CROSSSLOT), as its counter is
    in another slot."""
    node = cluster_node()
    try:
        node.cmd("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
        h.wait_until(lambda: "cluster_state:ok" in node.cmd("CLUSTER", "INFO"), 10, what="the cluster to serve its slots")
        con = h.connect([node], allow_cluster_nodes=1)
        is_token(value(con, "SELECT redlock_acquire('{job7}:a', 10000)"), "a tagged name, fenced")
        f1 = value(con, "SELECT redlock_fence('{job7}:a')")
        check(f1 >= 1, "its fence: %r" % f1)
        is_token(value(con, "SELECT redlock_acquire_many(?, 10000)", '["{job7}:b", "{job7}:c"]'), "a set of one tag")
        f2 = value(con, "SELECT redlock_fence('{job7}:c')")
        eq(node.get("redlock-fence-floor{job7}"), str(f2), "the set's number in the floor of its tag")
        eq(value(con, "SELECT redlock_release_all()"), 3, "released")
        is_token(value(con, "SELECT redlock_acquire('{job7}:c', 10000)"), "again, alone")
        check(value(con, "SELECT redlock_fence('{job7}:c')") > f2, "above the set's number")
        redlock_error(con, "SELECT redlock_acquire('untagged', 10000)", contains=("CROSSSLOT",))
    finally:
        node.terminate()


def test_node_without_info_counts_neither_yes_nor_no_3n():
    """A node whose user may not run INFO cannot be told apart from the
    others (it may be a replica of one, or the same server): neither its
    yes nor its no counts. Here it says no (another client holds the name
    there), one node is down and the third says yes: that is no majority
    either way, so the call fails with an error naming the node and INFO,
    instead of answering that the lock is held."""
    with h.Cluster(3) as cl:
        blind, dead, fit = cl
        blind.cmd("ACL", "SETUSER", "noinfo", "on", ">No-1nfo-pw", "~*", "&*", "+@all", "-info")
        eq(blind.cmd("SET", "ni", "their-token", "NX", "PX", "60000"), "OK", "another client holds ni there")
        urls = ["redis://noinfo:No-1nfo-pw@127.0.0.1:%d" % blind.port, dead.url, fit.url]
        dead.terminate()
        con = h.connect(urls)
        redlock_error(con, "SELECT redlock_acquire('ni', 10000)",
                      contains=("node 1 127.0.0.1:%d" % blind.port, "INFO"))
        h.settle(con)
        eq(fit.get("ni"), None, "the failed attempt cleaned up on the fit node")
        eq(blind.get("ni"), "their-token", "the other client's key untouched")


def _refused_keeps_reason(node_or_url, reason, **config):
    """A node refused for `reason` shows state refused and keeps the reason
    in last_error after the late answers to its failed call (the cleanup)
    and after later calls it answers (a ping, a release)."""
    con = h.connect([node_or_url], **config)
    redlock_error(con, "SELECT redlock_acquire('rk', 10000)", contains=(reason,))
    h.settle(con)
    r = node_rows(con)[0]
    eq(r["state"], "refused", "state after the failed call")
    check(reason in (r["last_error"] or ""),
          "last_error after the failed call: %r" % r["last_error"])
    eq(value(con, "SELECT redlock_ping()"), 0, "redlock_ping() counts no refused node, as its state says")
    value(con, "SELECT redlock_release('rk', 'not-a-token-of-anyone')")
    h.settle(con)
    r = node_rows(con)[0]
    eq(r["state"], "refused", "state after later answers")
    check(reason in (r["last_error"] or ""),
          "last_error after later answers: %r" % r["last_error"])


def test_a_node_without_role_stays_refused_with_its_reason_1n():
    """rename-command ROLE "": no vote, state refused, and the reason stays
    (it used to show state up and last_error NULL right after the call it
    made fail, the cleanup's late answer wiping the reason)."""
    node = h.RedisNode(extra_args=["--rename-command", "ROLE", ""])
    try:
        _refused_keeps_reason(node.url, "INFO or ROLE gave no usable answer")
    finally:
        node.terminate()


def test_a_user_without_dangerous_commands_stays_refused_with_its_reason_1n():
    """The common '+@all -@dangerous' user loses INFO and ROLE: refused, and
    the reason stays."""
    node = h.RedisNode()
    try:
        node.cmd("ACL", "SETUSER", "safe", "on", ">S4fe-pw", "~*", "&*", "+@all", "-@dangerous")
        _refused_keeps_reason("redis://safe:S4fe-pw@127.0.0.1:%d" % node.port,
                              "INFO or ROLE gave no usable answer")
    finally:
        node.terminate()


def test_a_node_without_eval_is_refused_even_for_plain_set_locks_1n():
    """rename-command EVAL "": with fencing and holder_info off the
    acquisition is a plain SET, which worked, while no release or extend
    (scripts) could: the node is refused, naming EVAL."""
    node = h.RedisNode(extra_args=["--rename-command", "EVAL", ""])
    try:
        _refused_keeps_reason(node.url, "may not run EVAL", fencing=0, holder_info=0)
    finally:
        node.terminate()
