"""Real network partitions for the tests: redis-server nodes and client
processes in network namespaces of their own, joined by veth links that a
test takes down and up.

    import netns
    with netns.Net(nodes=3, clients=2) as net:     # unittest.SkipTest without root
        a = net.sql_proc(0, auto_extend=1)         # a connection in client 0's namespace
        net.cut(0, 1)                              # client 0 no longer reaches node 1
        ...
        net.heal(0, 1)
        net.nodes[1].pttl("L")                     # the test reads a node directly

The layout. Each node j lives in namespace <prefix>-n<j> and each client i in
<prefix>-c<i>. Every (client i, node j) pair has its own veth pair: device
n<j> in the client's namespace (10.<i+1>.<j+1>.1/24) and device c<i> in the
node's (10.<i+1>.<j+1>.2/24), with static neighbour entries (no ARP). So
different clients have different links to the same node, and the URL of a
node depends on the client (Client.urls). Nothing is added to the host's
namespace: the veths are made inside ours, and the addresses exist only
there (traffic never leaves them). The test itself reaches every node
through the node's unix socket (Node.cmd), which no cut touches.

A cut (cut(i, j)) sets the node's end of that pair down: the client's
packets to it vanish (the client's end keeps its route, its carrier is
gone, the veth drops what it sends: no RST, no ICMP, a connect times out),
and the node's replies wait in its TCP send queue. heal(i, j) sets it up
again (and puts back the neighbour entry that going down flushed): what
the kernels kept in their send queues is retransmitted and delivered, as
after a real partition. tc netem and iptables are not needed.

Processes. Client processes run under `ip netns exec` (Net.sql_proc, a
harness.SqlProc there; Net.client_argv for any other program). The
redis-servers get SIGKILL when the process that started them dies
(PR_SET_PDEATHSIG).

Clean-up. Names start with "rlnt-<pid>-<start time>-<serial>" of the
process that made them. Net.close() (also on `with` exit, at exit, and on
SIGTERM) kills its servers and deletes its namespaces, which takes every
veth in them along. A process killed before it could is swept up by the
next one: namespaces whose owner (pid and start time) is gone have their
processes killed (by the pids `ip netns pids` lists) and are deleted, at
import and at each Net().

It needs root and `ip netns` (iproute2); without either, every user gets
unittest.SkipTest with the reason (skip_reason()).
"""
# SPDX-License-Identifier: BSD-3-Clause

import atexit
import ctypes
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import harness as h

PREFIX = "rlnt-"
REDIS_PORT = 6379            # the same in every node's namespace: they are separate
IP = shutil.which("ip", path="/usr/sbin:/sbin:/usr/bin:/bin") or "ip"
SS = shutil.which("ss", path="/usr/sbin:/sbin:/usr/bin:/bin") or "ss"
NETNS_DIR = "/run/netns"
RTO_MIN_MS = 10              # each link's minimum TCP retransmission timeout (Net._route_line)
PR_SET_PDEATHSIG = 1

_serial = itertools.count()
_live = set()                # Nets not yet closed
_live_lock = threading.Lock()
_reason = []                 # cached skip reason ("" when usable)


# The environment of the tools and servers started here: without a
# sanitizer run's preload, which they are not built for (LeakSanitizer
# fails `ip` at its exit on leaks of its own).
_PLAIN_ENV = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS",
                                                                "LSAN_OPTIONS")}


def _ip(*args, check=True, input=None, ns=None):
    argv = [IP] + (["-n", ns] if ns else []) + list(args)
    r = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=30, env=_PLAIN_ENV)
    if check and r.returncode != 0:
        raise RuntimeError("netns: %s failed: %s" % (" ".join(argv), (r.stderr or r.stdout).strip()))
    return r


def _batch(lines, ns=None):
    """Runs `ip [-n ns] -batch -` with these lines: one process for many changes."""
    if lines:
        _ip("-batch", "-", input="\n".join(lines) + "\n", ns=ns)


