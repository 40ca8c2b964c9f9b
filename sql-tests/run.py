#!/usr/bin/python3
"""Runs the redlock SQL tests.

    /usr/bin/python3 sql-tests/run.py [--timeout S] [-j N] [--times[=N]] [-v]
                                      [--from FILE] [FILTER ...]

Discovers sql-tests/test_*.py and runs every function named test_* in it,
each module in its own process group (so that every redis-server, sqlite3
shell and worker a test starts dies with it). -j N (default 2, env
REDLOCK_TEST_JOBS) modules run at a time, each worker's nodes on ports of
its own range (REDLOCK_TEST_PORTS, read by harness.free_port); a module
that sets RUN_ALONE = True runs after the others, by itself. The output
is still printed module by module, in name order. --times: after the run,
the N (15) slowest modules (wall time) and tests. A test
that runs longer than its timeout has its stack dumped and is reported as
failed; the module's remaining tests continue in a fresh process.

FILTER: run only tests whose name "module.test" contains one of the strings;
a FILTER with *, ? or [ is a shell pattern the whole name must match
(test_contract.*_1n); a FILTER that starts with ! leaves out the tests it
matches ('!*_3n'). --from FILE: more filters, one a line (# comments); a
line of FILE (other than a ! line) that selects no test fails the run, so
a renamed test cannot silently drop out of a list (sql-tests/check.txt,
`make check`). Modules that no filter can select are not started.
Prints "PASS name" or "FAIL name: reason" per test, then "N passed, N failed".
A test that cannot run here (say, it needs root) raises unittest.SkipTest and
shows as "SKIP name: reason"; the closing line then adds ", N skipped".
Exit status 1 if anything failed.
"""
# SPDX-License-Identifier: BSD-3-Clause

import faulthandler
import fnmatch
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
DEFAULT_TIMEOUT = 30.0
DEFAULT_JOBS = 2


def _is_pattern(f):
    return any(c in f for c in "*?[")


def matches(f, full):
    """Does filter f (without its !) match the test "module.test"?"""
    return fnmatch.fnmatchcase(full, f) if _is_pattern(f) else f in full


def selected(filters, full):
    """Some filter selects the test (or there is none to select) and no
    ! filter leaves it out."""
    take = [f for f in filters if not f.startswith("!")]
    if take and not any(matches(f, full) for f in take):
        return False
    return not any(matches(f[1:], full) for f in filters if f.startswith("!"))


def may_match(f, modname):
    """Can filter f select a test of module modname? Test names hold no
    dot, so the part of f before its first dot belongs to the module's
    name: the whole of it (a pattern) or its end (a substring)."""
    if f.startswith("!") or "." not in f:
        return True
    head = f.split(".", 1)[0]
    return fnmatch.fnmatchcase(modname, head) if _is_pattern(f) else modname.endswith(head)


def read_filters(path):
    with open(path, encoding="utf-8") as fh:
        lines = (line.split("#", 1)[0].strip() for line in fh)
        return [line for line in lines if line]


# --------------------------------------------------------------------------
# child: runs the tests of one module, reports on a pipe
# --------------------------------------------------------------------------

def _child(module_path, filters, skip, timeout, fd, dumpfile):
    out = os.fdopen(fd, "w", buffering=1)

    def send(**m):
        out.write(json.dumps(m) + "\n")
        out.flush()

    sys.path.insert(0, HERE)
    modname = os.path.splitext(os.path.basename(module_path))[0]
    try:
        import harness
        spec = importlib.util.spec_from_file_location(modname, module_path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[modname] = mod
        spec.loader.exec_module(mod)
    except BaseException:
        send(event="list", tests=[])
        send(event="import_error", error=traceback.format_exc())
        return 1
    tests = []
    for name, obj in list(vars(mod).items()):
        if name.startswith("test_") and callable(obj):
            full = "%s.%s" % (modname, name)
            if not selected(filters, full):
                continue
            if full in skip:
                continue
            tests.append((full, obj))
    send(event="list", tests=[t[0] for t in tests])
    dump = open(dumpfile, "w")
    for full, fn in tests:
        send(event="start", name=full)
        faulthandler.dump_traceback_later(timeout, exit=True, file=dump)
        t0 = time.monotonic()
        err = None
        skipped = None
        try:
            fn()
        except unittest.SkipTest as e:
            skipped = str(e) or "skipped"
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            tb = traceback.format_exc()
            err = "%s: %s\n%s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "",
                                  tb)
        finally:
            try:
                harness.cleanup_test()
            except Exception:
                if err is None:
                    err = "cleanup failed:\n" + traceback.format_exc()
            faulthandler.cancel_dump_traceback_later()
        send(event="end", name=full, ok=err is None, error=err, skipped=skipped,
             seconds=round(time.monotonic() - t0, 3))
    harness.terminate_all()
    return 0


