"""The keys a lock keeps beside its own (x:holders with shared holders'
details, x:writer-waiting while an exclusive acquirer waits on shared
holders), and a connection's holder details (redlock-client:<id>), share
the key space with locks: a lock named x:holders, taken by us or by another
Redlock client, is someone else's lock, and nothing done to x may
overwrite, delete or re-time it. (x:holder kept an exclusive holder's
details before they became the connection's: a lock of that name stays
someone else's too.) An adversarial review found release, extend, the keeper's batch
extension, release_many, the shared scripts and the writer marker all
touching such a key whatever it held. Each test takes the other lock first,
then works on x, and asserts that the other lock is exactly as its holder
left it (value and TTL on every node) and that its holder can still release
it; and that x itself still works."""
# SPDX-License-Identifier: BSD-3-Clause

import json

import harness as h
from harness import check, eq, is_token, value

h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

OTHER_TTL = 60000  # ms: the other lock's TTL, far above anything x's calls set


def _intact(cluster, key, token, what):
    """The other lock still holds its token with most of its TTL, on every node."""
    for n in cluster:
        eq(n.get(key), token, "%s: %s still holds its holder's token on %s" % (what, key, n.addr))
        ttl = n.pttl(key)
        check(OTHER_TTL - 15000 < ttl <= OTHER_TTL, "%s: %s keeps its TTL on %s (%d ms left)" % (what, key, n.addr, ttl))


def _other_lock(cluster, key):
    """Another client's lock, as redsync or node-redlock take one."""
    token = "their-token-0123456789"
    for n in cluster:
        eq(n.cmd("SET", key, token, "NX", "PX", str(OTHER_TTL)), "OK", "the other client's SET of %s" % key)
    return token


def _our_other_lock(cluster, key):
    """The other lock taken through the extension on its own connection,
    settled on every node; (that connection, its token)."""
    con = h.connect(cluster)
    tok = is_token(value(con, "SELECT redlock_acquire(?, ?)", key, OTHER_TTL))
    h.settle(con)
    return con, tok


def _extend_and_release(cluster, con, name, other, token, ttl_ms):
    """Extends, then releases the lock `name` of con, checking after each
    (on every node) that the other lock `other` is as its holder left it."""
    check(value(con, "SELECT redlock_extend(?, ?)", name, ttl_ms) > 0, "extend of %s" % name)
    h.settle(con)
    _intact(cluster, other, token, "after the extend of %s" % name)
    eq(value(con, "SELECT redlock_release(?)", name), 1, "release of %s" % name)
    h.settle(con)
    _intact(cluster, other, token, "after the release of %s" % name)


def _release_other(cluster, key, token):
    for n in cluster:
        eq(n.get(key), token, "%s still the other client's at its release" % key)
        n.cmd("DEL", key)


def test_exclusive_lock_leaves_a_lock_named_x_holder_3n():
    c = h.shared_cluster(3)
    theirs, tok = _our_other_lock(c, "ck:holder")
    ours, third = h.connect(c), h.connect(c)
    is_token(value(ours, "SELECT redlock_acquire('ck', 60000)"))
    h.settle(ours)
    _intact(c, "ck:holder", tok, "after the acquire of ck")
    raw = value(ours, "SELECT redlock_holder('ck')")
    check(tok not in raw, "no token of the other lock in redlock_holder: %r" % raw)
    eq(json.loads(raw).get("app"), "python3", "ck shows its own details, whatever ck:holder holds")
    _extend_and_release(c, ours, "ck", "ck:holder", tok, 1000)
    eq(value(third, "SELECT redlock_acquire('ck:holder', 1000)"), None, "ck:holder is still held")
    eq(value(theirs, "SELECT redlock_release('ck:holder')"), 1, "its holder releases ck:holder")


