#!/usr/bin/python3
"""`make valgrind`: representative SQL scenarios in the real sqlite3 shell
under valgrind's memcheck, against real redis-server processes (harness.py).

    VALGRIND_FLAGS="..." /usr/bin/python3 mk/hardening/valgrind_shell.py [FILTER ...]

Each scenario pipes `.load ./redlock` plus its SQL into
`valgrind $VALGRIND_FLAGS --log-file=... sqlite3 :memory:`, checks the
shell's output and the keys on the nodes, and passes only when valgrind's
log shows no error at all (ERROR SUMMARY: 0, which with
--errors-for-leak-kinds=definite,indirect includes every definite or
indirect leak). Prints PASS/FAIL per scenario and "N passed, N failed"."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import re
import queue
import signal
import subprocess
import threading
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "sql-tests"))

import harness as h  # noqa: E402

FLAGS = os.environ.get("VALGRIND_FLAGS", "--leak-check=full --errors-for-leak-kinds=definite,indirect "
                       "--error-exitcode=1").split()
HELD_BY_OTHER = "0123456789abcdef0123456789abcdef"
SLOW = "SELECT redlock_config('timeout_ms', 2000);\n"   # valgrind is slow; not under test here


class Failed(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Failed(msg)


def run_shell(sql, nodes, logdir, name, timeout=120):
    """Runs the shell under valgrind; returns (rc, out, err, log text).
    sql is a string, or a list of steps (sql, action): each step's SQL is
    sent, and once the shell has run it, action() is called (e.g. to stop a
    node between two statements)."""
    log = os.path.join(logdir, name + ".vg.%p")
    env = dict(os.environ)
    env["REDLOCK_NODES"] = h.nodes_env_of(nodes) if nodes is not None else ""
    argv = ["valgrind"] + FLAGS + ["--log-file=" + log, h.SQLITE3, ":memory:"]
    steps = [(sql, None)] if isinstance(sql, str) else sql
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, bufsize=1)
    deadline = time.monotonic() + timeout
    out = []
    # Lines come through a reader thread: select() on the pipe followed by
    # readline() misses a line already read into Python's buffer together
    # with the one before it, and then waits for nothing until the deadline.
    lines_q = queue.Queue()

    def reader():
        for ln in p.stdout:
            lines_q.put(ln)
        lines_q.put(None)
    rt = threading.Thread(target=reader, daemon=True)
    rt.start()
    try:
        p.stdin.write(".load %s\n" % h.EXT)
        for i, (text, action) in enumerate(steps):
            marker = "@@step-%d" % i
            p.stdin.write("%s\nSELECT '%s';\n" % (text, marker))
            p.stdin.flush()
            while True:
                left = deadline - time.monotonic()
                need(left > 0, "the shell did not get through step %d in time" % i)
                try:
                    line = lines_q.get(timeout=left)
                except queue.Empty:
                    line = ""
                    need(False, "the shell did not get through step %d in time" % i)
                need(line is not None, "the shell ended before step %d finished" % i)
                if line.strip() == marker:
                    break
                out.append(line)
            if action:
                action()
        p.stdin.close()
        err = p.stderr.read()
        p.wait(timeout=max(1, deadline - time.monotonic()))
        rt.join(timeout=5)
        rest = []
        while True:
            try:
                ln = lines_q.get_nowait()
            except queue.Empty:
                break
            if ln is not None:
                rest.append(ln)
        rest = "".join(rest)
    except BaseException:
        p.kill()
        p.wait()
        raise
    out.append(rest)
    texts = []
    for f in sorted(os.listdir(logdir)):
        if f.startswith(name + ".vg."):
            with open(os.path.join(logdir, f), errors="replace") as fh:
                texts.append(fh.read())
    return p.returncode, "".join(out), err, "\n".join(texts)


def check_valgrind(log):
    m = re.findall(r"ERROR SUMMARY: (\d+) errors", log)
    need(m, "no valgrind summary in the log:\n" + log[-3000:])
    lost = {k: int(v.replace(",", "")) for k, v in
            re.findall(r"(definitely|indirectly) lost: ([\d,]+) bytes", log)}
    if any(int(x) for x in m) or any(lost.values()):
        raise Failed("valgrind found errors or leaks:\n" + log[-6000:])
    return lost


def lines(out):
    return [l for l in out.splitlines() if l.strip()]


# ---------------------------------------------------------------------------
# scenarios: each returns (sql, nodes, expected shell rc, check(out, err))
# ---------------------------------------------------------------------------

def sc_contract(c):
    for n in c:
        n.cmd("SET", "vg-held", HELD_BY_OTHER, "PX", 60000)
    sql = SLOW + """
