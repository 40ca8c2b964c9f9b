"""Test harness for the redlock SQLite extension.

Standard library only; run it with /usr/bin/python3 (the interpreter whose
sqlite3 module can load extensions).

What it gives the tests:

* RedisNode / Cluster: real redis-server processes on free loopback ports,
  with a tiny RESP client (node.cmd(...)), kill -9, SIGSTOP/SIGCONT, restart.
* connect(nodes, **config): a sqlite3 connection with ./redlock loaded and
  REDLOCK_NODES seeded from the given nodes.
* SqlProc(nodes): the same, in another process (a second client machine).
* shell(sql, nodes): the real sqlite3 shell with the extension loaded.
* small assertion helpers with clear messages, and wait_until() for polling.

Every server, worker and shell started here is tracked and stopped by
cleanup_test() / terminate_all(), which run between tests, at exit, and on
SIGTERM.
"""
# SPDX-License-Identifier: BSD-3-Clause

import atexit
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
# the extension, without ".so" (sqlite adds it); REDLOCK_EXT overrides it,
# e.g. to test a sanitizer build kept elsewhere
EXT = os.environ.get("REDLOCK_EXT") or os.path.join(REPO, "redlock")
EXT_SO = EXT + ".so"
PYTHON = "/usr/bin/python3"
SQLITE3 = shutil.which("sqlite3", path="/usr/bin:/bin") or "sqlite3"
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
REDIS_CLI = shutil.which("redis-cli") or "/usr/bin/redis-cli"

TOKEN_RE = re.compile(r"^[0-9a-f]{60}$")

# --------------------------------------------------------------------------
# bookkeeping of everything we start
# --------------------------------------------------------------------------

_lock = threading.RLock()
_live_nodes = set()          # RedisNode objects with a process
_live_procs = set()          # SqlProc / shell Popen objects
_connections = []            # sqlite3 connections made by connect()
_shared = {}                 # n -> Cluster reused within a test module
_env_lock = threading.Lock()


def _track(obj, registry):
    with _lock:
        registry.add(obj)


def _untrack(obj, registry):
    with _lock:
        registry.discard(obj)


# --------------------------------------------------------------------------
# RESP client
# --------------------------------------------------------------------------

class RedisError(Exception):
    """An error reply (-ERR ...) from Redis."""


def _encode(args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode("utf-8")
        elif isinstance(a, (int, float)):
            b = repr(a).encode()
        else:
            raise TypeError("cannot send %r to redis" % (a,))
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class Resp:
    """Minimal synchronous RESP2 client over one TCP socket."""

    def __init__(self, host, port, password=None, username=None, timeout=5.0, tls=None):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is not None:          # an ssl.SSLContext: the node serves TLS
            self.sock = tls.wrap_socket(self.sock, server_hostname=host)
        self.buf = b""
        if password is not None:
            if username is not None:
                self.cmd("AUTH", username, password)
            else:
                self.cmd("AUTH", password)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("redis closed the connection")
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._fill()

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _reply(self, raw):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest if raw else rest.decode()
        if kind == b"-":
            return RedisError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n)
            return data if raw else data.decode("utf-8", errors="surrogateescape")
        if kind == b"*":
            n = int(rest)
            if n < 0:
                return None
            return [self._reply(raw) for _ in range(n)]
        raise ConnectionError("bad RESP line %r" % line)

    def cmd(self, *args, raw=False):
        self.sock.sendall(_encode(args))
        return self.next_reply(raw)

    def next_reply(self, raw=False):
        """The next reply without sending anything: a subscribed
        connection's further confirmations and messages."""
        r = self._reply(raw)
        if isinstance(r, RedisError):
            raise r
        return r


# --------------------------------------------------------------------------
# redis-server processes
# --------------------------------------------------------------------------

def _port_range():
    """REDLOCK_TEST_PORTS="lo-hi" (set by run.py when modules run side by
    side): this process's own ports. None: the kernel picks."""
    try:
        lo, hi = (int(x) for x in os.environ.get("REDLOCK_TEST_PORTS", "").split("-"))
    except ValueError:
        return None
    return (lo, hi) if 0 < lo <= hi < 65536 else None


_PORTS = _port_range()
_handed_out = set()
_port_rng = random.Random()     # its own: tests may seed the module's


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port():
    """A loopback port nothing listens on. Within REDLOCK_TEST_PORTS, a port
    is handed out once per process, so one a test killed (to restart) or
    keeps free on purpose is never given to a later node."""
    if _PORTS is not None:
        lo, hi = _PORTS
        with _lock:
            for _ in range(4 * (hi - lo + 1)):
                p = _port_rng.randint(lo, hi)
                if p not in _handed_out and _bindable(p):
                    _handed_out.add(p)
                    return p
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


class LoopbackServer:
    """A test server on a free loopback port: each connection accepted is
    handed to serve(sock) in a thread of its own. Sockets given to track()
    are woken and closed by close(), which waits for every thread (a close
    alone does not end a blocked accept or recv, and a thread still blocked
    at exit shows as a leak under the sanitizers)."""

    def __init__(self, serve):
        self.serve = serve
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.socks = [self.listener]
        self.threads = [threading.Thread(target=self._accept)]
        self.threads[0].start()

    def track(self, sock):
        self.socks.append(sock)
        return sock

    def _accept(self):
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            t = threading.Thread(target=self.serve, args=(self.track(sock),))
            self.threads.append(t)
            t.start()

    def close(self):
        for s in list(self.socks):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in list(self.threads):
            t.join(10)
        for s in self.socks:
            s.close()