def test_keeper_and_release_many_leave_another_clients_x_holder_3n():
    c = h.shared_cluster(3)
    con = h.connect(c, auto_extend=1)
    tok = _other_lock(c, "ka:holder")
    is_token(value(con, "SELECT redlock_acquire('ka', 900)"))
    h.wait_until(lambda: (value(con, "SELECT extensions FROM redlock_locks WHERE resource = 'ka'") or 0) >= 2,
                 timeout=10, what="two extensions of ka by the keeper")
    h.settle(con)
    _intact(c, "ka:holder", tok, "after the keeper extended ka")
    eq(value(con, "SELECT redlock_release_many('[\"ka\"]')"), 1, "release_many of ka")
    h.settle(con)
    _intact(c, "ka:holder", tok, "after release_many of ka")
    _release_other(c, "ka:holder", tok)


def test_details_leave_a_lock_under_the_details_keys_name_3n():
    """The name of a connection's holder details key can be known (it is
    in its tokens): another program's lock under that name, there when the
    details are written again (a new connection to the node) and while the
    connection's locks are extended, is left as its holder left it; the
    connection's locks then show no details, and work as before."""
    c = h.shared_cluster(3)
    con = h.connect(c, reconnect_min_ms=1, reconnect_max_ms=1)
    tok = is_token(value(con, "SELECT redlock_acquire('dk1', 60000)"))
    h.settle(con)
    dk = "redlock-client:" + tok[:16]
    for n in c:
        n.cmd("DEL", dk)  # as if evicted
    theirs = _other_lock(c, dk)
    for n in c:  # the next lock command goes on a new connection, which writes the details again
        n.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    h.wait_until(lambda: value(con, "SELECT redlock_ping()") == 3, 10, interval=0.05, what="connected anew")
    is_token(value(con, "SELECT redlock_acquire('dk2', 60000)"))
    h.settle(con)
    _intact(c, dk, theirs, "after the details were written again")
    raw = value(con, "SELECT redlock_holder('dk2')")
    eq(sorted(json.loads(raw).keys()), ["nodes", "ttl_ms"], "no details shown: their key is another lock")
    check(theirs not in raw, "nothing of the other lock shown: %r" % raw)
    _extend_and_release(c, con, "dk2", dk, theirs, 120000)
    eq(value(con, "SELECT redlock_release('dk1')"), 1, "release of dk1")
    _release_other(c, dk, theirs)


def test_shared_lock_leaves_a_lock_named_x_holders_3n():
    c = h.shared_cluster(3)
    theirs, tok = _our_other_lock(c, "sq:holders")
    ours = h.connect(c)
    is_token(value(ours, "SELECT redlock_acquire_shared('sq', 2000)"))
    h.settle(ours)
    _intact(c, "sq:holders", tok, "after a shared acquire of sq")
    _extend_and_release(c, ours, "sq", "sq:holders", tok, 1500)
    bare = h.connect(c, holder_info=0)
    is_token(value(bare, "SELECT redlock_acquire_shared('sq', 2000)"))
    h.settle(bare)
    _intact(c, "sq:holders", tok, "after a shared acquire without holder details")
    eq(value(bare, "SELECT redlock_release('sq')"), 1, "release")
    eq(value(theirs, "SELECT redlock_release('sq:holders')"), 1, "its holder releases sq:holders")


def test_shared_lock_leaves_a_hash_lock_named_x_holders_3n():
    # Redisson keeps a lock as a hash (field "<uuid>:<thread>", value a count).
    c = h.shared_cluster(3)
    for n in c:
        n.cmd("HSET", "sr:holders", "8c2d-uuid:1", "1")
        n.cmd("PEXPIRE", "sr:holders", str(OTHER_TTL))
    ours = h.connect(c)
    is_token(value(ours, "SELECT redlock_acquire_shared('sr', 2000)"))
    check(value(ours, "SELECT redlock_extend('sr', 1500)") > 0, "extend of the shared hold")
    eq(value(ours, "SELECT redlock_release('sr')"), 1, "release of the last shared holder")
    h.settle(ours)
    for n in c:
        eq(n.cmd("HGETALL", "sr:holders"), ["8c2d-uuid:1", "1"], "the hash lock's fields on %s" % n.addr)
        ttl = n.pttl("sr:holders")
        check(ttl > OTHER_TTL - 15000, "the hash lock keeps its TTL on %s (%d ms left)" % (n.addr, ttl))
        n.cmd("DEL", "sr:holders")


