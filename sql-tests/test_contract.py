"""The lock contract (acquire / release / extend / wait) on 1, 3 and 5 nodes,
checked both through SQL and in Redis itself."""
# SPDX-License-Identifier: BSD-3-Clause

import threading

import harness as h
from harness import check, eq, holds, is_token, no_key, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

WRONG = "0123456789abcdef0123456789abcdef"


def _acquire_token(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('res-a', 10000)"))
    holds(c, "res-a", tok, 10000, "after acquire")
    for node in c:
        # (other keys, e.g. a fencing counter, may sit beside it)
        check("res-a" in node.keys(), "key res-a on %s: keys %r" % (node.addr, node.keys()))
    eq(value(con, "SELECT typeof(redlock_acquire('res-b', 10000))"), "text",
       "type of the value acquire returns")


def _second_acquire_is_null(n):
    c = h.shared_cluster(n)
    holder = h.connect(c)
    tok = is_token(value(holder, "SELECT redlock_acquire('res', 10000)"))
    other = h.connect(c)
    eq(value(other, "SELECT redlock_acquire('res', 20000)"), None,
       "acquire of a held name from another connection")
    proc = h.SqlProc(c)
    eq(proc.value("SELECT redlock_acquire('res', 20000)"), None,
       "acquire of a held name from another process")
    holds(c, "res", tok, 10000, "holder's key after the refused attempts",
          settle_cons=(other, proc))


def _release(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('rel', 10000)"))
    eq(value(con, "SELECT redlock_release('rel')"), 1, "release of our lock")
    no_key(c, "rel", "after release", settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('rel')"), None,
       "second release without token (this connection holds none)")
    eq(value(con, "SELECT redlock_release('rel', ?)", tok), 0,
       "second release with the old token")
    tok2 = is_token(value(con, "SELECT redlock_acquire('rel', 10000)"))
    check(tok2 != tok, "a new acquisition must get a new token (got %s twice)" % tok)
    other = h.connect(c)
    eq(value(other, "SELECT redlock_acquire('rel', 10000)"), None, "held again")
    eq(value(con, "SELECT redlock_release('rel', ?)", tok2), 1, "release with explicit token")
    no_key(c, "rel", "after release with explicit token")
    is_token(value(other, "SELECT redlock_acquire('rel', 10000)"), "acquire after release")


def _release_never_acquired(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    eq(value(con, "SELECT redlock_release('never-taken')"), None,
       "release of a resource never acquired")
    eq(value(con, "SELECT redlock_release('never-taken', ?)", WRONG), 0,
       "release of a resource never acquired, with a token")
    eq(value(con, "SELECT redlock_extend('never-taken', 1000)"), None,
       "extend of a resource never acquired")
    h.settle(con)
    for node in c:
        eq(node.dbsize(), 0, "keys on %s" % node.addr)


def _wrong_token_leaves_holder_alone(n):
    c = h.shared_cluster(n)
    holder = h.connect(c)
    tok = is_token(value(holder, "SELECT redlock_acquire('wt', 10000)"))
    other = h.connect(c)
    eq(value(other, "SELECT redlock_release('wt', ?)", WRONG), 0, "release with a wrong token")
    eq(value(other, "SELECT redlock_release('wt')"), None,
       "release from a connection that holds nothing")
    eq(value(other, "SELECT redlock_extend('wt', 60000, ?)", WRONG), None,
       "extend with a wrong token")
    eq(value(other, "SELECT redlock_extend('wt', 60000)"), None,
       "extend from a connection that holds nothing")
    eq(value(holder, "SELECT redlock_release('wt', ?)", WRONG), 0,
       "release by the holder's connection with a wrong token")
    eq(value(holder, "SELECT redlock_extend('wt', 60000, ?)", WRONG), None,
       "extend by the holder's connection with a wrong token")
    proc = h.SqlProc(c)
    eq(proc.value("SELECT redlock_release('wt', ?)", WRONG), 0,
       "release with a wrong token from another process")
    # the holder's key: same token, TTL not raised to 60000
    holds(c, "wt", tok, 10000, "holder's key after wrong-token calls",
          settle_cons=(other, holder, proc))
    eq(c[0].cli("GET", "wt"), tok, "redis-cli GET wt")
    pttl = int(c[0].cli("PTTL", "wt"))
    check(0 < pttl <= 10000, "redis-cli PTTL wt = %d, expected 0 < pttl <= 10000" % pttl)
    eq(value(holder, "SELECT redlock_release('wt')"), 1, "the holder can still release")


def _extend(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('ext', 5000)"))
    v = value(con, "SELECT redlock_extend('ext', 60000)")
    check(isinstance(v, int) and 0 < v <= 60000,
          "extend should return a validity in ms, 0 < v <= 60000; got %r" % (v,))
    h.settle(con)
    for node in c:
        eq(node.get("ext"), tok, "value on %s after extend" % node.addr)
        p = node.pttl("ext")
        check(5000 < p <= 60000, "PTTL on %s after extend to 60000 ms: %d" % (node.addr, p))
    # extend with the token from another process
    proc = h.SqlProc(c)
    v2 = proc.value("SELECT redlock_extend('ext', 30000, ?)", tok)
    check(isinstance(v2, int) and 0 < v2 <= 30000,
          "extend with explicit token from another process: %r" % (v2,))
    # an extend only lengthens: the nodes keep the 60 s they had
    holds(c, "ext", tok, 60000, "after extend to 30000 from another process",
          settle_cons=(proc,))
    check(all(node.pttl("ext") > 30000 for node in c), "an extend to less than the lock had left shortened it")
    eq(proc.value("SELECT redlock_release('ext', ?)", tok), 1,
       "release with the token from another process")
    no_key(c, "ext", "after release from another process", settle_cons=(proc,))
    eq(value(con, "SELECT redlock_release('ext')"), 0,
       "release by the original connection after someone released it")


def _extend_after_expiry(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('exp', 500)"))
    h.wait_until(lambda: all(not node.cmd("EXISTS", "exp") for node in c), 10,
                 what="the 500 ms lock to expire in redis")
    eq(value(con, "SELECT redlock_extend('exp', 10000)"), None, "extend after expiry")
    no_key(c, "exp", "extend after expiry must not re-create the key", settle_cons=(con,))
    eq(value(con, "SELECT redlock_extend('exp', 10000, ?)", tok), None,
       "extend after expiry with explicit token")
    no_key(c, "exp", "extend after expiry (explicit token) must not re-create the key",
           settle_cons=(con,))
    eq(value(con, "SELECT redlock_release('exp', ?)", tok), 0, "release after expiry")
    is_token(value(h.connect(c), "SELECT redlock_acquire('exp', 10000)"),
             "another connection acquires after expiry")


def _wait_zero_is_one_attempt(n):
    c = h.shared_cluster(n)
    holder = h.SqlProc(c)
    is_token(holder.value("SELECT redlock_acquire('w0', 30000)"))
    h.settle(holder)         # its SETs have all landed before we count
    con = h.connect(c)
    # a connection's first lock writes its holder details (a SET) once
    eq(value(con, "SELECT redlock_release('w0:warm', redlock_acquire('w0:warm', 10000))"), 1, "a first lock")
    h.settle(con)
    before = c[0].calls("set")
    eq(value(con, "SELECT redlock_acquire('w0', 10000, 0)"), None, "acquire with wait_ms=0")
    h.settle(con)
    eq(c[0].calls("set") - before, 1, "SET commands seen by a node for wait_ms=0")
    eq(value(con, "SELECT redlock_acquire('w0', 10000)"), None, "acquire without wait_ms")
    eq(value(con, "SELECT redlock_acquire('w0', 10000, 300)"), None,
       "acquire with wait_ms=300 while held for 30 s")


def _waiter_gets_lock_after_release(n):
    c = h.shared_cluster(n)
    holder = h.SqlProc(c)
    htok = is_token(holder.value("SELECT redlock_acquire('wq', 30000)"))
    waiter = h.connect(c, retry_delay_ms=20, retry_jitter_ms=10)
    h.settle(holder)
    before = c[0].calls("set")
    result = {}

    def wait():
        try:
            result["tok"] = value(waiter, "SELECT redlock_acquire('wq', 10000, 20000)")
        except Exception as e:           # reported below
            result["err"] = e
    t = threading.Thread(target=wait, daemon=True)
    t.start()
    # the waiter has been refused at least twice: it is waiting
    h.wait_until(lambda: c[0].calls("set") - before >= 2 or not t.is_alive(), 10,
                 what="the waiter to retry")
    check(t.is_alive(), "waiter returned while the lock was held: %r" % result)
    eq(holder.value("SELECT redlock_release('wq')"), 1, "holder's release")
    t.join(25)
    check(not t.is_alive(), "waiter still waiting after the release")
    check("err" not in result, "waiter failed: %r" % result.get("err"))
    tok = is_token(result.get("tok"), "waiter's token")
    check(tok != htok, "waiter got the holder's token")
    # a quorum: the waiter's attempt may race with the holder's release
    # on some node, and a quorum is what the contract promises
    holds(c, "wq", tok, 10000, "waiter's key", settle_cons=(waiter, holder),
          at_least=c.quorum)


def _waiter_shell_gets_lock_after_release(n):
    c = h.shared_cluster(n)
    holder = h.connect(c)
    is_token(value(holder, "SELECT redlock_acquire('ws', 30000)"))
    h.settle(holder)
    before = c[0].calls("set")
    sh = h.ShellProc("SELECT redlock_config('retry_delay_ms', 20);\n"
                     "SELECT redlock_config('retry_jitter_ms', 10);\n"
                     "SELECT 'got:' || redlock_acquire('ws', 10000, 20000);\n"
                     "SELECT 'released:' || redlock_release('ws');\n", c)
    sh.start()
    h.wait_until(lambda: c[0].calls("set") - before >= 2 or sh.proc.poll() is not None, 10,
                 what="the waiting shell to retry")
    if not sh.running():
        raise AssertionError("shell returned while the lock was held: %r" % (sh.wait(),))
    eq(value(holder, "SELECT redlock_release('ws')"), 1, "holder's release")
    rc, out, err = sh.wait(30)
    eq((rc, err), (0, ""), "shell exit status and stderr")
    lines = out.split()
    check(any(l.startswith("got:") and h.TOKEN_RE.match(l[4:]) for l in lines),
          "shell should print got:<token>; output %r" % out)
    check("released:1" in lines, "shell should release its lock; output %r" % out)
    no_key(c, "ws", "after the shell released")


def _quorum_held_by_someone_else(n):
    c = h.shared_cluster(n)
    q = c.quorum
    for node in c.nodes[:q]:
        node.cmd("SET", "qh", "someone-else", "PX", 30000)
    con = h.connect(c)
    eq(value(con, "SELECT redlock_acquire('qh', 10000)"), None,
       "acquire when %d of %d nodes hold someone else's key" % (q, n))
    for node in c.nodes[:q]:
        eq(node.get("qh"), "someone-else", "foreign key on %s" % node.addr)
    no_key(c.nodes[q:], "qh", "a failed attempt must release what it took",
           settle_cons=(con,))


def _minority_held_by_someone_else(n):
    c = h.shared_cluster(n)
    m = n - c.quorum
    for node in c.nodes[:m]:
        node.cmd("SET", "mh", "someone-else", "PX", 30000)
    con = h.connect(c)
    tok = is_token(value(con, "SELECT redlock_acquire('mh', 10000)"),
                   "acquire when %d of %d nodes hold someone else's key" % (m, n))
    holds(c.nodes[m:], "mh", tok, 10000, "the quorum")
    for node in c.nodes[:m]:
        eq(node.get("mh"), "someone-else", "foreign key on %s" % node.addr)
    eq(value(con, "SELECT redlock_release('mh')"), 1, "release")
    for node in c.nodes[:m]:
        eq(node.get("mh"), "someone-else", "foreign key on %s after release" % node.addr)
    no_key(c.nodes[m:], "mh", "after release")


def _key_prefix(n):
    c = h.shared_cluster(n)
    con = h.connect(c, key_prefix="app:")
    tok = is_token(value(con, "SELECT redlock_acquire('job', 10000)"))
    holds(c, "app:job", tok, 10000, "prefixed key")
    no_key(c, "job", "unprefixed key", settle_cons=(con,))
    same = h.connect(c, key_prefix="app:")
    eq(value(same, "SELECT redlock_acquire('job', 10000)"), None, "same prefix, same lock")
    plain = h.connect(c)
    ptok = is_token(value(plain, "SELECT redlock_acquire('job', 10000)"),
                    "no prefix: another key, another lock")
    holds(c, "job", ptok, 10000, "unprefixed key")
    eq(value(con, "SELECT redlock_release('job')"), 1, "release with prefix")
    no_key(c, "app:job", "after release")
    holds(c, "job", ptok, 10000, "unprefixed lock untouched")


def _odd_resource_names(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    for name in ("résumé/ключ 🔒 x", "with space", "a" * 1000, "colon:slash/\\quote'\""):
        tok = is_token(value(con, "SELECT redlock_acquire(?, 10000)", name), repr(name[:40]))
        h.settle(con)
        for node in c:
            eq(node.cmd("GET", name.encode("utf-8"), raw=True), tok.encode(),
               "key %r on %s" % (name[:40], node.addr))
        eq(value(con, "SELECT redlock_release(?)", name), 1, "release %r" % name[:40])
        no_key(c, name, "after release")


def _tokens_are_unique(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    seen = set()
    for i in range(20):
        tok = is_token(value(con, "SELECT redlock_acquire('uniq', 10000)"))
        check(tok not in seen, "token %s returned twice" % tok)
        seen.add(tok)
        eq(value(con, "SELECT redlock_release('uniq')"), 1, "release %d" % i)


def _several_resources_per_connection(n):
    c = h.shared_cluster(n)
    con = h.connect(c)
    ta = is_token(value(con, "SELECT redlock_acquire('ra', 10000)"))
    tb = is_token(value(con, "SELECT redlock_acquire('rb', 10000)"))
    check(ta != tb, "two resources got the same token")
    eq(value(con, "SELECT redlock_release('ra')"), 1, "release ra")
    holds(c, "rb", tb, 10000, "rb after releasing ra")
    eq(value(con, "SELECT redlock_release('rb')"), 1, "release rb")


for _fn in (_acquire_token, _second_acquire_is_null, _release, _release_never_acquired,
            _wrong_token_leaves_holder_alone, _extend, _extend_after_expiry,
            _wait_zero_is_one_attempt, _waiter_gets_lock_after_release,
            _waiter_shell_gets_lock_after_release, _key_prefix, _tokens_are_unique):
    h.for_nodes(globals(), _fn, (1, 3, 5))
for _fn in (_quorum_held_by_someone_else, _minority_held_by_someone_else):
    h.for_nodes(globals(), _fn, (3, 5))
for _fn in (_odd_resource_names, _several_resources_per_connection):
    h.for_nodes(globals(), _fn, (1, 3))