SELECT 'version:' || (redlock_version() IS NOT NULL);
SELECT 'nodes:' || count(*) FROM redlock_nodes;
SELECT 'acquire:' || length(redlock_acquire('vg-a', 10000));
SELECT 'locks:' || count(*) FROM redlock_locks;
SELECT 'validity:' || (redlock_validity('vg-a') > 0);
SELECT 'extend:' || (redlock_extend('vg-a', 20000) > 0);
SELECT 'release:' || redlock_release('vg-a');
SELECT 'again:' || coalesce(redlock_release('vg-a'), 'null');
SELECT 'held:' || coalesce(redlock_acquire('vg-held', 10000), 'null');
SELECT 'other:' || redlock_release('vg-held', '%s');
SELECT 'lock:' || length(redlock_lock('vg-b', 10000, 0));
SELECT 'fence:' || (redlock_fence('vg-b') > 0);
SELECT 'all:' || redlock_release_all();
SELECT 'prefix:' || redlock_config('key_prefix', 'vgp:');
SELECT 'prefixed:' || length(redlock_acquire('vg-c', 10000));
SELECT 'state:' || group_concat(state) FROM redlock_nodes;
SELECT 'url:' || count(*) FROM redlock_nodes WHERE url LIKE 'redis://%%';
""" % ("f" * 32)

    def check(out, err):
        got = lines(out)
        for want in ("version:1", "nodes:3", "acquire:60", "locks:1", "validity:1", "extend:1",
                     "release:1", "again:null", "held:null", "other:0", "lock:60", "fence:1",
                     "all:1", "prefix:vgp:", "prefixed:60", "state:up,up,up", "url:3"):
            need(want in got, "expected %r in the output %r (stderr %r)" % (want, got, err))
        for n in c:
            need(n.get("vg-held") == HELD_BY_OTHER, "someone else's lock was touched on %s" % n.addr)
            need(not n.cmd("EXISTS", "vg-a") and not n.cmd("EXISTS", "vg-b"), "released keys left behind")
            need(not n.cmd("EXISTS", "vgp:vg-c"), "lock held at close not released on %s" % n.addr)
    return sql, c, 0, check


def sc_close_with_held_locks(c):
    sql = SLOW + "".join("SELECT length(redlock_acquire('vg-close-%d', 30000));\n" % i for i in range(5))
    sql += "SELECT redlock_config('auto_extend', 1);\nSELECT length(redlock_acquire('vg-close-ae', 3000));\n"

    def check(out, err):
        eq = lines(out)
        need(eq.count("60") == 6, "six tokens expected, got %r (stderr %r)" % (eq, err))
        for n in c:
            left = [k for k in n.keys("vg-close-*") if not k.endswith(":fence")]
            need(not left, "keys left on %s after the shell closed: %r" % (n.addr, left))
    return sql, c, 0, check


def sc_killed_node(c):
    c[0].kill9()
    sql = SLOW + """
SELECT 'minority-dead:' || length(redlock_acquire('vg-k', 10000));
SELECT 'release:' || redlock_release('vg-k');
SELECT 'down:' || group_concat(state, ',') FROM redlock_nodes WHERE last_error IS NOT NULL;
"""

    def check(out, err):
        got = lines(out)
        for want in ("minority-dead:60", "release:1"):
            need(want in got, "expected %r in %r (stderr %r)" % (want, got, err))
        need(any(l.startswith("down:") and "down" in l for l in got), "the dead node is not shown down: %r" % got)
    return sql, c, 0, check


def sc_majority_dead(c):
    c[0].kill9()
    c[1].kill9()
    sql = SLOW + """
SELECT 'acquire:' || coalesce(redlock_acquire('vg-m', 10000), 'null');
SELECT 'after';
"""

    def check(out, err):
        need("after" in lines(out), "the shell stopped after the error: %r" % out)
        need("redlock: " in err and "node" in err, "no per-node error for a dead majority: %r" % err)
        need(not c[2].cmd("EXISTS", "vg-m"), "the minority kept the key after a failed acquire")
    return sql, c, 1, check


def sc_stopped_node(c):
    # A first round with a generous timeout (valgrind translates code the
    # first time it runs), then node 2 is SIGSTOPped: it hangs with its
    # socket open, costs one per-node timeout, and its connection is kept
    # as a stale one until the shell closes.
    steps = [(SLOW + "SELECT 'warm:' || length(redlock_acquire('vg-w', 10000)) || redlock_release('vg-w');",
              c[1].stop),
             ("""SELECT redlock_config('timeout_ms', 300);