def test_writer_marker_leaves_a_lock_named_x_writer_waiting_3n():
    c = h.shared_cluster(3)
    theirs, tok = _our_other_lock(c, "wq:writer-waiting")
    reader, writer = h.connect(c), h.connect(c)
    is_token(value(reader, "SELECT redlock_acquire_shared('wq', 60000)"))
    eq(value(writer, "SELECT redlock_acquire('wq', 5000, 300)"), None, "the writer waits on the reader and gives up")
    h.settle(writer)
    _intact(c, "wq:writer-waiting", tok, "after an exclusive acquirer waited on wq")
    second = h.connect(c)
    is_token(value(second, "SELECT redlock_acquire_shared('wq', 5000)"))
    eq(value(second, "SELECT redlock_release('wq')"), 1, "a second reader came in: another lock is no writer")
    eq(value(reader, "SELECT redlock_release('wq')"), 1, "release of the reader")
    eq(value(theirs, "SELECT redlock_release('wq:writer-waiting')"), 1, "its holder releases wq:writer-waiting")


def test_a_companion_keys_value_is_never_a_token_3n():
    """The values kept beside locks are guessable: a fencing counter holds a
    small number (redlock_fence even reports it), the writer marker a fixed
    text, holder details a known shape. Naming such a key as a lock with its
    value as the token must not release, extend or adopt it: a deleted or
    shortened counter hands out a fencing number lower than one handed out
    before (an adversarial review did exactly that). Each call is refused
    as misuse, and the keys stay as they were."""
    c = h.shared_cluster(3)
    owner, other = h.connect(c), h.connect(c)
    for _ in range(3):
        is_token(value(owner, "SELECT redlock_acquire('job', 10000)"))
        last = value(owner, "SELECT redlock_fence('job')")
        eq(value(owner, "SELECT redlock_release('job')"), 1, "release of job")
    h.settle(owner)
    counter = [n.get("job:fence") for n in c]
    eq(counter, [str(last)] * 3, "job's fencing counter on every node")
    for n in c:
        eq(n.cmd("SET", "doc:writer-waiting", "redlock-writer-waiting", "PX", str(OTHER_TTL)), "OK", "a writer's marker")
    details = "redlock1\x1fhost\x1f1"
    for sql, args, says in [
            ("SELECT redlock_release('job:fence', ?)", (str(last),), "a number"),
            ("SELECT redlock_extend('job:fence', 5, ?)", (str(last),), "a number"),
            ("SELECT redlock_adopt('job:fence', ?)", (str(last),), "60-character"),
            ("SELECT redlock_release_many('[\"job:fence\"]', ?)", (str(last),), "a number"),
            ("SELECT redlock_extend('doc:writer-waiting', 2000000000, 'redlock-writer-waiting')", (), "marker"),
            ("SELECT redlock_release('doc:writer-waiting', 'redlock-writer-waiting')", (), "marker"),
            ("SELECT redlock_release('job:holder', ?)", (details,), "holder details")]:
        h.redlock_error(other, sql, *args, contains=(says, "redlock_acquire returned"))
    h.settle(other)
    eq([n.get("job:fence") for n in c], counter, "job's fencing counter after those calls")
    for n in c:
        check(n.pttl("job:fence") > 60000 or n.pttl("job:fence") == -1, "the counter keeps its TTL on %s" % n.addr)
        eq(n.get("doc:writer-waiting"), "redlock-writer-waiting", "the marker on %s" % n.addr)
        check(n.pttl("doc:writer-waiting") <= OTHER_TTL, "the marker keeps its TTL on %s" % n.addr)
        n.cmd("DEL", "doc:writer-waiting")
    is_token(value(owner, "SELECT redlock_acquire('job', 10000)"))
    eq(value(owner, "SELECT redlock_fence('job')"), last + 1, "the next fencing number follows the last one")
    eq(value(owner, "SELECT redlock_release('job')"), 1, "release of job")
