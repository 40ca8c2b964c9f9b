"""Fair, herd-free waiting (redlock_config('fair', 1)): waiters in separate
processes are served in the order they began waiting, exclusive and shared
(a waiting writer is not overtaken by later readers); a release wakes only
the next waiter, so the commands each node runs per hand-off stay a few
with 24 waiters where waiters that do not queue cost dozens; a waiter
killed with -9 or stopped leaves the queue within its lease; an entry on a
minority of the nodes holds nobody up, one on a majority does; the queue's
keys beside another program's keys of those names are left alone; fair and
non-fair clients (ours with fair 0, a plain SET NX client) on one name all
make progress."""
# SPDX-License-Identifier: BSD-3-Clause

import json
import os
import signal
import subprocess
import threading
import time

import harness as h
from harness import check, eq, is_token, value

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

WAITER = os.path.join(h.HERE, "fair_waiter.py")
MARK = "redlock-queue"
# Fast retries: a waiter that tried out of turn would often win.
FAST = {"retry_delay_ms": 20, "retry_jitter_ms": 10}
# The commands a client sends (the scripts' own calls are counted apart in
# INFO commandstats under their own names, and are not these).
CLIENT_COMMANDS = ("eval", "evalsha", "subscribe", "unsubscribe", "ping", "info", "role", "select", "auth",
                   "hello", "client")


class Waiter:
    """A fair_waiter.py process: started (and ready) at once, go() begins
    its acquire, result() reads its JSON line."""

    def __init__(self, c, name, res, kind="x", wait_ms=20000, hold_ms=20, ttl_ms=10000, **config):
        cfg = dict(h._default_config)
        cfg.update({"fair": 1}, **config)
        spec = {"nodes": ",".join(n.url for n in c), "ext": h.EXT, "config": cfg, "name": name, "res": res,
                "kind": kind, "wait_ms": wait_ms, "hold_ms": hold_ms, "ttl_ms": ttl_ms}
        self.name = name
        self.proc = subprocess.Popen([h.PYTHON, WAITER, json.dumps(spec)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, cwd=h.HERE)
        h._track(self, h._live_procs)

    def ready(self):
        eq(self.proc.stdout.readline().strip(), "ready", "waiter %s started" % self.name)
        return self

    def go(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self, timeout=30):
        import select
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        check(r, "waiter %s did not finish within %s s" % (self.name, timeout))
        line = self.proc.stdout.readline()
        check(line, "waiter %s died (rc=%s)" % (self.name, self.proc.poll()))
        return json.loads(line)

    def signal(self, sig):
        os.kill(self.proc.pid, sig)

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except OSError:
                pass
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        h._untrack(self, h._live_procs)


def entries(node, key):
    """The live-or-not queue entries of key on one node, in queue order:
    [(member, score)] without the mark."""
    if node.cmd("TYPE", key + ":queue") != "zset":
        return []
    flat = node.cmd("ZRANGE", key + ":queue", 0, -1, "WITHSCORES")
    return [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2) if flat[i] != MARK]


def queued(c, key, n):
    """n entries of key are queued on every node."""
    return all(len(entries(node, key)) == n for node in c)


def enqueue_in_order(c, key, waiters):
    """Starts each waiter's wait after the one before it is queued on every
    node, and after the wall clock moved past that one's start (the order
    is by the waiters' wall-clock ms)."""
    for i, w in enumerate(waiters):
        w.go()
        h.wait_until(lambda: queued(c, key, i + 1), 10, what="waiter %s queued on every node" % w.name)
        last = max(s for _, s in entries(c[0], key))
        h.wait_until(lambda: time.time() * 1000 > last + 1, 1, what="the wall clock to move on")