def wait_until(pred, timeout=5.0, interval=0.005, what="condition"):
    """Poll pred() until it returns something truthy; return that value.
    Raises AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)
        interval = min(interval * 1.5, 0.05)


class RedisNode:
    """One redis-server on 127.0.0.1:<free port>."""

    def __init__(self, password=None, username=None, extra_args=(), port=None):
        self.host = "127.0.0.1"
        self.password = password
        self.username = username      # used by cmd() to AUTH when set
        self.extra_args = list(extra_args)
        self.dir = tempfile.mkdtemp(prefix="redlock-test-redis-")
        self.proc = None
        self.port = None
        self._client = None
        self._stopped = False
        self._start(port)

    # -- process control ---------------------------------------------------
    def _argv(self, port):
        argv = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--daemonize", "no",
                "--dir", self.dir, "--logfile", os.path.join(self.dir, "log")]
        if self.password is not None:
            argv += ["--requirepass", self.password]
        return argv + self.extra_args

    def _start(self, port=None, attempts=20):
        fixed = port is not None
        last = ""
        for _ in range(attempts):
            p = port if fixed else free_port()
            proc = subprocess.Popen(self._argv(p), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    cwd=self.dir)
            self.proc, self.port = proc, p
            _track(self, _live_nodes)
            if self._wait_ready(proc):
                self._stopped = False
                return
            last = self.log_tail()
            self._reap()
            if fixed:
                time.sleep(0.05)     # same port: give the kernel a moment
        raise RuntimeError("redis-server did not start (port %s): %s" % (self.port, last))

    def _wait_ready(self, proc, timeout=10.0):
        deadline = time.monotonic() + timeout
        delay = 0.002
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                c = self._resp(timeout=1.0)
                try:
                    r = c.cmd("PING")
                except RedisError as e:          # NOAUTH: it is up
                    r = "PONG" if "NOAUTH" in str(e) or "AUTH" in str(e) else None
                finally:
                    c.close()
                if r == "PONG" and proc.poll() is None:
                    return True
            except OSError:
                pass
            time.sleep(delay)
            delay = min(delay * 2, 0.05)
        return False

    def _reap(self):
        if self._client:
            self._client.close()
            self._client = None
        p = self.proc
        if p is not None:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.proc = None
        self._stopped = False
        _untrack(self, _live_nodes)

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def stopped(self):
        return self._stopped

    def kill9(self):
        """kill -9 the server (the port stays reserved for restart())."""
        if self._client:
            self._client.close()
            self._client = None
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._stopped = False

    def stop(self):
        """SIGSTOP: the server hangs, its socket stays open."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        self._stopped = True
        wait_until(lambda: self._proc_state() == "T", 5, what="redis %d to stop" % self.port)

    def cont(self):
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
        self._stopped = False

    def _proc_state(self):
        try:
            with open("/proc/%d/stat" % self.proc.pid) as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None

    def restart(self):
        """Start again on the same port (after kill9(), or kill it first)."""
        port = self.port
        self._reap()
        self._start(port)

    def terminate(self):
        self._reap()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- talking to it -----------------------------------------------------
    def _resp(self, **kw):
        """A new RESP client connection to this node."""
        return Resp(self.host, self.port, **kw)

    @property
    def url(self):
        return "redis://%s:%d" % (self.host, self.port)

    @property
    def auth_url(self):
        if self.password is None:
            return self.url
        user = self.username or ""
        return "redis://%s:%s@%s:%d" % (user, self.password, self.host, self.port)

    @property
    def addr(self):
        return "%s:%d" % (self.host, self.port)

    def cmd(self, *args, raw=False):
        """Send one command; return the decoded reply; raise RedisError on -ERR."""
        for attempt in (0, 1):
            if self._client is None:
                self._client = self._resp(password=self.password, username=self.username)
            try:
                return self._client.cmd(*args, raw=raw)
            except (OSError, ConnectionError):
                self._client.close()
                self._client = None
                if attempt:
                    raise

    def cli(self, *args, timeout=10):
        """Run the real redis-cli against this node; return its stdout stripped."""
        argv = [REDIS_CLI, "-h", self.host, "-p", str(self.port)]
        if self.password is not None:
            argv += ["--no-auth-warning", "-a", self.password]
            if self.username:
                argv += ["--user", self.username]
        r = subprocess.run(argv + [str(a) for a in args], capture_output=True,
                           text=True, timeout=timeout)
        if r.returncode != 0:
            raise RedisError("redis-cli failed (%d): %s" % (r.returncode, r.stderr.strip()))
        return r.stdout.strip()

    def get(self, key):
        return self.cmd("GET", key)

    def pttl(self, key):
        return self.cmd("PTTL", key)

    def dbsize(self):
        return self.cmd("DBSIZE")

    def keys(self, pattern="*"):
        return sorted(self.cmd("KEYS", pattern))

    def calls(self, command):
        """How many times `command` was executed (INFO commandstats)."""
        info = self.cmd("INFO", "commandstats")
        m = re.search(r"^cmdstat_%s:calls=(\d+)" % command.lower(), info, re.M)
        return int(m.group(1)) if m else 0

    def flushall(self):
        self.cmd("FLUSHALL")

    def log_tail(self, n=2000):
        try:
            with open(os.path.join(self.dir, "log"), errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def __repr__(self):
        return "<RedisNode %s pid=%s>" % (self.addr, self.pid)


class Cluster:
    """n independent redis-server nodes. Use as a context manager."""

    node_class = None                # RedisNode unless a subclass says otherwise

    def __init__(self, n, **node_kwargs):
        self.nodes = []
        try:
            for _ in range(n):
                self.nodes.append((self.node_class or RedisNode)(**node_kwargs))
        except BaseException:
            self.terminate()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.terminate()
        return False

    def __len__(self):
        return len(self.nodes)

    def __iter__(self):
        return iter(self.nodes)

    def __getitem__(self, i):
        return self.nodes[i]

    @property
    def urls(self):
        return [n.auth_url for n in self.nodes]

    def nodes_env(self):
        return ",".join(self.urls)

    @property
    def quorum(self):
        return len(self.nodes) // 2 + 1

    def live(self):
        return [n for n in self.nodes if n.alive and not n.stopped]

    def healthy(self):
        return all(n.alive and not n.stopped for n in self.nodes)

    def flushall(self):
        for n in self.live():
            n.flushall()

    def values(self, key):
        """GET key on every live node (dead/stopped nodes are skipped)."""
        return [n.get(key) for n in self.live()]

    def terminate(self):
        for n in self.nodes:
            try:
                n.terminate()
            except Exception:
                pass


def shared_cluster(n):
    """A cluster of n nodes reused by the tests of one module (one process).
    cleanup_test() flushes it between tests; if a test damaged it (killed or
    stopped a node), it is replaced."""
    with _lock:
        c = _shared.get(n)
        if c is not None and not c.healthy():
            c.terminate()
            c = None
        if c is None:
            c = _shared[n] = Cluster(n)
        return c


# --------------------------------------------------------------------------
# sqlite side
# --------------------------------------------------------------------------

def nodes_env_of(nodes):
    """Turn a Cluster / RedisNode / list of nodes or urls / str into the
    REDLOCK_NODES string; None stays None (variable unset)."""
    if nodes is None or isinstance(nodes, str):
        return nodes
    if isinstance(nodes, Cluster):
        return nodes.nodes_env()
    if isinstance(nodes, RedisNode):
        return nodes.auth_url
    return ",".join(x.auth_url if isinstance(x, RedisNode) else str(x) for x in nodes)


def build_c(source, out, args=()):
    """Compiles the C text source (written to out + ".c") into out with the
    system's cc and args (flags, libraries); returns out. The compiler runs
    without the sanitizer run's preload: it is not built for it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    check(cc, "no C compiler")
    with open(out + ".c", "w") as f:
        f.write(source)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    subprocess.run([cc, "-o", out, out + ".c"] + list(args), check=True, capture_output=True, env=env, timeout=60)
    return out


def require_extension():
    if not os.path.exists(EXT_SO):
        raise AssertionError("%s is not built (run make)" % EXT_SO)


# Settings applied to every connection, worker and shell this process makes
# (see default_config()); empty unless a test module asks.
_default_config = {}

# A per-node timeout for tests that are not about timeouts: the documented
# default (50 ms) is tight on a loaded test machine, where a node that is
# merely slow would fail a test about something else.
RELAXED_TIMEOUT_MS = int(os.environ.get("REDLOCK_TEST_NODE_TIMEOUT_MS", "500"))


def default_config(**config):
    """Apply these redlock_config settings to every connect(), SqlProc and
    shell of this process (i.e. of the calling test module: each module runs
    in its own process), unless a call overrides them or passes
    defaults=True. E.g. default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)."""
    _default_config.clear()
    _default_config.update(config)


def _test_config(config, defaults):
    if defaults:
        return dict(config)
    return dict(_default_config, **config)


def connect(nodes, database=":memory:", defaults=False, python_default=False, **config):
    """A /usr/bin/python3 sqlite3 connection (autocommit, usable from other
    threads) with the extension loaded. REDLOCK_NODES is set from `nodes`
    (None: unset, so the extension uses its default) while loading; each
    keyword is applied with SELECT redlock_config(name, value), after those
    of default_config() unless defaults=True. python_default: the module's
    own default mode instead of autocommit (it opens a transaction before
    each INSERT, UPDATE and DELETE, until commit() or rollback())."""
    require_extension()
    config = _test_config(config, defaults)
    mode = {} if python_default else {"isolation_level": None}
    con = sqlite3.connect(database, check_same_thread=False, timeout=10, **mode)
    con.enable_load_extension(True)
    env = nodes_env_of(nodes)
    with _env_lock:
        old = os.environ.get("REDLOCK_NODES")
        try:
            if env is None:
                os.environ.pop("REDLOCK_NODES", None)
            else:
                os.environ["REDLOCK_NODES"] = env
            con.load_extension(EXT)
        finally:
            if old is None:
                os.environ.pop("REDLOCK_NODES", None)
            else:
                os.environ["REDLOCK_NODES"] = old
    con.enable_load_extension(False)
    for k, v in config.items():
        con.execute("SELECT redlock_config(?, ?)", (k, v))
    with _lock:
        _connections.append(con)
    return con


def value(con, sql, *params):
    """First column of the first row (None if no row)."""
    row = con.execute(sql, params).fetchone()
    return None if row is None else row[0]


def rows(con, sql, *params):
    return con.execute(sql, params).fetchall()


def node_rows(con):
    """redlock_nodes as a list of dicts, ordered by id."""
    cur = con.execute("SELECT * FROM redlock_nodes ORDER BY id")
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _sql_literal(v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return repr(v)
    return "'%s'" % str(v).replace("'", "''")


def _shell_env(nodes):
    env = dict(os.environ)
    e = nodes_env_of(nodes)
    if e is None:
        env.pop("REDLOCK_NODES", None)
    else:
        env["REDLOCK_NODES"] = e
    return env


def _shell_argv(db, args):
    return [SQLITE3] + list(args) + [db]


def shell(sql, nodes_env=None, args=(), timeout=30, db=":memory:", cwd=None, load=EXT,
          defaults=False):
    """Run the real sqlite3 shell on `db`; its stdin is `.load <load>` (by
    default <repo>/redlock), then (unless defaults=True) the settings of
    default_config() applied silently, then `sql`.
    Returns (returncode, stdout, stderr)."""
    return ShellProc(sql, nodes_env, args, db, cwd, load, defaults).wait(timeout)


class ShellProc:
    """A sqlite3 shell running in the background (see shell()); its input
    is fed at once."""

    def __init__(self, sql, nodes_env=None, args=(), db=":memory:", cwd=None,
                 load=EXT, defaults=False):
        require_extension()
        self.proc = subprocess.Popen(_shell_argv(db, args), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=_shell_env(nodes_env), text=True, cwd=cwd)
        _track(self, _live_procs)
        stdin, self.proc.stdin = self.proc.stdin, None
        data = ".load %s\n" % load
        cfg = _test_config({}, defaults)
        if cfg:
            data += ".output /dev/null\n"
            for k, v in cfg.items():
                data += "SELECT redlock_config(%s, %s);\n" % (_sql_literal(k), _sql_literal(v))
            data += ".output\n"
        data += sql + "\n"

        def feed():
            try:
                stdin.write(data)
                stdin.close()
            except OSError:
                pass
        self._feeder = threading.Thread(target=feed, daemon=True)
        self._feeder.start()

    def start(self):
        """(already started; kept for readability in tests)"""
        return self

    def running(self):
        return self.proc.poll() is None

    def wait(self, timeout=30):
        """Returns (returncode, stdout, stderr)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("sqlite3 shell did not finish within %ss" % timeout)
        _untrack(self, _live_procs)
        return self.proc.returncode, out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.communicate(timeout=5)
        except Exception:
            pass
        _untrack(self, _live_procs)