# --------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------

class Results:
    """Counts and output. Each module writes to its own Sink; the sinks are
    printed in module order (the first unfinished one as it goes, the rest
    when their turn comes), so parallel modules never interleave."""

    def __init__(self, verbose):
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.verbose = verbose
        self.tests = []              # (seconds, name) of every test that ended
        self.modules = []            # (seconds, name) of every module
        self.names = set()           # every test a module listed to run
        self._lock = threading.Lock()
        self._sinks = []
        self._head = 0               # index of the first sink not yet complete

    def listed(self, names):
        with self._lock:
            self.names.update(names)

    def sink(self):
        with self._lock:
            s = Sink(self)
            self._sinks.append(s)
            return s

    def _flush(self):
        # under self._lock
        while self._head < len(self._sinks):
            s = self._sinks[self._head]
            for line in s.lines[s.printed:]:
                print(line, flush=True)
            s.printed = len(s.lines)
            if not s.done:
                return
            self._head += 1


class Sink:
    def __init__(self, res):
        self.res = res
        self.lines = []
        self.printed = 0
        self.done = False

    def _emit(self, lines, counter=None, timed=None):
        r = self.res
        with r._lock:
            if counter:
                setattr(r, counter, getattr(r, counter) + 1)
            if timed is not None:
                r.tests.append(timed)
            self.lines.extend(lines)
            r._flush()

    def listed(self, names):
        self.res.listed(names)

    def close(self, name=None, seconds=None):
        r = self.res
        with r._lock:
            if name is not None:
                r.modules.append((seconds, name))
            self.done = True
            r._flush()

    def ok(self, name, seconds=None):
        if self.res.verbose and seconds is not None:
            line = "PASS %s (%.2fs)" % (name, seconds)
        else:
            line = "PASS %s" % name
        self._emit([line], "passed", None if seconds is None else (seconds, name))

    def skip(self, name, reason):
        self._emit(["SKIP %s: %s" % (name, " ".join(reason.split()))], "skipped")

    def fail(self, name, reason, detail=""):
        reason = " ".join(reason.split()) or "failed"
        lines = ["FAIL %s: %s" % (name, reason)]
        if detail:
            lines += ["    " + line for line in detail.rstrip().splitlines()]
        self._emit(lines, "failed")


_children = set()     # process groups of running children


def _on_term(signum, frame):
    raise SystemExit(128 + signum)


def _kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGCONT)
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass


def _tail(path, n=4000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def run_module(path, filters, timeout, res, tmpdir, ports=None):
    """Runs one module; `res` is its Sink. `ports`: "lo-hi", the range its
    nodes take their ports from (harness.free_port)."""
    done = set()
    name = os.path.splitext(os.path.basename(path))[0]
    rounds = 0
    while True:
        rounds += 1
        if rounds > 200:
            res.fail(name, "runner gave up restarting the module")
            return
        r, w = os.pipe()
        dumpfile = os.path.join(tmpdir, "%s.%d.dump" % (name, rounds))
        logfile = os.path.join(tmpdir, "%s.%d.log" % (name, rounds))
        args = json.dumps({"module": path, "filters": filters, "skip": sorted(done),
                           "timeout": timeout, "fd": w, "dump": dumpfile})
        env = dict(os.environ)
        env["TMPDIR"] = tmpdir          # server dirs etc. go away with the run
        if ports:
            env["REDLOCK_TEST_PORTS"] = ports
        with open(logfile, "w") as log:
            child = subprocess.Popen([PYTHON, os.path.abspath(__file__), "--child", args],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     pass_fds=(w,), start_new_session=True, cwd=REPO,
                                     env=env)
        _children.add(child.pid)
        os.close(w)
        reader = os.fdopen(r, "r")
        listed = None
        current = None
        started = 0.0
        buf = ""
        eof = False
        killed_for_timeout = False
        while not eof:
            wait = 1.0
            if current is not None:
                # the child dumps stacks and exits itself at `timeout`;
                # this is the backstop if even that does not happen.
                left = started + timeout + 10 - time.monotonic()
                if left <= 0:
                    killed_for_timeout = True
                    _kill_group(child.pid)
                    break
                wait = min(wait, left)
            ready, _, _ = select.select([reader], [], [], wait)
            if not ready:
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                eof = True
                break
            buf += chunk.decode(errors="replace")
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                ev = m.get("event")
                if ev == "list":
                    listed = m["tests"]
                    res.listed(listed)
                elif ev == "import_error":
                    res.fail(name, "cannot import module", m["error"])
                elif ev == "start":
                    current, started = m["name"], time.monotonic()
                elif ev == "end":
                    done.add(m["name"])
                    if m["ok"] and m.get("skipped"):
                        res.skip(m["name"], m["skipped"])
                    elif m["ok"]:
                        res.ok(m["name"], m.get("seconds"))
                    else:
                        err = m["error"] or "failed"
                        first, _, rest = err.partition("\n")
                        res.fail(m["name"], first, rest)
                    current = None
        reader.close()
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid)
            child.wait()
        # whatever the child left behind (servers, shells) dies with its group
        _kill_group(child.pid)
        _children.discard(child.pid)
        if current is not None:
            done.add(current)
            detail = _tail(dumpfile) or _tail(logfile)
            if killed_for_timeout or "Timeout" in _tail(dumpfile):
                res.fail(current, "timed out after %.0fs" % timeout, detail)
            else:
                res.fail(current, "test process died (exit status %s)" % child.returncode,
                         detail or _tail(logfile))
            if listed is not None and any(t not in done for t in listed):
                continue
            return
        if listed is None:
            res.fail(name, "test process exited (status %s) before listing tests"
                     % child.returncode, _tail(logfile))
        return