def test_arrival_order_exclusive_8_waiters_3n():
    """Eight processes that begin waiting one after the other while the
    lock is held get it in that order (without the queue, the issue saw
    [5, 7, 4, 3, 6, 1, 2, 0])."""
    with h.Cluster(3) as c:
        holder = h.connect(c, fair=1)
        is_token(value(holder, "SELECT redlock_acquire('ord', 10000)"))
        ws = [Waiter(c, i, "ord", **FAST) for i in range(8)]
        for w in ws:
            w.ready()
        enqueue_in_order(c, "ord", ws)
        eq(value(holder, "SELECT redlock_release('ord')"), 1, "the holder gives the lock back")
        res = [w.result() for w in ws]
        check(all(r["tok"] for r in res), "every waiter got the lock: %r" % res)
        order = [r["name"] for r in sorted(res, key=lambda r: r["got"])]
        eq(order, list(range(8)), "the order the waiters got the lock in")
        h.wait_until(lambda: all(node.cmd("EXISTS", "ord:queue", "ord:queue-lease") == 0 for node in c), 5,
                     what="the queue to go with its last waiter")


def test_arrival_order_shared_with_writers_3n():
    """Readers and writers queued as r r W r r W r r behind a writer: each
    writer gets the lock after every waiter that came before it and before
    every one that came after it (a waiting writer is not overtaken by
    later readers), and the readers between two writers share it."""
    with h.Cluster(3) as c:
        holder = h.connect(c, fair=1)
        is_token(value(holder, "SELECT redlock_acquire('rw', 10000)"))
        kinds = "ssxssxss"
        ws = [Waiter(c, i, "rw", kind=kinds[i], hold_ms=60, **FAST) for i in range(8)]
        for w in ws:
            w.ready()
        enqueue_in_order(c, "rw", ws)
        eq(value(holder, "SELECT redlock_release('rw')"), 1, "the holder gives the lock back")
        res = sorted((w.result() for w in ws), key=lambda r: r["name"])
        check(all(r["tok"] for r in res), "every waiter got the lock: %r" % res)
        for i, r in enumerate(res):
            if kinds[i] != "x":
                continue
            for j, o in enumerate(res):
                if j < i:
                    check(o["got"] < r["got"], "waiter %d (%s) before writer %d" % (j, kinds[j], i))
                    check(o["released"] <= r["got"], "waiter %d let go before writer %d got it" % (j, i))
                elif j > i:
                    check(o["got"] > r["released"], "waiter %d (%s) after writer %d let go" % (j, kinds[j], i))


def _client_commands(node):
    n = 0
    for line in node.cmd("INFO", "commandstats").splitlines():
        name = line.split(":")[0][len("cmdstat_"):]
        if line.startswith("cmdstat_") and name.split("|")[0] in CLIENT_COMMANDS:
            n += int(line.split("calls=")[1].split(",")[0])
    return n


def _storm(c, fair, waiters=24):
    """waiters connections (threads) queue behind a holder, which then
    lets go; each takes the lock once and holds it for 2 ms. Returns the
    commands each node ran per hand-off, counted from the release."""
    holder = h.connect(c, fair=fair)
    is_token(value(holder, "SELECT redlock_acquire('herd', 10000)"))
    cons = [h.connect(c, fair=fair) for _ in range(waiters)]
    for con in cons:
        eq(value(con, "SELECT redlock_ping()"), len(c), "a waiter's connections are up")
    got, errors = [], []

    def run(con):
        try:
            tok = value(con, "SELECT redlock_acquire('herd', 10000, 20000)")
            got.append(tok)
            time.sleep(0.002)
            value(con, "SELECT redlock_release('herd')")
        except Exception as e:           # reported below
            errors.append(e)
    ts = [threading.Thread(target=run, args=(con,)) for con in cons]
    for t in ts:
        t.start()
    if fair:
        h.wait_until(lambda: queued(c, "herd", waiters), 10, what="every waiter queued")
    else:
        h.wait_until(lambda: all(int(n.cmd("PUBSUB", "NUMSUB", "herd:released")[1]) == waiters for n in c), 10,
                     what="every waiter subscribed")
    for node in c:
        node.cmd("CONFIG", "RESETSTAT")
    eq(value(holder, "SELECT redlock_release('herd')"), 1, "the holder gives the lock back")
    for t in ts:
        t.join(60)
    check(not errors, "waiters failed: %r" % errors[:3])
    eq(len([t for t in got if t]), waiters, "every waiter got the lock once")
    return [_client_commands(node) / float(waiters) for node in c]