class SqlProc:
    """A connection with the extension loaded, in another process: a second
    client machine. execute() returns rows; errors are raised as
    sqlite3.OperationalError with the extension's message."""

    def __init__(self, nodes, defaults=False, wrap=(), **config):
        require_extension()
        config = _test_config(config, defaults)
        env = _shell_env(nodes)
        # wrap: an argv prefix, e.g. `ip netns exec NS` (netns.py)
        self.proc = subprocess.Popen(list(wrap) + [PYTHON, os.path.abspath(__file__), "--worker",
                                                   json.dumps(config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, bufsize=1)
        _track(self, _live_procs)
        hello = self._read(30)
        if hello.get("error"):
            self.kill()
            raise sqlite3.OperationalError(hello["error"])

    def _read(self, timeout):
        import select
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            self.kill()
            raise AssertionError("worker process did not answer within %ss" % timeout)
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError("worker process died (rc=%s)" % self.proc.poll())
        return json.loads(line)

    def execute(self, sql, *params, timeout=30):
        self.proc.stdin.write(json.dumps({"sql": sql, "params": list(params)}) + "\n")
        self.proc.stdin.flush()
        resp = self._read(timeout)
        if "error" in resp:
            raise sqlite3.OperationalError(resp["error"])
        return [tuple(r) for r in resp["rows"]]

    def value(self, sql, *params, timeout=30):
        rs = self.execute(sql, *params, timeout=timeout)
        return rs[0][0] if rs else None

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except Exception:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:
                pass
        _untrack(self, _live_procs)

    close = kill


def _worker_main(config_json):
    try:
        con = connect(os.environ.get("REDLOCK_NODES"), defaults=True, **json.loads(config_json))
    except Exception as e:
        print(json.dumps({"error": str(e)}), flush=True)
        return
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        try:
            rs = con.execute(req["sql"], req["params"]).fetchall()
            out = [[x.hex() if isinstance(x, bytes) else x for x in r] for r in rs]
            print(json.dumps({"rows": out}), flush=True)
        except Exception as e:
            print(json.dumps({"error": str(e)}), flush=True)


# --------------------------------------------------------------------------
# assertions
# --------------------------------------------------------------------------

def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def eq(actual, expected, what):
    if actual != expected:
        raise AssertionError("%s: expected %r, got %r" % (what, expected, actual))


def is_token(tok, what="token"):
    if not (isinstance(tok, str) and TOKEN_RE.match(tok)):
        raise AssertionError("%s: expected 60 hex characters, got %r" % (what, tok))
    return tok


def raises(fn, what):
    """fn() must raise sqlite3.Error; returns the message."""
    try:
        r = fn()
    except sqlite3.Error as e:
        return str(e)
    raise AssertionError("%s: expected an error, got result %r" % (what, r))


def sql_error(con, sql, *params, what=None):
    """Running sql on con (connection or SqlProc) must raise; returns the message."""
    what = what or "%s %r" % (sql, params)

    def run():
        if isinstance(con, SqlProc):
            return con.execute(sql, *params)
        return con.execute(sql, params).fetchall()
    return raises(run, what)


def redlock_error(con, sql, *params, what=None, contains=()):
    """Running sql must raise an error whose text starts with 'redlock: '
    (and contains every string in `contains`). Returns the message."""
    what = what or "%s %r" % (sql, params)
    msg = sql_error(con, sql, *params, what=what)
    if not msg.startswith("redlock: "):
        raise AssertionError("%s: error should start with 'redlock: ', got %r" % (what, msg))
    for c in contains:
        if c not in msg:
            raise AssertionError("%s: error should mention %r, got %r" % (what, c, msg))
    return msg


def settle(*cons):
    """Make each connection (or SqlProc) finish what it still owes the nodes.

    A lock call returns as soon as its outcome is decided (e.g. once a quorum
    said yes); the commands to the remaining nodes are still in flight.
    Reading redlock_nodes shows what the last call saw of *each* node, so it
    waits for those replies: after settle(), Redis shows everything the
    calls did."""
    for con in cons:
        if isinstance(con, SqlProc):
            con.value("SELECT count(*) FROM redlock_nodes")
        else:
            con.execute("SELECT count(*) FROM redlock_nodes").fetchall()


# settle() from inside a sqlite3 shell script, before lines that read every
# node (probe): reading redlock_nodes waits for the replies the shell's
# connection still owes; its output is dropped.
SHELL_SETTLE = ".output /dev/null\nSELECT count(*) FROM redlock_nodes;\n.output\n"


def _live(nodes):
    return [n for n in nodes if n.alive and not n.stopped]


def no_key(cluster_or_nodes, key, what="", settle_cons=(), timeout=5.0):
    """The key is absent from every live node. Connections in settle_cons
    are settled first, so that nothing they sent can still arrive; then the
    condition is polled for up to `timeout` seconds (commands from processes
    that exited may still be on the wire)."""
    settle(*settle_cons)
    nodes = _live(cluster_or_nodes)

    def gone():
        return not any(n.cmd("EXISTS", key) for n in nodes)
    if gone():
        return
    try:
        wait_until(gone, timeout, what="key %r to go" % key)
    except AssertionError:
        for n in nodes:
            if n.cmd("EXISTS", key):
                raise AssertionError("%s: key %r still exists on %s (value %r, pttl %r)"
                                     % (what or "no key", key, n.addr, n.get(key), n.pttl(key)))


def _holds_on(n, key, token, ttl_ms):
    v = n.get(key)
    if v != token:
        return "%s GET %r = %r, expected token %r" % (n.addr, key, v, token)
    p = n.pttl(key)
    if not (0 < p <= ttl_ms):
        return "%s PTTL %r = %r, expected 0 < pttl <= %d" % (n.addr, key, p, ttl_ms)
    return None


def holds(nodes, key, token, ttl_ms, what="", settle_cons=(), timeout=5.0, at_least=None):
    """key == token with 0 < PTTL <= ttl_ms on every given node (or on at
    least `at_least` of them). Settles settle_cons first, then polls for up
    to `timeout` seconds."""
    settle(*settle_cons)
    nodes = list(nodes)
    need = len(nodes) if at_least is None else at_least
    problems = []

    def ok():
        problems[:] = [p for p in (_holds_on(n, key, token, ttl_ms) for n in nodes) if p]
        return len(nodes) - len(problems) >= need
    if ok():
        return
    try:
        wait_until(ok, timeout, what="key %r" % key)
    except AssertionError:
        raise AssertionError("%s: %d of %d nodes hold the token, %d needed: %s"
                             % (what or "holds", len(nodes) - len(problems), len(nodes),
                                need, "; ".join(problems)))


def register(globs, name, fn, *args):
    """Make globs[name] a test calling fn(*args) (parametrisation)."""
    def t():
        return fn(*args)
    t.__name__ = name
    t.__qualname__ = name
    globs[name] = t
    return t


def for_nodes(globs, fn, counts=(1, 3, 5)):
    """Register test_<fn name without leading _>_<n>n for each node count."""
    base = fn.__name__.lstrip("_")
    for n in counts:
        register(globs, "test_%s_%dn" % (base, n), fn, n)


# --------------------------------------------------------------------------
# cleanup
# --------------------------------------------------------------------------

def cleanup_test():
    """Between tests: close connections, stop workers and shells, terminate
    every node that is not part of a shared cluster, flush shared clusters."""
    with _lock:
        cons = list(_connections)
        _connections.clear()
        procs = list(_live_procs)
        shared_nodes = {id(n) for c in _shared.values() for n in c.nodes}
        nodes = [n for n in _live_nodes if id(n) not in shared_nodes]
    _each_quietly(cons, "close")
    _each_quietly(procs, "kill")
    _each_quietly(nodes, "terminate")
    for k, c in list(_shared.items()):
        try:
            for n in c.nodes:
                if n.stopped:
                    n.cont()
            if not c.healthy():
                raise RuntimeError("damaged")
            # Commands the test's clients sent may still sit in a node's input
            # (e.g. a SET that timed out on a loaded machine). Redis runs a
            # closed client's pending commands before it drops the client, so
            # once we are the only client left, nothing more can arrive.
            for n in c.nodes:
                wait_until(lambda: n.cmd("CLIENT", "LIST").count("\n") <= 1, 5,
                           what="the clients of %s to go" % n.addr)
            c.flushall()
        except Exception:
            c.terminate()
            with _lock:
                _shared.pop(k, None)


def terminate_all():
    with _lock:
        _shared.clear()
        nodes = list(_live_nodes)
        procs = list(_live_procs)
    _each_quietly(procs, "kill")
    _each_quietly(nodes, "terminate")


def _each_quietly(objs, method):
    """Calls obj.method() on each; cleanup goes on past any failure."""
    for o in objs:
        try:
            getattr(o, method)()
        except Exception:
            pass


atexit.register(terminate_all)


def _on_term(signum, frame):
    terminate_all()
    os._exit(128 + signum)


if threading.current_thread() is threading.main_thread():
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, _on_term)
    except (ValueError, OSError):
        pass


# --------------------------------------------------------------------------
# TLS: certificates made with openssl at test time, TLS redis-server nodes
# --------------------------------------------------------------------------

OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"

_CA_CNF = """[ca]
default_ca = dflt
[dflt]
database = {d}/index.txt
new_certs_dir = {d}
serial = {d}/serial
default_md = sha256
policy = any
copy_extensions = copy
unique_subject = no
[any]
commonName = supplied
"""


class TlsCerts:
    """A CA and the certificates the TLS tests need, in a temp dir, made by
    the openssl command (EC keys: fast). Attributes are file paths:
    ca / ca_key; server / server_key (SAN IP 127.0.0.1, DNS localhost);
    wrong / wrong_key (SAN DNS wrong.example only); expired / expired_key
    (valid 2020-01-01 to 2020-01-02 only); client / client_key (client
    auth); other_ca (a CA that signed none of them)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="redlock-test-tls-")
        d = self.dir
        self.ca, self.ca_key = self._self_signed("ca", "redlock test CA")
        self.other_ca, _ = self._self_signed("other-ca", "another CA")
        open(os.path.join(d, "index.txt"), "w").close()
        with open(os.path.join(d, "serial"), "w") as f:
            f.write("1000\n")
        with open(os.path.join(d, "ca.cnf"), "w") as f:
            f.write(_CA_CNF.format(d=d))
        san = "subjectAltName=IP:127.0.0.1,DNS:localhost"
        self.server, self.server_key = self._issue("server", "localhost", san, "serverAuth")
        self.wrong, self.wrong_key = self._issue("wrong", "wrong.example", "subjectAltName=DNS:wrong.example",
                                                 "serverAuth")
        self.expired, self.expired_key = self._issue("expired", "localhost", san, "serverAuth",
                                                     dates=("20200101000000Z", "20200102000000Z"))
        self.client, self.client_key = self._issue("client", "redlock client", None, "clientAuth")

    def _run(self, *args):
        r = subprocess.run([OPENSSL] + list(args), capture_output=True, text=True, cwd=self.dir)
        if r.returncode != 0:
            raise RuntimeError("openssl %s failed: %s" % (args[0], r.stderr.strip()))

    def _path(self, name):
        return os.path.join(self.dir, name)

    def _self_signed(self, name, cn):
        crt, key = self._path(name + ".pem"), self._path(name + ".key")
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key, "-out", crt, "-days", "30", "-subj", "/CN=" + cn,
                  "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        return crt, key

    def _issue(self, name, cn, san, usage, dates=None):
        crt, key, csr, ext = (self._path(name + x) for x in (".pem", ".key", ".csr", ".ext"))
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", key, "-out", csr, "-subj", "/CN=" + cn)
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=%s\n" % usage)
            if san:
                f.write(san + "\n")
        # `openssl ca` takes explicit start and end dates (x509 -days cannot
        # make a certificate that has already expired).
        start, end = dates or ("20200101000000Z", "20991231000000Z")
        self._run("ca", "-batch", "-config", self._path("ca.cnf"), "-cert", self.ca, "-keyfile", self.ca_key,
                  "-in", csr, "-out", crt, "-notext", "-startdate", start, "-enddate", end, "-extfile", ext)
        return crt, key

    def client_context(self):
        """An ssl.SSLContext trusting the CA, with the client certificate."""
        import ssl
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.load_cert_chain(self.client, self.client_key)
        return ctx


_tls_certs = None


# --------------------------------------------------------------------------
# Node.js with better-sqlite3 (which bundles a recent SQLite of its own)
# --------------------------------------------------------------------------

NODE_DIR = os.path.join(HERE, "node")
_node = []


def node_setup():
    """(node, None) when node and better-sqlite3 are there, else (None, why),
    for a test to skip with. Installs better-sqlite3 with npm into
    sql-tests/node/node_modules the first time (about a minute: it compiles);
    call it at import, outside the per-test time limit."""
    if _node:
        return _node[0]
    node, npm = shutil.which("node"), shutil.which("npm")
    result = node, None
    if not node or not npm:
        result = None, "node or npm is not installed"
    else:
        # Modules run side by side (run.py -j): one installs while the other
        # waits, so none sees a half-installed package.
        import fcntl
        with open(os.path.join(NODE_DIR, ".install.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # The compiled addon, not the package's directory: an install
            # that was killed while compiling leaves the directory behind.
            pkg = os.path.join(NODE_DIR, "node_modules", "better-sqlite3")
            if not os.path.isfile(os.path.join(pkg, "build", "Release", "better_sqlite3.node")):
                shutil.rmtree(pkg, ignore_errors=True)
                try:
                    r = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=NODE_DIR,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
                    if r.returncode != 0:
                        result = None, "npm install better-sqlite3 failed: %s" % r.stdout.strip()[-300:]
                except subprocess.TimeoutExpired:
                    result = None, "npm install better-sqlite3 took more than 600 s"
    _node.append(result)
    return result


def node_env(nodes):
    """The environment for a node script: REDLOCK_NODES from nodes; under
    the sanitizers, no leak check (node itself is not built for it)."""
    env = _shell_env(nodes)
    if env.get("ASAN_OPTIONS"):
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    return env


def tls_certs():
    """One TlsCerts per process (per test module), removed at exit."""
    global _tls_certs
    with _lock:
        if _tls_certs is None:
            _tls_certs = TlsCerts()
            atexit.register(shutil.rmtree, _tls_certs.dir, True)
        return _tls_certs


class TlsRedisNode(RedisNode):
    """A redis-server that serves only TLS (--port 0 --tls-port P), with the
    certificate pair `cert` ("server", "wrong", "expired": attributes of
    TlsCerts) and, with auth_clients, client certificates required. url
    and auth_url are rediss:// with ?tls_ca_file= the test CA."""

    def __init__(self, certs=None, cert="server", auth_clients=False, **kw):
        self.certs = certs or tls_certs()
        self.cert = cert
        self.auth_clients = auth_clients
        super().__init__(**kw)

    def _argv(self, port):
        argv = super()._argv(port)
        i = argv.index("--port")
        argv[i + 1] = "0"
        return argv + ["--tls-port", str(port),
                       "--tls-cert-file", getattr(self.certs, self.cert),
                       "--tls-key-file", getattr(self.certs, self.cert + "_key"),
                       "--tls-ca-cert-file", self.certs.ca,
                       "--tls-auth-clients", "yes" if self.auth_clients else "no"]

    def _resp(self, **kw):
        import ssl
        ctx = self.certs.client_context()
        ctx.check_hostname = False            # the harness itself talks to wrong/expired servers too
        ctx.verify_mode = ssl.CERT_NONE
        return Resp(self.host, self.port, tls=ctx, **kw)

    @property
    def url(self):
        return "rediss://%s:%d?tls_ca_file=%s" % (self.host, self.port, self.certs.ca)

    @property
    def auth_url(self):
        if self.password is None:
            return self.url
        return "rediss://%s:%s@%s:%d?tls_ca_file=%s" % (self.username or "", self.password, self.host,
                                                        self.port, self.certs.ca)

    def cli(self, *args, timeout=10):
        raise NotImplementedError("redis-cli over TLS: use cmd()")


class TlsCluster(Cluster):
    """n TLS redis-server nodes (keywords as for TlsRedisNode)."""
    node_class = TlsRedisNode


def shared_tls_cluster(n):
    """Like shared_cluster(n), with TLS nodes."""
    with _lock:
        c = _shared.get(("tls", n))
        if c is not None and not c.healthy():
            c.terminate()
            c = None
        if c is None:
            c = _shared[("tls", n)] = TlsCluster(n)
        return c


# --------------------------------------------------------------------------
# self test: /usr/bin/python3 sql-tests/harness.py --selftest
# --------------------------------------------------------------------------

# --------------------------------------------------------------------------
# helpers shared by the session, auto-extension and fencing tests
# --------------------------------------------------------------------------

def note(msg):
    """Evidence for the reader: printed to the test's stdout (shown when the
    module is run directly; run.py keeps it in the module's log)."""
    print("NOTE " + msg, flush=True)


def lock_rows(con):
    cur = con.execute("SELECT * FROM redlock_locks ORDER BY resource")
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def lock_row(con, res):
    found = [r for r in lock_rows(con) if r["resource"] == res]
    return found[0] if found else None


def redis_writes(nodes):
    """SET and EVAL commands the live nodes have executed so far."""
    return sum(n.calls("eval") + n.calls("set") for n in nodes if n.alive and not n.stopped)


def timeout_env(nodes, timeout_ms=250):
    """REDLOCK_NODES for a cluster with a per-node timeout of timeout_ms
    (?timeout_ms=): the machines running the suite can be busy, and these
    tests are not about slow nodes (those that are pass the cluster itself)."""
    if isinstance(nodes, str):
        return nodes
    return ",".join("%s?timeout_ms=%d" % (n.url, timeout_ms) for n in nodes)


def sh(sql, nodes, what, **kw):
    """Run sql in the sqlite3 shell (NULL printed as NULL); it must exit 0
    with nothing on stderr. Returns stdout's lines."""
    rc, out, err = shell(".nullvalue NULL\n" + sql, timeout_env(nodes), **kw)
    eq((rc, err), (0, ""), "%s: shell exit status and stderr (stdout %r)" % (what, out))
    out = out.strip("\n")
    return out.split("\n") if out else []


def probe(nodes, path, *cmd):
    """Shell lines that run redis-cli CMD against every node from inside a
    sqlite3 script, appending the answers (one line per node) to path."""
    return "\n".join(".system %s -p %d %s >> %s" % (REDIS_CLI, n.port, " ".join(cmd), path)
                     for n in nodes) + "\n"


def probed(path):
    with open(path) as f:
        return [l.strip() for l in f.read().splitlines()]


def spin_until(cond, limit=40000000):
    """A single SQL statement that spins until cond (an SQL expression over
    redlock_* calls) is true, at most `limit` rows (~10 s): polling from inside
    the shell. cond is evaluated for every row; a subquery in it must refer to
    the row counter i (e.g. `... FROM redlock_locks WHERE i >= 0`), or SQLite
    evaluates it only once."""
    return ("WITH RECURSIVE w(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM w "
            "WHERE NOT (%s) AND i < %d) SELECT 'spun', max(i) < %d FROM w;" % (cond, limit, limit))


def run_directly(globs):
    """python3 test_x.py: run this module's tests here, with their notes."""
    passed = failed = 0
    for name, fn in list(globs.items()):
        if not (name.startswith("test_") and callable(fn)):
            continue
        if len(sys.argv) > 1 and not any(a in name for a in sys.argv[1:]):
            continue
        t0 = time.monotonic()
        try:
            fn()
            print("PASS %s (%.2fs)" % (name, time.monotonic() - t0), flush=True)
            passed += 1
        except Exception as e:
            print("FAIL %s: %s" % (name, e), flush=True)
            failed += 1
        finally:
            cleanup_test()
    terminate_all()
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def _selftest():
    t0 = time.monotonic()
    with Cluster(3) as c:
        ports = [n.port for n in c]
        assert len(set(ports)) == 3, ports
        assert c.nodes_env() == ",".join("redis://127.0.0.1:%d" % p for p in ports)
        n = c[0]
        assert n.cmd("PING") == "PONG"
        assert n.cmd("SET", "k", "v", "PX", 5000) == "OK"
        assert n.cmd("GET", "k") == "v"
        assert 0 < n.cmd("PTTL", "k") <= 5000
        assert n.cmd("GET", "nope") is None
        assert n.cmd("SET", "k", "w", "NX") is None
        assert n.cmd("KEYS", "*") == ["k"]
        assert n.cmd("SET", "bin", b"\x00\xff") == "OK"
        assert n.cmd("GET", "bin", raw=True) == b"\x00\xff"
        try:
            n.cmd("NOSUCHCOMMAND")
            raise AssertionError("no error")
        except RedisError as e:
            assert "unknown command" in str(e).lower(), e
        assert n.cli("GET", "k") == "v"
        assert n.calls("set") >= 2
        n.kill9()
        assert not n.alive
        try:
            Resp(n.host, n.port, timeout=1).cmd("PING")
            raise AssertionError("dead node answered")
        except OSError:
            pass
        n.restart()
        assert n.alive and n.port == ports[0] and n.cmd("DBSIZE") == 0
        m = c[1]
        m.stop()
        try:
            Resp(m.host, m.port, timeout=0.2).cmd("PING")
            raise AssertionError("stopped node answered")
        except OSError:
            pass
        m.cont()
        assert m.cmd("PING") == "PONG"
        pids = [x.pid for x in c]
    for pid in pids:
        assert not os.path.exists("/proc/%d" % pid) or \
            open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] == "Z", pid
    pw = RedisNode(password="s3cret")
    try:
        assert pw.cmd("PING") == "PONG"
        try:
            Resp(pw.host, pw.port).cmd("GET", "x")
            raise AssertionError("no NOAUTH")
        except RedisError as e:
            assert "NOAUTH" in str(e), e
        assert pw.auth_url == "redis://:s3cret@127.0.0.1:%d" % pw.port
    finally:
        pw.terminate()
    print("harness selftest ok in %.2fs" % (time.monotonic() - t0))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        _worker_main(sys.argv[2] if len(sys.argv) > 2 else "{}")
    elif len(sys.argv) >= 2 and sys.argv[1] == "--selftest":
        _selftest()
    else:
        print(__doc__)