SELECT 'acquire:' || length(redlock_acquire('vg-s', 10000));
SELECT 'release:' || redlock_release('vg-s');
SELECT 'state:' || state FROM redlock_nodes WHERE id = 2;
SELECT 'acquire2:' || length(redlock_acquire('vg-s2', 10000));""", None)]

    def check(out, err):
        got = lines(out)
        for want in ("warm:601", "acquire:60", "release:1", "state:down", "acquire2:60"):
            need(want in got, "expected %r in %r (stderr %r)" % (want, got, err))
    return steps, c, 0, check


def sc_proxy_faults(c):
    # Node 1 behind the fault proxy: replies late (a stale connection and a
    # late reply read after the round), then every connection reset (RST),
    # then normal again.
    from faultproxy import FaultProxy
    proxy = FaultProxy(c[0].host, c[0].port)
    PROXIES.append(proxy)
    steps = [(SLOW + "SELECT 'warm:' || length(redlock_acquire('vg-w', 10000)) || redlock_release('vg-w');",
              lambda: proxy.delay_replies(600)),
             ("""SELECT redlock_config('timeout_ms', 200);
SELECT 'late:' || length(redlock_acquire('vg-p', 10000));
SELECT 'release:' || redlock_release('vg-p');""", proxy.reset),
             ("SELECT 'reset:' || length(redlock_acquire('vg-p2', 10000));", proxy.pass_),
             ("""SELECT redlock_config('reconnect_min_ms', 1);
SELECT redlock_config('reconnect_max_ms', 1);
SELECT 'back:' || length(redlock_acquire('vg-p3', 10000));""", None)]

    def check(out, err):
        got = lines(out)
        for want in ("warm:601", "late:60", "release:1", "reset:60", "back:60"):
            need(want in got, "expected %r in %r (stderr %r)" % (want, got, err))
    return steps, [proxy.url, c[1], c[2]], 0, check


PROXIES = []


def sc_nodes_table(c):
    sql = SLOW + """
INSERT INTO redlock_nodes(url) VALUES ('redis://alice:secretpw@127.0.0.1:1/2?timeout_ms=100');
INSERT INTO redlock_nodes(host, port, password) VALUES ('127.0.0.1', 2, 'secretpw');
UPDATE redlock_nodes SET port = 3 WHERE port = 2;
UPDATE redlock_nodes SET port = 3, password = 'secretpw' WHERE port = 2;
SELECT 'pw:' || group_concat(coalesce(password, '-')) FROM redlock_nodes;
SELECT 'url:' || url FROM redlock_nodes WHERE port = 1;
DELETE FROM redlock_nodes WHERE port IN (1, 3);
INSERT INTO redlock_nodes(url) VALUES ('http://x');
INSERT INTO redlock_nodes(url) VALUES ('redis://[::1');
INSERT INTO redlock_nodes(host, port) VALUES ('127.0.0.1', 70000);
UPDATE redlock_nodes SET id = 99;
SELECT 'count:' || count(*) FROM redlock_nodes;
"""

    def check(out, err):
        got = lines(out)
        need("count:3" in got, "rows after the scenario: %r (stderr %r)" % (got, err))
        need(any(l.startswith("pw:") and "********" in l for l in got), "password not masked: %r" % got)
        need("secretpw" not in out and "secretpw" not in err, "the password was shown: %r %r" % (out, err))
        need(err.count("redlock: ") >= 5, "expected five refusals, got %r" % err)
        need("give the password again" in err, "moving a node kept its password: %r" % err)
    return sql, c, 1, check


def sc_bad_input(c):
    for n in c:
        n.cmd("SET", "vg-own", HELD_BY_OTHER, "PX", 60000)
    bad = ["SELECT redlock_acquire(NULL, 1000);", "SELECT redlock_acquire('', 1000);",
           "SELECT redlock_acquire('r', 0);", "SELECT redlock_acquire('r', -1);",
           "SELECT redlock_acquire('r', 1.5);", "SELECT redlock_acquire('r', '10');",
           "SELECT redlock_acquire('r', 1000, -1);", "SELECT redlock_acquire(x'00ff', 1000);",
           "SELECT redlock_acquire(zeroblob(10), 1000);",
           "SELECT redlock_acquire(printf('%.*c', 70000, 'x'), 1000);",
           "SELECT redlock_release('vg-own', '');", "SELECT redlock_extend('r', 2147483648);",
           "SELECT redlock_config('nope');", "SELECT redlock_config('timeout_ms', -5);"]
    sql = SLOW + "\n".join(bad) + "\nSELECT 'other:' || redlock_release('vg-own', '%s');\n" % ("e" * 32)

    def check(out, err):
        need("other:0" in lines(out), "release with someone else's token: %r" % out)
        need(err.count("redlock: ") >= len(bad), "expected %d refusals, got %r" % (len(bad), err))
        for n in c:
            need(n.get("vg-own") == HELD_BY_OTHER, "the holder's key was touched on %s" % n.addr)
    return sql, c, 1, check


def sc_auth(_c):
    node = h.RedisNode(password="vg-secret")
    sql = SLOW + """