def test_herd_commands_per_hand_off_24_waiters_3n():
    """With 24 waiters a hand-off costs each node at most 10 commands in
    fair mode (the release, the next waiter's turn, its acquire and its
    leaving, and the subscriptions); waiters that do not queue are all
    woken by every release and cost several times as many."""
    with h.Cluster(3) as c:
        fair = _storm(c, 1)
        c.flushall()
        plain = _storm(c, 0)
        h.report("fair hand-off: commands per node %s; without the queue %s"
                 % (["%.1f" % x for x in fair], ["%.1f" % x for x in plain]))
        check(max(fair) <= 10, "fair: at most 10 commands per hand-off on each node, got %r" % fair)
        check(min(plain) > 3 * max(fair), "without the queue, every waiter wakes: %r vs %r" % (plain, fair))


def _dead_waiter(sig):
    """A holder, waiter a at the head of the queue and b behind it; a is
    killed (or stopped) and the holder lets go: b gets the lock once a's
    entry's lease (queue_lease_ms, default 2000) ran out, and a's entry is
    gone from every node. Returns (seconds from the signal to b's
    acquisition, a)."""
    c = h.Cluster(3)
    holder = h.connect(c, fair=1)
    is_token(value(holder, "SELECT redlock_acquire('dead', 10000)"))
    a, b = Waiter(c, "a", "dead").ready(), Waiter(c, "b", "dead").ready()
    enqueue_in_order(c, "dead", [a, b])
    me = entries(c[0], "dead")[0][0]
    a.signal(sig)
    t_sig = time.monotonic()
    eq(value(holder, "SELECT redlock_release('dead')"), 1, "the holder gives the lock back")
    rb = b.result()
    check(rb["tok"], "b got the lock: %r" % rb)
    took = rb["got"] - t_sig
    check(all(me not in [m for m, _ in entries(node, "dead")] for node in c), "a's entry left every node")
    return c, took, a


def test_dead_waiter_kill9_leaves_the_queue_3n():
    c, took, a = _dead_waiter(signal.SIGKILL)
    with c:
        h.report("a waiter killed with -9 held the queue up for %.2f s (queue_lease_ms 2000)" % took)
        check(took <= 3.0, "the waiter behind got the lock within 3 s of the kill, took %.2f s" % took)


def test_dead_waiter_sigstop_leaves_and_comes_back_3n():
    """A stopped waiter is passed over; resumed, it takes its old place and
    gets the lock after the one that passed it."""
    c, took, a = _dead_waiter(signal.SIGSTOP)
    with c:
        h.report("a stopped waiter held the queue up for %.2f s (queue_lease_ms 2000)" % took)
        check(took <= 3.0, "the waiter behind got the lock within 3 s of the stop, took %.2f s" % took)
        a.signal(signal.SIGCONT)
        ra = a.result()
        check(ra["tok"], "the resumed waiter got the lock: %r" % ra)


def test_short_lease_and_gone_at_once_when_giving_up_3n():
    """queue_lease_ms sets the bound: a killed waiter with a 400 ms lease is
    passed over within it; a waiter whose wait_ms runs out takes its entry
    with it at once, not at the end of its lease."""
    with h.Cluster(3) as c:
        holder = h.connect(c, fair=1)
        is_token(value(holder, "SELECT redlock_acquire('lease', 10000)"))
        a = Waiter(c, "a", "lease", queue_lease_ms=400).ready()
        b = Waiter(c, "b", "lease", queue_lease_ms=400).ready()
        quitter = Waiter(c, "q", "lease", wait_ms=300, queue_lease_ms=60000).ready()
        enqueue_in_order(c, "lease", [a, b, quitter])
        rq = quitter.result()
        check(not rq["tok"], "the lock stayed held for all of the quitter's wait")
        h.wait_until(lambda: queued(c, "lease", 2), 0.25, what="the quitter's entry to leave every node")
        a.signal(signal.SIGKILL)
        t_kill = time.monotonic()
        eq(value(holder, "SELECT redlock_release('lease')"), 1, "the holder gives the lock back")
        rb = b.result()
        check(rb["tok"], "b got the lock")
        h.report("a waiter killed with a 400 ms lease held the queue up for %.2f s" % (rb["got"] - t_kill))
        check(rb["got"] - t_kill < 1.5, "passed over within its lease and a turn: %.2f s" % (rb["got"] - t_kill))


