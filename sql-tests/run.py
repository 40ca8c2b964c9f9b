#!/usr/bin/python3
"""Runs the redlock SQL tests.

    /usr/bin/python3 sql-tests/run.py [--timeout S] [-v] [FILTER ...]

Discovers sql-tests/test_*.py and runs every function named test_* in it,
one module at a time, each module in its own process group (so that every
redis-server, sqlite3 shell and worker a test starts dies with it). A test
that runs longer than its timeout has its stack dumped and is reported as
failed; the module's remaining tests continue in a fresh process.

FILTER: run only tests whose name "module.test" contains one of the strings.
Prints "PASS name" or "FAIL name: reason" per test, then "N passed, N failed".
A test that cannot run here (say, it needs root) raises unittest.SkipTest and
shows as "SKIP name: reason"; the closing line then adds ", N skipped".
Exit status 1 if anything failed.
"""
# SPDX-License-Identifier: BSD-3-Clause

import faulthandler
import importlib.util
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"
DEFAULT_TIMEOUT = 30.0


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
            if filters and not any(f in full for f in filters):
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
    def __init__(self, verbose):
        self.passed = 0
        self.failed = 0
        self.skipped = 0
        self.verbose = verbose

    def ok(self, name, seconds=None):
        self.passed += 1
        if self.verbose and seconds is not None:
            print("PASS %s (%.2fs)" % (name, seconds), flush=True)
        else:
            print("PASS %s" % name, flush=True)

    def skip(self, name, reason):
        self.skipped += 1
        print("SKIP %s: %s" % (name, " ".join(reason.split())), flush=True)

    def fail(self, name, reason, detail=""):
        self.failed += 1
        reason = " ".join(reason.split()) or "failed"
        print("FAIL %s: %s" % (name, reason), flush=True)
        if detail:
            for line in detail.rstrip().splitlines():
                print("    " + line, flush=True)


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


def run_module(path, filters, timeout, res, tmpdir):
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


def main(argv):
    if len(argv) >= 2 and argv[1] == "--child":
        a = json.loads(argv[2])
        return _child(a["module"], a["filters"], set(a["skip"]), a["timeout"], a["fd"],
                      a["dump"])
    timeout = float(os.environ.get("REDLOCK_TEST_TIMEOUT", DEFAULT_TIMEOUT))
    verbose = False
    filters = []
    it = iter(argv[1:])
    for a in it:
        if a == "--timeout":
            timeout = float(next(it))
        elif a.startswith("--timeout="):
            timeout = float(a.split("=", 1)[1])
        elif a in ("-v", "--verbose"):
            verbose = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            filters.append(a)
    res = Results(verbose)
    t0 = time.monotonic()
    modules = sorted(os.path.join(HERE, f) for f in os.listdir(HERE)
                     if f.startswith("test_") and f.endswith(".py"))
    signal.signal(signal.SIGTERM, _on_term)
    try:
        with tempfile.TemporaryDirectory(prefix="redlock-run-") as tmpdir:
            for path in modules:
                run_module(path, filters, timeout, res, tmpdir)
    finally:
        # interrupted (Ctrl-C, SIGTERM): take the running module down with us
        for pgid in list(_children):
            _kill_group(pgid)
    if not filters or any(f in "make unit" for f in filters):
        run_unit(res)
    if verbose:
        print("(%.1fs)" % (time.monotonic() - t0))
    print("%d passed, %d failed%s" % (res.passed, res.failed,
                                      ", %d skipped" % res.skipped if res.skipped else ""),
          flush=True)
    return 1 if res.failed or (res.passed == 0) else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
