"""Events through SQLite's log: a C host that installs SQLITE_CONFIG_LOG
sees one sqlite3_log line, with its own extended code, for a node marked
down and back up, a lock lost by auto-extension, an acquisition that failed
for lack of a quorum, a node refused by the node checks, a lock taken with
on_lost that expired, and an auto-extension that got too few answers."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import select
import subprocess
import tempfile
import time

import harness as h
from harness import check, eq

HERE = os.path.dirname(os.path.abspath(__file__))

NODE_DOWN = 28 | (101 << 8)
NODE_UP = 27 | (102 << 8)
LOCK_LOST = 28 | (103 << 8)
NO_QUORUM = 28 | (104 << 8)
NODE_REFUSED = 28 | (105 << 8)
EXTEND_FAILED = 28 | (106 << 8)
LOCK_EXPIRED = 28 | (107 << 8)

_built = {}


def driver_path():
    if "path" not in _built:
        d = tempfile.mkdtemp(prefix="redlock-log-driver-")
        out = os.path.join(d, "log_driver")
        # the compiler runs without the sanitizer run's preload (it is not built for it)
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
        subprocess.run(["cc", "-o", out, os.path.join(HERE, "log_driver.c"), "-lsqlite3", "-lpthread"],
                       check=True, capture_output=True, env=env, timeout=60)
        _built["path"] = out
    return _built["path"]


class Driver:
    def __init__(self, nodes, **config):
        env = dict(os.environ, REDLOCK_NODES=h.nodes_env_of(nodes))
        self.p = subprocess.Popen([driver_path(), h.EXT_SO], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  env=env, text=True, bufsize=1)
        self.logs = []
        self._buf = ""
        self._lines = []
        eq(self._next(10)[0], "loaded", "driver loaded the extension")
        config = dict(dict(timeout_ms=h.RELAXED_TIMEOUT_MS), **config)
        for k, v in config.items():
            self.sql("SELECT redlock_config('%s', %d)" % (k, v))

    def _next(self, timeout):
        deadline = time.monotonic() + timeout
        while not self._lines:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("log_driver said nothing for %s s" % timeout)
            r, _, _ = select.select([self.p.stdout], [], [], left)
            if r:
                chunk = os.read(self.p.stdout.fileno(), 65536).decode()
                if not chunk:
                    raise AssertionError("log_driver exited")
                self._buf += chunk
                *lines, self._buf = self._buf.split("\n")
                self._lines += lines
        line = self._lines.pop(0)
        what, _, rest = line.partition(" ")
        if what == "log":
            code, _, msg = rest.partition(" ")
            self.logs.append((int(code), msg))
        return what, rest

    def sql(self, stmt, timeout=30):
        """Runs stmt; returns (rows, error)."""
        self.p.stdin.write(stmt + "\n")
        self.p.stdin.flush()
        rows, err = [], None
        while True:
            what, rest = self._next(timeout)
            if what == "ok":
                return rows, err
            if what == "row":
                rows.append(rest)
            elif what == "error":
                err = rest

    def wait_log(self, code, timeout=10):
        deadline = time.monotonic() + timeout
        while not any(c == code for c, _ in self.logs):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no log line with code %d; got %r" % (code, self.logs))
            try:
                self._next(left)
            except AssertionError:
                pass
        return [m for c, m in self.logs if c == code]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def test_node_down_and_up_3n():
    with h.Cluster(3) as cl:
        d = Driver(cl)
        try:
            eq(d.sql("SELECT redlock_ping()"), (["3"], None), "ping")
            eq(d.logs, [], "no event while all is well")
            cl[1].kill9()
            eq(d.sql("SELECT redlock_ping()"), (["2"], None), "ping with a node killed")
            down = d.wait_log(NODE_DOWN)
            eq(len(down), 1, "one node-down line")
            check(down[0].startswith("redlock: node 2 127.0.0.1:%d marked down: " % cl[1].port),
                  "the line names the node: %r" % down[0])
            cl[1].restart()
            eq(d.sql("SELECT redlock_ping()"), (["3"], None), "ping after the restart")
            up = d.wait_log(NODE_UP)
            eq(up, ["redlock: node 2 127.0.0.1:%d is back up" % cl[1].port], "node-up line")
        finally:
            d.close()


def test_no_quorum_1n():
    node = h.RedisNode()
    d = Driver([node])
    try:
        node.kill9()
        rows, err = d.sql("SELECT redlock_acquire('nq', 10000)")
        check(err and err.startswith("redlock: could not lock 'nq'"), "the call fails: %r" % err)
        lines = d.wait_log(NO_QUORUM)
        eq(len(lines), 1, "one no-quorum line")
        check(lines[0].startswith("redlock: could not lock 'nq': ") and "node 1" in lines[0],
              "the line says which lock and which node: %r" % lines[0])
        eq(len(d.wait_log(NODE_DOWN)), 1, "and the node went down")
    finally:
        d.close()
        node.terminate()


def test_lock_lost_by_auto_extension_1n():
    node = h.RedisNode()
    d = Driver([node], auto_extend=1, fencing=0)
    try:
        rows, err = d.sql("SELECT redlock_acquire('ae', 600)")
        eq(err, None, "acquire")
        node.cmd("DEL", "ae")  # what an eviction or a failover does to the key
        lines = d.wait_log(LOCK_LOST)
        eq(len(lines), 1, "one lock-lost line")
        check(lines[0].startswith("redlock: lock 'ae' lost by auto-extension: "), "the line: %r" % lines[0])
        check(rows[0] not in lines[0], "no token in the line")
        eq(d.sql("SELECT state FROM redlock_locks"), (["lost"], None), "the lock shows lost")
    finally:
        d.close()
        node.terminate()


def test_node_refused_once_1n():
    node = h.RedisNode(extra_args=["--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"])
    d = Driver([node])
    try:
        d.sql("SELECT redlock_acquire('rf', 10000)")
        d.sql("SELECT redlock_acquire('rf', 10000)")
        lines = d.wait_log(NODE_REFUSED)
        eq(len(lines), 1, "one line per connection, not per call")
        eq(lines[0], "redlock: node 1 127.0.0.1:%d refused: evicts keys (maxmemory-policy volatile-ttl; "
           "allow_evicting_nodes is 0)" % node.port, "the line")
        eq(len([c for c, _ in d.logs if c == NO_QUORUM]), 2, "and each failed acquisition")
    finally:
        d.close()
        node.terminate()


def test_lock_expired_and_extend_failed_1n():
    node = h.RedisNode()
    d = Driver([node], on_lost=1, timeout_ms=100)
    try:
        eq(d.sql("SELECT redlock_acquire('ex', 200) IS NOT NULL"), (["1"], None), "acquire")
        eq(d.wait_log(LOCK_EXPIRED), ["redlock: lock 'ex' expired: its validity ran out while it was held"],
           "the keeper watching a lock taken with on_lost")
        eq(d.sql("SELECT redlock_config('auto_extend', 1)"), (["1"], None), "auto_extend")
        eq(d.sql("SELECT redlock_acquire('ef', 900) IS NOT NULL"), (["1"], None), "acquire")
        node.stop()
        try:
            lines = d.wait_log(EXTEND_FAILED)
        finally:
            node.cont()
        eq(len(lines), 1, "one extend-failed line")
        check(lines[0].startswith("redlock: lock 'ef' not extended, trying again while it is valid: "),
              "the line: %r" % lines[0])
    finally:
        d.close()
        node.terminate()


def test_shell_prints_nothing_1n():
    """The sqlite3 shell installs no log callback: an event prints nothing."""
    node = h.RedisNode(extra_args=["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"])
    try:
        rc, out, err = h.shell("SELECT redlock_ping();\nSELECT state FROM redlock_nodes;\n"
                               "SELECT redlock_acquire('x', 1000);\n", nodes_env=h.nodes_env_of([node]))
        eq(out.split(), ["1", "evicting"], "only the results")
        check(err.count("\n") == 1 and "redlock: could not lock 'x'" in err, "only the error on stderr: %r" % err)
    finally:
        node.terminate()