def _fake_entry(node, key, score, lease_ms=60000):
    """A live entry as a stuck waiter leaves it, written directly."""
    now = int(float(node.cmd("TIME")[0]) * 1000)
    for k, s in ((key + ":queue", score), (key + ":queue-lease", now + lease_ms)):
        node.cmd("ZADD", k, -1, MARK)
        node.cmd("ZADD", k, s, "0123456789abcdef:x")
        node.cmd("PEXPIRE", k, lease_ms)


def test_entry_on_a_minority_does_not_block_3n():
    """A live entry older than every waiter on one node of three (a waiter
    that reached only that node) does not keep a fair waiter from a free
    lock; the same entry on two nodes (a majority) does, until wait_ms."""
    c = h.shared_cluster(3)
    con = h.connect(c, fair=1)
    _fake_entry(c[0], "mino", 1)
    is_token(value(con, "SELECT redlock_acquire('mino', 10000, 300)"), "not held up by an entry on one node")
    eq(value(con, "SELECT redlock_release('mino')"), 1, "released")
    h.settle(con)
    _fake_entry(c[1], "mino", 1)
    eq(value(con, "SELECT redlock_acquire('mino', 10000, 300)"), None, "held up by an entry on two nodes")
    h.settle(con)
    for node in c:
        eq([m for m, _ in entries(node, "mino")], ["0123456789abcdef:x"] if node is not c[2] else [],
           "only the stuck entry is left on %s" % node.addr)


def test_queue_keys_of_another_program_are_left_alone_3n():
    """Where the names <key>:queue and <key>:queue-lease hold another
    program's keys (a lock named so, a sorted set without our mark), the
    fair waiter does not queue there and touches nothing; with that on a
    majority it waits as a waiter that does not queue, and still gets the
    lock when it is given back."""
    c = h.shared_cluster(3)
    c[0].cmd("SET", "oth:queue", "someone-else", "PX", 60000)
    c[1].cmd("ZADD", "oth:queue-lease", 5, "member")
    other = h.connect(c)
    is_token(value(other, "SELECT redlock_acquire('oth', 10000)"))
    con = h.connect(c, fair=1)
    done = []
    t = threading.Thread(target=lambda: done.append(value(con, "SELECT redlock_acquire('oth', 10000, 5000)")))
    t.start()
    # it waits (subscribed to its own channel), though it could not queue on a majority
    h.wait_until(lambda: c[2].cmd("PUBSUB", "CHANNELS", "oth:queue:*"), 5, what="the waiter to wait")
    eq(value(other, "SELECT redlock_release('oth')"), 1, "the holder gives the lock back")
    t.join(10)
    is_token(done[0] if done else None, "the waiter got the lock")
    eq(value(con, "SELECT redlock_release('oth')"), 1, "released")
    h.settle(con, other)
    eq(c[0].cmd("GET", "oth:queue"), "someone-else", "another program's string is untouched")
    check(0 < c[0].pttl("oth:queue") <= 60000, "and so is its TTL")
    eq(c[1].cmd("ZRANGE", "oth:queue-lease", 0, -1, "WITHSCORES"), ["member", "5"], "and its sorted set")
    h.wait_until(lambda: c[2].cmd("EXISTS", "oth:queue", "oth:queue-lease") == 0, 5,
                 what="the entry that reached one node to leave it")