SELECT 'ok:' || length(redlock_acquire('vg-auth', 10000));
INSERT INTO redlock_nodes(host, port, password) VALUES ('127.0.0.1', %d, 'wrong-secret');
DELETE FROM redlock_nodes WHERE id = 1;
SELECT 'wrong:' || coalesce(redlock_acquire('vg-auth2', 10000), 'null');
""" % node.port

    def check(out, err):
        need("ok:60" in lines(out), "acquire with the right password: %r %r" % (out, err))
        need("redlock: " in err and "wrong-secret" not in err and "vg-secret" not in err,
             "wrong password: %r" % err)
        need(not node.cmd("EXISTS", "vg-auth2"), "a lock was taken with a wrong password")
    return sql, [node], 1, check


def sc_tls(_c):
    """TLS nodes: a verified handshake, a reconnection that resumes its
    session, a verification failure and a node whose files are refused."""
    certs = h.tls_certs()
    nodes = [h.TlsRedisNode(certs) for _ in range(2)]
    wrong = h.TlsRedisNode(certs, cert="wrong")
    sql = [(SLOW + "SELECT redlock_config('reconnect_min_ms', 1);\n"
            "SELECT 'ok:' || length(redlock_acquire('vg-tls', 10000));\n"
            "SELECT 'sum:' || count(*) FROM redlock_nodes;\n",
            lambda: [n.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes") for n in nodes]),
           ("SELECT 'ext:' || coalesce(redlock_extend('vg-tls', 10000), 'null');\n"
            "SELECT 'ext2:' || (redlock_extend('vg-tls', 10000) > 0);\n"
            "SELECT 'resumed:' || sum(tls_resumed) FROM redlock_nodes;\n"
            "SELECT 'rel:' || redlock_release('vg-tls');\n"
            "DELETE FROM redlock_nodes;\n"
            "INSERT INTO redlock_nodes(url) VALUES ('%s');\n"
            "SELECT 'wrong:' || coalesce(redlock_acquire('vg-tls2', 1000), 'null');\n"
            "INSERT INTO redlock_nodes(url) VALUES ('rediss://127.0.0.1:1?tls_ca_file=/nonexistent.pem');\n"
            % wrong.url, None)]

    def check(out, err):
        ls = lines(out)
        need("ok:60" in ls and "rel:1" in ls, "acquire and release over TLS: %r %r" % (out, err))
        need("ext2:1" in ls, "extend after the reconnection: %r %r" % (out, err))
        need(any(x.startswith("resumed:") and x != "resumed:0" for x in ls), "no resumed session: %r" % out)
        need("IP address mismatch" in err and "No such file" in err, "TLS errors: %r" % err)
        need(not any(n.cmd("EXISTS", "vg-tls") for n in nodes), "the lock is still on a node")
    return sql, nodes, 1, check


SCENARIOS = [
    ("contract", sc_contract),
    ("close_with_held_locks", sc_close_with_held_locks),
    ("killed_node", sc_killed_node),
    ("majority_dead", sc_majority_dead),
    ("stopped_node", sc_stopped_node),
    ("proxy_faults", sc_proxy_faults),
    ("nodes_table", sc_nodes_table),
    ("bad_input", sc_bad_input),
    ("auth", sc_auth),
    ("tls", sc_tls),
]


def main(argv):
    filters = argv[1:]
    if subprocess.run(["valgrind", "--version"], capture_output=True).returncode != 0:
        print("valgrind is not installed (apt-get install valgrind)")
        return 1
    h.require_extension()
    passed = failed = 0
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redlock-valgrind-") as logdir:
        for name, fn in SCENARIOS:
            if filters and not any(f in name for f in filters):
                continue
            t = time.monotonic()
            try:
                with h.Cluster(3) as c:
                    sql, nodes, want_rc, check = fn(c)
                    ts = time.monotonic()
                    rc, out, err, log = run_shell(sql, nodes, logdir, name)
                    shell_s = time.monotonic() - ts
                    lost = check_valgrind(log)
                    need(rc == want_rc, "shell exit status %r, expected %r; stderr %r" % (rc, want_rc, err))
                    check(out, err)
                passed += 1
                print("PASS valgrind.%s (%.1fs, shell %.1fs; definitely lost %d, indirectly lost %d bytes)"
                      % (name, time.monotonic() - t, shell_s, lost.get("definitely", 0), lost.get("indirectly", 0)),
                      flush=True)
            except (Failed, AssertionError, subprocess.TimeoutExpired, RuntimeError) as e:
                failed += 1
                print("FAIL valgrind.%s: %s" % (name, e), flush=True)
            finally:
                while PROXIES:
                    PROXIES.pop().close()
                h.cleanup_test()
    h.terminate_all()
    print("(%.1fs)" % (time.monotonic() - t0))
    print("%d passed, %d failed" % (passed, failed), flush=True)
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *a: (h.terminate_all(), os._exit(143)))
    sys.exit(main(sys.argv))