# Measured figures (fault timings, checker runs) go to stdout and, when
# REDLOCK_FAULT_REPORT names a file, are appended there too: the runner
# hides a passing test's output.
def report(line):
    print(line, flush=True)
    path = os.environ.get("REDLOCK_FAULT_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def attempt(con, sql, *params):
    """The value of sql, or the exception it raised (an error is an answer
    for a test that asks whether a call got a lock)."""
    try:
        return value(con, sql, *params)
    except Exception as e:
        return e


def check_not_starved_by_shared(nodes, name, take, give_back, what):
    """Three shared workers hold `name` in overlapping turns, so one always
    holds it. take(con), a waiting acquire that excludes shared holders, must
    still get in (a token: `what`), and while it holds no shared holder is
    in; give_back(con) then releases what it took. nodes is what connect()
    takes."""
    stop = threading.Event()
    errors, violations = [], []
    lock = threading.Lock()
    in_shared, holder = [0], [False]

    def worker():
        con = connect(nodes, retry_delay_ms=20, retry_jitter_ms=10)
        try:
            while not stop.is_set():
                if not value(con, "SELECT redlock_acquire_shared(?, 5000, 200)", name):
                    continue
                with lock:
                    in_shared[0] += 1
                    if holder[0]:
                        violations.append("shared holder in beside %s" % what)
                time.sleep(0.15)
                with lock:
                    in_shared[0] -= 1
                value(con, "SELECT redlock_release(?)", name)
        except Exception as e:   # reported below
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    try:
        wait_until(lambda: in_shared[0] > 0, timeout=10, what="shared workers running")
        x = connect(nodes, retry_delay_ms=50, retry_jitter_ms=20)
        is_token(take(x), "%s gets in among a stream of shared holders" % what)
        with lock:
            holder[0] = True
            eq(in_shared[0], 0, "shared holders while %s holds" % what)
        time.sleep(0.1)
        with lock:
            holder[0] = False
        give_back(x)
    finally:
        stop.set()
        for t in ts:
            t.join(30)
    eq(errors, [], "worker errors")
    eq(violations, [], "violations")