def test_mixed_fair_and_non_fair_clients_progress_3n():
    """Fair connections, connections with fair 0 and a plain SET NX client
    (as node-redlock or redsync take the lock) share one name: each takes
    it 4 times, none is held up for good, and never two at once."""
    c = h.shared_cluster(3)
    holding, overlaps, counts, errors = [0], [0], {}, []
    mu = threading.Lock()

    def hold(who):
        with mu:
            holding[0] += 1
            if holding[0] > 1:
                overlaps[0] += 1
        time.sleep(0.003)
        with mu:
            holding[0] -= 1
            counts[who] = counts.get(who, 0) + 1

    def ours(who, fair):
        con = h.connect(c, fair=fair, retry_delay_ms=20, retry_jitter_ms=10)
        try:
            for _ in range(4):
                tok = is_token(value(con, "SELECT redlock_acquire('mix', 5000, 20000)"), who)
                hold(who)
                eq(value(con, "SELECT redlock_release('mix', ?)", tok), 1, who + " released")
        except Exception as e:
            errors.append(e)

    def plain(who):
        import random
        clients = [h.Resp(n.host, n.port) for n in c]
        try:
            for _ in range(4):
                deadline = time.monotonic() + 20
                while True:
                    tok = "%032x" % random.getrandbits(128)
                    yes = [cl for cl in clients if cl.cmd("SET", "mix", tok, "NX", "PX", 5000) == "OK"]
                    if len(yes) >= 2:
                        break
                    for cl in yes:
                        cl.cmd("EVAL", "if redis.call('get',KEYS[1]) == ARGV[1] then "
                               "return redis.call('del',KEYS[1]) end return 0", 1, "mix", tok)
                    check(time.monotonic() < deadline, who + " never got the lock")
                    time.sleep(0.02)     # its retry delay, as node-redlock's
                hold(who)
                for cl in clients:
                    cl.cmd("EVAL", "if redis.call('get',KEYS[1]) == ARGV[1] then "
                           "return redis.call('del',KEYS[1]) end return 0", 1, "mix", tok)
        except Exception as e:
            errors.append(e)
        finally:
            for cl in clients:
                cl.close()
    ts = [threading.Thread(target=ours, args=("fair%d" % i, 1)) for i in range(3)]
    ts += [threading.Thread(target=ours, args=("ours%d" % i, 0)) for i in range(2)]
    ts += [threading.Thread(target=plain, args=("setnx",))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    check(not errors, "clients failed: %r" % errors[:3])
    eq(overlaps[0], 0, "two holders at once")
    eq(sorted(counts.values()), [4] * 6, "every client's turns: %r" % counts)


def test_fair_settings_3n():
    """fair is off by default (0 or 1), queue_lease_ms 2000 (100 to 600000);
    a try-once acquire of a fair connection does not queue."""
    c = h.shared_cluster(3)
    con = h.connect(c)
    eq(value(con, "SELECT redlock_config('fair')"), 0, "fair by default")
    eq(value(con, "SELECT redlock_config('queue_lease_ms')"), 2000, "queue_lease_ms by default")
    eq(value(con, "SELECT redlock_config('fair', 1)"), 1, "fair on")
    for bad in (("fair", 2), ("queue_lease_ms", 99), ("queue_lease_ms", 600001)):
        h.redlock_error(con, "SELECT redlock_config(?, ?)", *bad, contains=("must be",))
    is_token(value(con, "SELECT redlock_acquire('once', 10000)"), "a try-once acquire")
    h.settle(con)
    for node in c:
        eq(node.cmd("EXISTS", "once:queue"), 0, "no queue for a try-once acquire on %s" % node.addr)


def test_release_stands_when_telling_the_queue_is_refused_1n():
    """A fair connection whose Redis user may write the lock's keys but
    only read its queue (ACL %R~), with a dead entry there that the
    release's queue part would prune: redlock_release and
    redlock_release_many still delete the lock and count it (the telling
    fails on its own, after the deletion), and the queue's keys stay."""
    n = h.RedisNode()
    try:
        pw = "Qu3ue-read-pw"
        n.cmd("ACL", "SETUSER", "qread", "reset", "on", ">" + pw, "&*", "+@all",
              "~acl-q-one", "~acl-q-many", "~redlock-client:*", "%R~*")
        con = h.connect("redis://qread:%s@%s:%d" % (pw, n.host, n.port), fair=1, fencing=0)
        dead = "0123456789abcdef:x"
        for how in ("one", "many"):
            name = "acl-q-" + how
            n.cmd("ZADD", name + ":queue", -1, MARK, 1000, dead)
            n.cmd("ZADD", name + ":queue-lease", -1, MARK, 1, dead)
            is_token(value(con, "SELECT redlock_acquire(?, 60000)", name), "qread takes " + name)
            if how == "one":
                eq(value(con, "SELECT redlock_release(?)", name), 1, "released")
            else:
                eq(value(con, "SELECT redlock_release_many(?)", json.dumps([name])), 1, "released")
            eq(n.cmd("EXISTS", name), 0, "the lock key is gone")
            eq(entries(n, name), [(dead, 1000.0)], "the queue the user may not write stays")
        con.close()
    finally:
        n.terminate()


def test_release_of_several_names_wakes_each_queues_head_3n():
    """A fair connection's redlock_release_many, redlock_release_all and
    close with several locks held tell the head of each name's queue: each
    waiter, whose own next try would come only minutes later (retry delay
    and queue lease of 10 minutes), gets its lock from the release. The
    names with a queue get no message on <key>:released, which would wake
    the waiters that do not queue beside the head; a name without a queue
    gets one, as a plain release gives it."""
    c = h.shared_cluster(3)
    slow = {"retry_delay_ms": 600000, "retry_jitter_ms": 0, "queue_lease_ms": 600000}
    for how in ("many", "all", "close"):
        names = ["several-%s-a" % how, "several-%s-b" % how]
        plain = "several-%s-plain" % how
        holder = h.connect(c, fair=1)
        for name in names + [plain]:
            is_token(value(holder, "SELECT redlock_acquire(?, 60000)", name), "the holder takes " + name)
        sub = c[0]._resp(timeout=15)
        ws = [Waiter(c, "%s-%d" % (how, i), name, wait_ms=600000, hold_ms=0, **slow).ready()
              for i, name in enumerate(names)]
        try:
            released = [n + ":released" for n in names + [plain]]
            sub.cmd("SUBSCRIBE", *released)
            for _ in released[1:]:
                sub.next_reply()
            for w, name in zip(ws, names):
                w.go()
                h.wait_until(lambda: queued(c, name, 1), 10,
                             what="the waiter on %s queued everywhere" % name)
                ch = "%s:queue:%s" % (name, entries(c[0], name)[0][0])
                h.wait_until(lambda: all(int(n.cmd("PUBSUB", "NUMSUB", ch)[1]) == 1 for n in c), 10,
                             what="the waiter on %s subscribed on every node" % name)
            if how == "many":
                eq(value(holder, "SELECT redlock_release_many(?)", json.dumps(names + [plain])), 3,
                   "all three released")
            elif how == "all":
                eq(value(holder, "SELECT redlock_release_all()"), 3, "all three released")
            else:
                holder.close()
            for w, name in zip(ws, names):
                r = w.result(timeout=15)
                eq((r["tok"], r.get("error")), (True, None),
                   "the waiter got %s after a release by %s" % (name, how))
            # The release is one script per node: its messages on c[0] come
            # before anything the waiters' own releases publish there.
            heard = []
            while plain + ":released" not in heard:
                heard.append(sub.next_reply()[1])
            eq(heard, [plain + ":released"],
               "the messages of the release by %s on <key>:released" % how)
        finally:
            sub.close()
            for w in ws:
                w.kill()
            if how != "close":
                holder.close()