def run_unit(res):
    """C unit tests, when the Makefile has a `unit` target. make and the
    compiler run without a preloaded sanitizer runtime (a sanitized unit
    binary links its own), so only the tests' own reports reach the logs."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    probe = subprocess.run(["make", "-C", REPO, "-n", "unit"], capture_output=True, text=True, env=env)
    if probe.returncode != 0:
        return
    try:
        r = subprocess.run(["make", "-C", REPO, "-s", "unit"], capture_output=True,
                           text=True, timeout=300, start_new_session=True, env=env)
    except subprocess.TimeoutExpired:
        res.fail("make unit", "timed out")
        return
    if r.returncode == 0:
        res.ok("make unit")
    else:
        res.fail("make unit", "exit status %d" % r.returncode, (r.stdout + r.stderr)[-4000:])


def _runs_alone(path):
    with open(path, encoding="utf-8") as f:
        return any(line.startswith("RUN_ALONE = True") for line in f)


def main(argv):
    if len(argv) >= 2 and argv[1] == "--child":
        a = json.loads(argv[2])
        return _child(a["module"], a["filters"], set(a["skip"]), a["timeout"], a["fd"],
                      a["dump"])
    timeout = float(os.environ.get("REDLOCK_TEST_TIMEOUT", DEFAULT_TIMEOUT))
    verbose = False
    times = 0
    jobs = int(os.environ.get("REDLOCK_TEST_JOBS", DEFAULT_JOBS))
    filters = []
    listed = []          # the filters of --from FILE, each must select a test
    it = iter(argv[1:])
    for a in it:
        if a == "--timeout":
            timeout = float(next(it))
        elif a.startswith("--timeout="):
            timeout = float(a.split("=", 1)[1])
        elif a in ("-j", "--jobs"):
            jobs = int(next(it))
        elif a.startswith("--jobs="):
            jobs = int(a.split("=", 1)[1])
        elif a == "--times":
            times = 15
        elif a.startswith("--times="):
            times = int(a.split("=", 1)[1])
        elif a in ("-v", "--verbose"):
            verbose = True
        elif a == "--from" or a.startswith("--from="):
            path = next(it) if a == "--from" else a.split("=", 1)[1]
            listed += read_filters(path)
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            filters.append(a)
    filters += listed
    take = [f for f in filters if not f.startswith("!")]
    res = Results(verbose)
    t0 = time.monotonic()
    modules = sorted(os.path.join(HERE, f) for f in os.listdir(HERE)
                     if f.startswith("test_") and f.endswith(".py")
                     and (not take or any(may_match(x, f[:-3]) for x in take)))
    if not modules:
        print("no test module matches %s" % " ".join(filters))
        return 1
    signal.signal(signal.SIGTERM, _on_term)
    jobs = max(1, min(jobs, len(modules)))
    ranges = _port_ranges(jobs)
    # Modules that say RUN_ALONE = True (their tests bound how long faults
    # may take) run after the others, one at a time, so that another
    # module's load does not count against those bounds.
    alone = [(i, p) for i, p in enumerate(modules) if _runs_alone(p)]
    todo = [(i, p) for i, p in enumerate(modules) if (i, p) not in alone]
    sinks = [res.sink() for _ in modules]
    todo_lock = threading.Lock()
    stop = threading.Event()

    def worker(slot, tmpdir, todo=todo):
        while not stop.is_set():
            with todo_lock:
                if not todo:
                    return
                i, path = todo.pop(0)
            m0 = time.monotonic()
            try:
                run_module(path, filters, timeout, sinks[i], tmpdir, ranges[slot])
            except BaseException as e:
                sinks[i].fail(os.path.basename(path), "runner error: %r" % e)
            finally:
                sinks[i].close(os.path.splitext(os.path.basename(path))[0],
                               time.monotonic() - m0)

    try:
        with tempfile.TemporaryDirectory(prefix="redlock-run-") as tmpdir:
            threads = [threading.Thread(target=worker, args=(k, tmpdir), daemon=True)
                       for k in range(jobs)]
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
            t = threading.Thread(target=worker, args=(0, tmpdir, alone), daemon=True)
            t.start()
            while t.is_alive():
                t.join(0.5)
    finally:
        # interrupted (Ctrl-C, SIGTERM): take the running modules down with us
        stop.set()
        for pgid in list(_children):
            _kill_group(pgid)
    if (not take or any(f in "make unit" for f in take)) and selected(filters, "make unit"):
        sink = res.sink()
        run_unit(sink)
        sink.close()
    for f in listed:
        if not f.startswith("!") and not any(matches(f, n) for n in res.names):
            sink = res.sink()
            sink.fail("--from", "%r selects no test (renamed or removed?)" % f)
            sink.close()
    if verbose:
        print("(%.1fs)" % (time.monotonic() - t0))
    if times:
        print_times(res, times)
    print("%d passed, %d failed%s" % (res.passed, res.failed,
                                      ", %d skipped" % res.skipped if res.skipped else ""),
          flush=True)
    return 1 if res.failed or (res.passed == 0) else 0


def _port_ranges(jobs):
    """One range of loopback ports per worker, below the kernel's ephemeral
    range: the modules running side by side never pick each other's ports
    (not even one a test killed and will restart, or one it keeps free on
    purpose), and no outgoing connection takes one. None: let the kernel
    choose (one worker, or no room below the ephemeral range)."""
    if jobs < 2:
        return [None]
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 0
    lo, hi = 10000, ephemeral - 1
    step = (hi - lo + 1) // jobs
    if step < 1000:
        return [None] * jobs
    return ["%d-%d" % (lo + k * step, lo + (k + 1) * step - 1) for k in range(jobs)]


def print_times(res, n):
    """--times: module wall times and the n slowest tests, slowest first."""
    print("slowest modules (wall time):")
    for sec, name in sorted(res.modules, reverse=True)[:n]:
        print("  %6.1fs %s" % (sec, name))
    print("slowest tests:")
    for sec, name in sorted(res.tests, reverse=True)[:n]:
        print("  %6.1fs %s" % (sec, name))

if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