def skip_reason():
    """Why real partitions cannot be made here, or "" when they can."""
    if not _reason:
        why = ""
        if os.geteuid() != 0:
            why = "needs root (network namespaces and veth links): run as root, as .ci/run does"
        elif not os.path.exists(IP):
            why = "needs iproute2's ip command (ip netns), not found"
        else:
            probe = "%s%d-%d-probe" % (PREFIX, os.getpid(), _start_time(os.getpid()))
            r = _ip("netns", "add", probe, check=False)
            if r.returncode != 0:
                why = "ip netns add does not work here: %s" % (r.stderr.strip()[:200] or "?")
            else:
                _ip("netns", "del", probe, check=False)
        _reason.append(why)
    return _reason[0]


def require():
    why = skip_reason()
    if why:
        raise unittest.SkipTest(why)


def _start_time(pid):
    """A process's start time (clock ticks since boot), 0 when it is gone
    or a zombie (killed, not yet reaped): with the pid it names a process
    even after pids wrap around."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return 0 if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return 0


def _owner_alive(name):
    try:
        pid, start = name[len(PREFIX):].split("-")[:2]
        return _start_time(int(pid)) == int(start) != 0
    except ValueError:
        return False


def _our_namespaces():
    try:
        return sorted(x for x in os.listdir(NETNS_DIR) if x.startswith(PREFIX))
    except OSError:
        return []


def _pids_inside(ns):
    r = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in r.stdout.split() if p.isdigit()]


def _delete(names, timeout=10.0):
    """Kills the processes in these namespaces of ours (by the pids `ip
    netns pids` lists), waits for them to be gone (a process started by
    `ip netns exec` keeps the name's mount busy, and the delete fails), and
    deletes the namespaces: their veths go with them."""
    names = [ns for ns in names if os.path.exists(os.path.join(NETNS_DIR, ns))]
    deadline = time.monotonic() + timeout
    while names:
        left = {ns: _pids_inside(ns) for ns in names}
        for pids in left.values():
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        empty = [ns for ns, pids in left.items() if not pids]
        try:
            _batch(["netns del %s" % ns for ns in empty])
        except RuntimeError:
            for ns in empty:
                _ip("netns", "del", ns, check=False)
        names = [ns for ns in names if os.path.exists(os.path.join(NETNS_DIR, ns))]
        if not names or time.monotonic() > deadline:
            return names
        time.sleep(0.02)
    return names


def sweep():
    """Deletes the namespaces of earlier runs whose owner is gone (killed
    before it could clean up), with the processes left in them."""
    if os.geteuid() != 0:
        return 0
    stale = [ns for ns in _our_namespaces() if not _owner_alive(ns)]
    _delete(stale)
    return len(stale)


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class _UnixResp(h.Resp):
    """harness.Resp over a unix socket: the test's way to a node."""

    def __init__(self, path, timeout=5.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""


def client_addr(i, j):
    return "10.%d.%d.1" % (i + 1, j + 1)


def node_addr(i, j):
    return "10.%d.%d.2" % (i + 1, j + 1)


def _mac(i, j, side):
    return "02:72:6c:%02x:%02x:%02x" % (i + 1, j + 1, side)


class Node:
    """redis-server in its own namespace, listening on REDIS_PORT at the
    node end of every client's link, and on a unix socket for the test."""

    def __init__(self, net, j):
        self.net, self.index, self.ns = net, j, "%s-n%d" % (net.name, j)
        self.dir = os.path.join(net.dir, "n%d" % j)
        os.mkdir(self.dir)
        self.sock = os.path.join(self.dir, "redis.sock")
        self.proc = None
        self._client = None

    def start(self):
        argv = [IP, "netns", "exec", self.ns, h.REDIS_SERVER, "--port", str(REDIS_PORT),
                "--bind", "0.0.0.0", "--protected-mode", "no", "--unixsocket", self.sock,
                "--unixsocketperm", "700", "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--dir", self.dir, "--logfile", os.path.join(self.dir, "log")]
        argv += list(self.net.redis_args)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd=self.dir, env=_PLAIN_ENV,
                                     preexec_fn=_die_with_parent)

    def wait_ready(self, timeout=10.0):
        def up():
            if self.proc.poll() is not None:
                raise RuntimeError("netns: redis-server in %s exited: %s" % (self.ns, self.log_tail()))
            try:
                return self.cmd("PING") == "PONG"
            except OSError:
                self._drop_client()
                return False
        h.wait_until(up, timeout, what="redis-server in %s" % self.ns)

    def log_tail(self, n=1000):
        try:
            with open(os.path.join(self.dir, "log")) as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def _drop_client(self):
        if self._client is not None:
            self._client.close()
            self._client = None

    def cmd(self, *args):
        """A command from the test, over the unix socket (never cut)."""
        if self._client is None:
            self._client = _UnixResp(self.sock)
        try:
            return self._client.cmd(*args)
        except (OSError, ConnectionError):
            self._drop_client()
            raise

    def pttl(self, key):
        return self.cmd("PTTL", key)

    def get(self, key):
        return self.cmd("GET", key)

    def stop(self):
        self._drop_client()
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.kill()
        if p is not None:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


class Client:
    """A client's namespace: device n<j> to each node j."""

    def __init__(self, net, i):
        self.net, self.index, self.ns = net, i, "%s-c%d" % (net.name, i)

    @property
    def urls(self):
        """The nodes as this client reaches them, in node order."""
        return ["redis://%s:%d" % (node_addr(self.index, j), REDIS_PORT) for j in range(len(self.net.nodes))]

    @property
    def wrap(self):
        """The argv prefix that runs a program in this client's namespace."""
        return [IP, "netns", "exec", self.ns]


class Net:
    def __init__(self, nodes=3, clients=2, redis_args=()):
        require()
        sweep()
        if not (1 <= nodes <= 200 and 1 <= clients <= 200):
            raise ValueError("netns: 1..200 nodes and clients")
        self.name = "%s%d-%d-%d" % (PREFIX, os.getpid(), _start_time(os.getpid()), next(_serial))
        self.redis_args = list(redis_args)
        self.dir = tempfile.mkdtemp(prefix="redlock-netns-")
        self.nodes = [Node(self, j) for j in range(nodes)]
        self.clients = [Client(self, i) for i in range(clients)]
        self.down = set()               # (i, j) pairs cut now
        self.cuts = 0                   # how many times a link was taken down
        self._closed = False
        with _live_lock:
            _live.add(self)
        try:
            self._build()
            for n in self.nodes:
                n.start()
            for n in self.nodes:
                n.wait_ready()
        except BaseException:
            self.close()
            raise

    def _build(self):
        _batch(["netns add %s" % x.ns for x in self.nodes + self.clients])
        for c in self.clients:
            i, lines = c.index, ["link set lo up"]
            for n in self.nodes:
                j = n.index
                lines += ["link add n%d address %s type veth peer name c%d address %s netns %s"
                          % (j, _mac(i, j, 1), i, _mac(i, j, 2), n.ns),
                          "addr add %s/24 dev n%d" % (client_addr(i, j), j),
                          "link set n%d up" % j, self._route_line(i, j, "client"),
                          "neigh replace %s lladdr %s dev n%d nud permanent"
                          % (node_addr(i, j), _mac(i, j, 2), j)]
            _batch(lines, ns=c.ns)
        for n in self.nodes:
            j, lines = n.index, ["link set lo up"]
            for c in self.clients:
                i = c.index
                lines += ["addr add %s/24 dev c%d" % (node_addr(i, j), i), "link set c%d up" % i,
                          self._route_line(i, j, "node"), self._neigh_line(i, j)]
            _batch(lines, ns=n.ns)

    @staticmethod
    def _route_line(i, j, side):
        """The link's route with a short minimum retransmission timeout:
        what waited in a send queue through a cut goes out soon after the
        heal (within about the cut's length), not after a 200 ms minimum
        doubled many times. The node's end loses it when cut: heal puts it
        back."""
        dev, src = ("n%d" % j, client_addr(i, j)) if side == "client" else ("c%d" % i, node_addr(i, j))
        return ("route replace 10.%d.%d.0/24 dev %s proto kernel scope link src %s rto_min %dms"
                % (i + 1, j + 1, dev, src, RTO_MIN_MS))

    @staticmethod
    def _neigh_line(i, j):
        return "neigh replace %s lladdr %s dev c%d nud permanent" % (client_addr(i, j), _mac(i, j, 1), i)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- links -----------------------------------------------------------
    def _pairs(self, clients, nodes):
        cs = [clients] if isinstance(clients, int) else list(clients)
        ns = [nodes] if isinstance(nodes, int) else list(nodes)
        return [(i, j) for i in cs for j in ns]

    def cut(self, clients, nodes):
        """Takes the links of these clients (an index or a list) to these
        nodes down: from now on their packets vanish both ways."""
        by_node = {}
        for i, j in self._pairs(clients, nodes):
            if (i, j) not in self.down:
                by_node.setdefault(j, []).append("link set c%d down" % i)
                self.down.add((i, j))
                self.cuts += 1
        for j, lines in by_node.items():
            _batch(lines, ns=self.nodes[j].ns)

    def heal(self, clients=None, nodes=None):
        """Brings these links up again (default: every link that is down)."""
        pairs = sorted(self.down) if clients is None and nodes is None else \
            self._pairs(range(len(self.clients)) if clients is None else clients,
                        range(len(self.nodes)) if nodes is None else nodes)
        by_node = {}
        for i, j in pairs:
            if (i, j) in self.down:
                by_node.setdefault(j, []).extend(["link set c%d up" % i, self._route_line(i, j, "node"),
                                                  self._neigh_line(i, j)])
                self.down.discard((i, j))
        for j, lines in by_node.items():
            _batch(lines, ns=self.nodes[j].ns)

    def is_cut(self, i, j):
        return (i, j) in self.down

    def unsent(self, i, j):
        """Bytes client i's TCP sockets to node j still hold in their send
        queues (not yet acknowledged by the node): 0 once everything it
        sent has arrived."""
        r = subprocess.run([IP, "netns", "exec", self.clients[i].ns, SS, "-tnH", "dst", node_addr(i, j)],
                           capture_output=True, text=True, timeout=30, env=_PLAIN_ENV)
        total = 0
        for line in r.stdout.splitlines():
            f = line.split()
            if len(f) >= 3 and f[2].isdigit():
                total += int(f[2])
        return total

    # -- processes -------------------------------------------------------
    def client_argv(self, i, argv):
        return self.clients[i].wrap + list(argv)

    def nodes_env(self, i):
        return ",".join(self.clients[i].urls)

    def sql_proc(self, i, **config):
        """A connection with the extension loaded, in client i's namespace
        (a harness.SqlProc: execute, value, kill)."""
        return h.SqlProc(self.clients[i].urls, wrap=self.clients[i].wrap, **config)

    # -- clean-up --------------------------------------------------------
    def close(self):
        if self._closed:
            return
        self._closed = True
        for n in self.nodes:
            try:
                n.stop()
            except Exception:
                pass
        _delete([x.ns for x in self.nodes + self.clients])
        shutil.rmtree(self.dir, ignore_errors=True)
        with _live_lock:
            _live.discard(self)


def close_all():
    with _live_lock:
        nets = list(_live)
    for n in nets:
        try:
            n.close()
        except Exception:
            pass


atexit.register(close_all)


def _chain_sigterm():
    """On SIGTERM, close our Nets first, then do what was done before
    (harness's handler ends the process with os._exit, past atexit)."""
    if threading.current_thread() is not threading.main_thread():
        return
    prev = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):
        close_all()
        if callable(prev):
            prev(signum, frame)
        else:
            os._exit(128 + signum)
    try:
        signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):
        pass


_chain_sigterm()
if os.geteuid() == 0:
    try:
        sweep()
    except Exception:
        pass
