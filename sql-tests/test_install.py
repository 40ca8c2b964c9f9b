"""Installing and packaging (mk/install.mk, scripts/build-deb.sh), the
version's one home, and the licence.

* `make install DESTDIR=<tmp>` (and with PREFIX or LIBDIR) writes redlock.so
  where the variables say, mode 0644; the copy loads by bare name through
  LD_LIBRARY_PATH and by full path; `make uninstall` removes it.
* As root, `make install` as a user runs it (no DESTDIR): `.load redlock`
  in the real sqlite3 shell and load_extension('redlock') in
  /usr/bin/python3 work from another directory (and fail there before the
  install and after the uninstall). A redlock.so already installed is never
  touched; the test always uninstalls.
* `make deb`: Depends names exactly the packages owning the libraries the
  object links to, the README is in /usr/share/doc, the unpacked object
  loads; as root, installed with dpkg, `.load redlock` works and `make
  install`/`make uninstall` leave the package's file alone.

The two tests as root install into the system's own paths. They do it on
this machine only when REDLOCK_TEST_SYSTEM_INSTALL=1 (.ci/run sets it).
Otherwise they run in a private mount namespace where the directories that
make install and dpkg write (LIBDIR, /usr/share/doc, /var/lib/dpkg,
/var/log) are overlays on scratch directories: the commands see and change
the system's paths and dpkg database as a user's would, and the machine's
own stay as they were (checked after each test). Without root, or where no
such namespace can be made (unshare, nsenter, overlayfs), they are skipped
and say why.
* One version everywhere: the header, `make version`, redlock_version(), the
  package and CHANGELOG.md. LICENSE is BSD-3-Clause and every source file
  names it in one SPDX line of its header comment.

Everything is built in temporary directories, never in the source tree
(apart from ./redlock.so, which make test builds anyway)."""
# SPDX-License-Identifier: BSD-3-Clause

import contextlib
import gzip
import os
import re
import shutil
import stat
import subprocess
import tempfile
import unittest

import harness as h
from harness import check, eq, value

REPO = h.REPO
SO = os.path.join(REPO, "redlock.so")
PACKAGE = "libsqlite3-mod-redlock"
SPDX = "SPDX-License-" "Identifier: BSD-3-Clause"  # split: this file's own line is below
HEADER_DEFINE = re.compile(r'^#define REDLOCK_VERSION "([^"]*)"$', re.M)

# What the licence line must be in: every source file of these shapes,
# whoever adds it later.
SOURCE_PATTERNS = [re.compile(p) for p in (
    r"src/[^/]+", r"ext/[^/]+", r"bench/[^/]+\.(c|h|py|mjs)", r"fuzz/[^/]+\.(c|h|py)",
    r"sql-tests/[^/]+\.py", r"scripts/[^/]+\.sh", r"mk/[^/]+\.mk", r"mk/hardening/[^/]+",
    r"examples/[^/]+", r"Makefile", r"\.ci/run")]
SPDX_COMMENT = re.compile(r"^\s*(/?\*|#|//|--)\s*" + re.escape(SPDX) + r"(\s*\*/)?\s*$")

# A module-wide scratch directory, removed when the module's process ends.
_scratch = tempfile.TemporaryDirectory(prefix="redlock-install-")
_deb_cache = {}


def _env(**extra):
    """The environment for make, dpkg and the loading processes: nothing of
    the runner's own make, of a sanitizer run, or of a user's install
    variables leaks in, so the defaults under test are the real ones."""
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "LD_PRELOAD", "LD_LIBRARY_PATH",
              "ASAN_OPTIONS", "LSAN_OPTIONS", "UBSAN_OPTIONS", "DESTDIR", "PREFIX",
              "LIBDIR", "MULTIARCH", "DEB_DIR", "REDLOCK_DEB_SHLIBDEPS", "REDLOCK_NODES"):
        env.pop(k, None)
    env.update(extra)
    return env


def _run(argv, what, ok=True, timeout=20, via=(), **kw):
    """Runs argv (after the prefix via: see _Root); returns (rc, stdout,
    stderr). ok=True: rc must be 0."""
    kw.setdefault("env", _env())
    p = subprocess.run(list(via) + argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, **kw)
    if ok and p.returncode != 0:
        raise AssertionError("%s: %s exited %d\nstdout: %s\nstderr: %s"
                             % (what, " ".join(argv), p.returncode, p.stdout, p.stderr))
    return p.returncode, p.stdout, p.stderr


def _make(*args, ok=True, env=None, via=()):
    return _run(["make", "--no-print-directory", "-C", REPO] + list(args),
                "make " + " ".join(args), ok=ok, env=env or _env(), via=via)


def _version():
    with open(os.path.join(REPO, "ext", "redlock_version.h")) as f:
        found = HEADER_DEFINE.findall(f.read())
    eq(len(found), 1, "#define REDLOCK_VERSION lines in ext/redlock_version.h")
    return found[0]


def _multiarch():
    """The multiarch triplet, asked of dpkg-architecture (or gcc), not of
    the Makefile under test."""
    for argv in (["dpkg-architecture", "-qDEB_HOST_MULTIARCH"], ["gcc", "-print-multiarch"]):
        if shutil.which(argv[0]):
            out = _run(argv, "multiarch triplet")[1].strip()
            if out:
                return out
    raise AssertionError("neither dpkg-architecture nor gcc names the multiarch triplet")


def _file_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def _check_copy(path, what):
    """path (as this process reads it) is a regular file, mode 0644, the
    very bytes of ./redlock.so."""
    st = os.lstat(path)
    check(stat.S_ISREG(st.st_mode), "%s: %s is not a regular file" % (what, path))
    eq(oct(stat.S_IMODE(st.st_mode)), "0o644", "%s: mode of %s" % (what, path))
    check(_file_bytes(path) == _file_bytes(SO), "%s: %s differs from ./redlock.so" % (what, path))


# After loading, each process prints the redlock.so files it has mapped, so
# a test knows which copy a bare name found (not some other installed one).
_SHELL_MAPPED = ".system grep -o '/[^ ]*redlock[.]so$' /proc/$PPID/maps | sort -u"


def _shell_load(load, cwd, ld_path=None, nodes=None, sql="SELECT redlock_version();", via=()):
    """The real sqlite3 shell in cwd: `.load <load>`, then sql (-bail: the
    first error ends it), then the mapped redlock.so paths.
    Returns (rc, stdout lines, stderr)."""
    env = _env()
    if ld_path:
        env["LD_LIBRARY_PATH"] = ld_path
    if nodes:
        env["REDLOCK_NODES"] = nodes
    rc, out, err = _run([h.SQLITE3, "-bail", ":memory:"], "sqlite3 shell", ok=False, cwd=cwd,
                        env=env, via=via, input=".load %s\n%s\n%s\n" % (load, sql, _SHELL_MAPPED))
    return rc, out.split(), err


_PY_LOAD = """
import sqlite3, sys
con = sqlite3.connect(":memory:")
con.enable_load_extension(True)
try:
    con.execute("SELECT load_extension(?)", (sys.argv[1],))
except sqlite3.Error as e:
    print("error:", e)
    sys.exit(3)
print(con.execute("SELECT redlock_version()").fetchone()[0])
with open("/proc/self/maps") as f:
    print("\\n".join(sorted({l.split()[-1] for l in f if l.rstrip().endswith("redlock.so")})))
"""


def _python_load(name, cwd, ld_path=None, via=()):
    """/usr/bin/python3 in cwd: SELECT load_extension(name), then
    redlock_version(), then the mapped redlock.so paths.
    Returns (rc, stdout lines, stderr)."""
    env = _env()
    if ld_path:
        env["LD_LIBRARY_PATH"] = ld_path
    rc, out, err = _run([h.PYTHON, "-c", _PY_LOAD, name], "python load", ok=False, cwd=cwd,
                        env=env, via=via)
    return rc, out.split(), err


def _loads(how, result, version, path, sql_out=None):
    """The load worked, printed `sql_out` (default: the version) and mapped
    exactly the file at `path` (compared as real paths: /lib is /usr/lib)."""
    rc, out, err = result
    want = [version] if sql_out is None else sql_out
    eq((rc, out[:len(want)], err.strip()), (0, want, ""), how)
    mapped = {os.path.realpath(p) for p in out[len(want):]}
    eq(mapped, {os.path.realpath(path)}, "%s: the redlock.so files mapped" % how)


def _fails_to_load(how, result):
    rc, out, err = result
    check(rc != 0 and "cannot open shared object file" in " ".join(out) + err,
          "%s should fail (nothing installed there), got rc %d, %r %r" % (how, rc, out, err))


# --------------------------------------------------------------------------
# make install / uninstall into a scratch DESTDIR
# --------------------------------------------------------------------------

def test_install_destdir_default_libdir():
    version, ma = _version(), _multiarch()
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as elsewhere:
        dest = os.path.join(d, "root")
        _make("install", "DESTDIR=" + dest)
        libdir = os.path.join(dest, "usr", "lib", ma)
        target = os.path.join(libdir, "redlock.so")
        _check_copy(target, "make install DESTDIR")
        eq(sorted(os.listdir(dest)), ["usr"], "what make install put in DESTDIR")
        # bare name through LD_LIBRARY_PATH, from a directory without it
        _loads(".load redlock with LD_LIBRARY_PATH=DESTDIR's libdir",
               _shell_load("redlock", elsewhere, ld_path=libdir), version, target)
        _loads("load_extension('redlock') with LD_LIBRARY_PATH",
               _python_load("redlock", elsewhere, ld_path=libdir), version, target)
        # and by full path
        _loads(".load by full path", _shell_load(target[:-3], elsewhere), version, target)
        _loads("load_extension(full path)", _python_load(target, elsewhere), version, target)
        _make("uninstall", "DESTDIR=" + dest)
        check(not os.path.lexists(target), "make uninstall left %s" % target)
        _fails_to_load(".load <full path> after make uninstall",
                       _shell_load(target[:-3], elsewhere))


def test_install_prefix_and_libdir():
    ma = _multiarch()
    with tempfile.TemporaryDirectory() as d:
        for args, where in ((["PREFIX=/opt/rl"], "opt/rl/lib/" + ma),
                            (["LIBDIR=/srv/sqlite-ext"], "srv/sqlite-ext"),
                            (["PREFIX=/opt/rl", "LIBDIR=/x/y"], "x/y")):
            target = os.path.join(d, where, "redlock.so")
            _make("install", "DESTDIR=" + d, *args)
            _check_copy(target, "make install " + " ".join(args))
            _make("uninstall", "DESTDIR=" + d, *args)
            check(not os.path.lexists(target),
                  "make uninstall %s left %s" % (" ".join(args), target))


# --------------------------------------------------------------------------
# the install a user does, as root: on this machine or in a private view of it
# --------------------------------------------------------------------------

SYSTEM_INSTALL = os.environ.get("REDLOCK_TEST_SYSTEM_INSTALL") == "1"


class _Root:
    """Where a test installs into the system's paths. via: the argv prefix
    that runs a command there; path(p): the name under which this process
    reads the file that is p there."""

    def __init__(self, via, prefix):
        self.via, self.prefix = via, prefix

    def path(self, p):
        return self.prefix + p


@contextlib.contextmanager
def _private_view(dirs, what):
    """A private mount namespace in which each of dirs is an overlay on a
    scratch directory, kept by a process that waits on its stdin: commands
    entered into it (nsenter) read the real directories and write the
    scratch ones, and the namespace and its mounts end with that process."""
    scratch = tempfile.mkdtemp(dir=_scratch.name)
    script = ["set -e"]
    for i, d in enumerate(dirs):
        upper, work = os.path.join(scratch, "upper%d" % i), os.path.join(scratch, "work%d" % i)
        os.makedirs(upper)
        os.makedirs(work)
        script.append("mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s"
                      % (d, upper, work, d))
    script += ["echo ready", "read _"]
    unavailable = ("%s: no private mount namespace here (%%s); REDLOCK_TEST_SYSTEM_INSTALL=1 runs "
                   "it on this machine" % what)
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        raise unittest.SkipTest(unavailable % "unshare or nsenter missing")
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                          "\n".join(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env())
    try:
        if p.stdout.readline().strip() != "ready":
            p.wait(10)
            raise unittest.SkipTest(unavailable % " ".join(p.stderr.read().split()))
        yield _Root(["nsenter", "--target", str(p.pid), "--mount", "--"], "/proc/%d/root" % p.pid)
    finally:
        p.stdin.close()          # its `read` ends, and the namespace with it
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextlib.contextmanager
def _system_root(what):
    """(the system path of redlock.so, the _Root to install it in) for a
    test that installs as a user does, without DESTDIR: this machine with
    REDLOCK_TEST_SYSTEM_INSTALL=1, else a private view of the directories
    make install and dpkg write, after which the machine's own path is
    checked to be untouched. Skipped unless root and unless nothing (no
    file, no package) is there."""
    if os.geteuid() != 0:
        raise unittest.SkipTest("%s needs root; run make test as root to test it" % what)
    ma = _multiarch()
    target = "/usr/lib/%s/redlock.so" % ma
    rc, out, err = _run(["dpkg-query", "-W", "-f=${Status}", PACKAGE], "dpkg-query", ok=False)
    if os.path.lexists(target) or "installed" in out:
        raise unittest.SkipTest("%s or the package %s is already there (an earlier install): "
                                "not touching it" % (target, PACKAGE))
    if SYSTEM_INSTALL:
        yield target, _Root([], "")
        return
    with _private_view(["/usr/lib/" + ma, "/usr/share/doc", "/var/lib/dpkg", "/var/log"],
                       what) as root:
        yield target, root
    check(not os.path.lexists(target), "%s in a private mount namespace left %s on this machine"
          % (what, target))
    rc, out, err = _run(["dpkg-query", "-W", "-f=${Status}", PACKAGE], "dpkg-query", ok=False)
    check("installed" not in out, "%s in a private mount namespace: this machine's dpkg says "
          "%s is %r" % (what, PACKAGE, out))


def test_real_install_loads_by_bare_name():
    with _system_root("`make install` into the system's LIBDIR") as (target, root):
        _install_loads_by_bare_name(target, root)


def _install_loads_by_bare_name(target, root):
    version = _version()
    c = h.shared_cluster(1)
    via, there = root.via, root.path(target)
    installed = False  # True from the moment a file at target can only be ours
    with tempfile.TemporaryDirectory() as elsewhere:
        rc, out, err = _shell_load("redlock", elsewhere, via=via)
        if rc == 0:
            raise unittest.SkipTest("a bare `.load redlock` already finds %s: not testing "
                                    "the install over it" % " ".join(out[1:]))
        _fails_to_load(".load redlock before make install", (rc, out, err))
        try:
            installed = True
            rc, out, err = _make("install", via=via)
            check("'.load redlock' now works" in out, "make install's closing note: %r" % out)
            _check_copy(there, "make install")
            _loads("sqlite3 shell: .load redlock from %s" % elsewhere,
                   _shell_load("redlock", elsewhere, via=via), version, target)
            _loads("/usr/bin/python3: SELECT load_extension('redlock')",
                   _python_load("redlock", elsewhere, via=via), version, target)
            # the installed copy takes and gives back a real lock
            _loads("acquire and release through the installed redlock.so",
                   _shell_load("redlock", elsewhere, nodes=c.nodes_env(), via=via, sql=(
                       "SELECT redlock_acquire('install-test', 10000) IS NOT NULL;\n"
                       "SELECT redlock_release('install-test');")),
                   version, target, sql_out=["1", "1"])
            _make("uninstall", via=via)
            installed = False
            check(not os.path.lexists(there), "make uninstall left %s" % target)
            _fails_to_load(".load redlock after make uninstall",
                           _shell_load("redlock", elsewhere, via=via))
        finally:
            if installed and os.path.lexists(there):
                os.unlink(there)


# --------------------------------------------------------------------------
# make deb
# --------------------------------------------------------------------------

def _deb(shlibdeps=True):
    """Builds the package once per way of computing Depends; its path."""
    if shlibdeps not in _deb_cache:
        out_dir = os.path.join(_scratch.name, "deb-%d" % shlibdeps)
        env = _env() if shlibdeps else _env(REDLOCK_DEB_SHLIBDEPS="0")
        rc, out, err = _make("-s", "deb", "DEB_DIR=" + out_dir, env=env)
        deb = out.strip().splitlines()[-1]
        eq(os.path.dirname(deb), out_dir, "where make deb wrote the package")
        eq(os.path.basename(deb), "%s_%s_%s.deb" % (PACKAGE, _version(), _arch()),
           "package file name")
        _deb_cache[shlibdeps] = deb
    return _deb_cache[shlibdeps]


def _arch():
    return _run(["dpkg", "--print-architecture"], "dpkg architecture")[1].strip()


def _field(deb, name):
    return _run(["dpkg-deb", "-f", deb, name], "dpkg-deb -f")[1].strip()


def _linked_packages():
    """The packages that own the libraries redlock.so links to (ldd), as
    this test works them out on its own."""
    out = _run(["ldd", SO], "ldd redlock.so")[1]
    owners = set()
    for m in re.finditer(r"=> (/\S+)", out):
        path = m.group(1)
        cands = [path, os.path.realpath(path), "/usr" + path,
                 path[4:] if path.startswith("/usr/") else path]
        for p in cands:
            rc, o, _ = _run(["dpkg-query", "-S", p], "dpkg-query -S", ok=False)
            if rc == 0:
                owners.add(o.split(":")[0].strip())
                break
        else:
            raise AssertionError("no package owns %s" % path)
    check({"libc6", "libhiredis0.14"} <= owners, "ldd's libraries come from %r" % owners)
    return owners


def _depends_packages(depends):
    return {d.split("(")[0].strip() for d in depends.split(",") if d.strip()}


def test_deb_control():
    deb = _deb()
    rc, info, err = _run(["dpkg-deb", "-I", deb], "dpkg-deb -I")
    for line in ("Package: " + PACKAGE, "Version: " + _version(), "Architecture: " + _arch(),
                 "Multi-Arch: same"):
        check(re.search(r"^ %s$" % re.escape(line), info, re.M),
              "dpkg-deb -I should show %r:\n%s" % (line, info))
    depends = _field(deb, "Depends")
    eq(_depends_packages(depends), _linked_packages(),
       "Depends (%s) against the packages of ldd's libraries" % depends)
    check(all("(>=" in d for d in depends.split(",")),
          "every Depends entry has a lower version bound: %s" % depends)
    # the fallback without dpkg-shlibdeps names the same packages
    eq(_depends_packages(_field(_deb(shlibdeps=False), "Depends")), _linked_packages(),
       "Depends worked out from ldd and dpkg -S")
    listing = _run(["dpkg-deb", "-c", deb], "dpkg-deb -c")[1]
    for line in listing.splitlines():
        check(line.split()[1] == "root/root", "not owned by root in the package: %s" % line)


def test_deb_contents_load():
    version, ma = _version(), _multiarch()
    deb = _deb()
    with tempfile.TemporaryDirectory() as d, tempfile.TemporaryDirectory() as elsewhere:
        _run(["dpkg-deb", "-x", deb, d], "dpkg-deb -x")
        libdir = os.path.join(d, "usr", "lib", ma)
        so = os.path.join(libdir, "redlock.so")
        eq(oct(stat.S_IMODE(os.stat(so).st_mode)), "0o644", "mode of redlock.so in the package")
        doc = os.path.join(d, "usr", "share", "doc", PACKAGE)
        eq(sorted(os.listdir(doc)), ["README.md", "changelog.gz", "copyright"],
           "the package's /usr/share/doc/%s" % PACKAGE)
        check(_file_bytes(os.path.join(doc, "README.md"))
              == _file_bytes(os.path.join(REPO, "README.md")), "README.md in the package")
        with gzip.open(os.path.join(doc, "changelog.gz")) as f:
            check(f.read() == _file_bytes(os.path.join(REPO, "CHANGELOG.md")),
                  "changelog.gz is CHANGELOG.md")
        with open(os.path.join(doc, "copyright")) as f:
            copyright_text = f.read()
        check("License: BSD-3-Clause" in copyright_text
              and "Neither the name of the copyright holder" in copyright_text,
              "copyright carries the licence:\n" + copyright_text)
        _loads(".load redlock from the unpacked package (LD_LIBRARY_PATH)",
               _shell_load("redlock", elsewhere, ld_path=libdir), version, so)
        _loads("load_extension(<unpacked package>/redlock.so)", _python_load(so, elsewhere),
               version, so)


def _dpkg(*args, via=()):
    """dpkg, waiting a little if another dpkg/apt run holds its lock."""
    def attempt():
        rc, out, err = _run(["dpkg"] + list(args), "dpkg " + " ".join(args), ok=False,
                            timeout=60, via=via)
        if rc == 0:
            return True
        if "lock" in err:
            return None
        raise AssertionError("dpkg %s exited %d: %s" % (" ".join(args), rc, err))
    h.wait_until(attempt, 20, what="the dpkg lock")


def test_deb_installed_with_dpkg():
    with _system_root("installing the package with dpkg") as (target, root):
        _deb_installed_with_dpkg(target, root)


def _deb_installed_with_dpkg(target, root):
    version = _version()
    deb = _deb()
    via, there = root.via, root.path(target)
    installed = False
    with tempfile.TemporaryDirectory() as elsewhere:
        try:
            installed = True
            _dpkg("-i", deb, via=via)
            _loads(".load redlock after dpkg -i", _shell_load("redlock", elsewhere, via=via),
                   version, target)
            before = _file_bytes(there)
            for goal in ("install", "uninstall"):
                rc, out, err = _make(goal, ok=False, via=via)
                check(rc != 0 and "belongs to the Debian package %s" % PACKAGE in err,
                      "make %s over the package's file must refuse: rc %d, %r" % (goal, rc, err))
                check(_file_bytes(there) == before, "make %s changed the package's file" % goal)
            _dpkg("--purge", PACKAGE, via=via)
            installed = False
            check(not os.path.lexists(there), "dpkg --purge left %s" % target)
        finally:
            if installed:
                _run(["dpkg", "--purge", PACKAGE], "dpkg --purge", ok=False, timeout=60, via=via)


# --------------------------------------------------------------------------
# the version's one home; the licence
# --------------------------------------------------------------------------

def test_version_one_place():
    version = _version()
    check(re.fullmatch(r"\d+\.\d+\.\d+", version), "version %r is MAJOR.MINOR.PATCH" % version)
    # no second home in the C sources
    for top in ("src", "ext"):
        for name in sorted(os.listdir(os.path.join(REPO, top))):
            path = os.path.join(top, name)
            with open(os.path.join(REPO, path)) as f:
                text = f.read()
            if path != os.path.join("ext", "redlock_version.h"):
                check('"%s"' % version not in text and "REDLOCK_VERSION \"" not in text,
                      "%s spells the version out; it belongs in ext/redlock_version.h only" % path)
    eq(_make("-s", "version")[1].strip(), version, "make version")
    con = h.connect(None)
    eq(value(con, "SELECT redlock_version()"), version, "redlock_version()")
    with open(os.path.join(REPO, "CHANGELOG.md")) as f:
        headings = re.findall(r"^## (.+)$", f.read(), re.M)
    check(headings and headings[0] == "[Unreleased]",
          "CHANGELOG.md opens with an '[Unreleased]' section: %r" % headings[:2])
    released = [x for x in headings if x != "[Unreleased]"]
    check(released and re.fullmatch(r"\[%s\] - \d{4}-\d{2}-\d{2}" % re.escape(version), released[0]),
          "CHANGELOG.md's newest release is %r: it should be '[%s] - YYYY-MM-DD'"
          % (released[:1], version))
    eq(_field(_deb(), "Version"), version, "the package's Version")


def _source_files():
    rc, out, err = _run(["git", "-C", REPO, "ls-files", "--cached", "--others",
                         "--exclude-standard"], "git ls-files", ok=False)
    if rc == 0:
        files = out.split("\n")
    else:  # not a git checkout: every file on disk
        files = [os.path.relpath(os.path.join(dp, f), REPO)
                 for dp, dns, fs in os.walk(REPO) for f in fs]
    return sorted(f for f in set(files)
                  if any(p.fullmatch(f) for p in SOURCE_PATTERNS)
                  and os.path.isfile(os.path.join(REPO, f)))


def _header(lines):
    """The lines of a file's header comment: its first /* */ comment; or an
    optional shebang, a Python docstring and the comment lines right after
    it; or the leading run of #, // or -- comment lines."""
    i = 1 if lines and lines[0].startswith("#!") else 0
    if i < len(lines) and lines[i].lstrip().startswith("/*"):
        end = next((k for k in range(i, len(lines)) if "*/" in lines[k]), len(lines) - 1)
        return lines[:end + 1]
    if i < len(lines) and lines[i][:3] in ('"""', "'''"):
        q = lines[i][:3]
        if lines[i].count(q) >= 2:
            i += 1
        else:
            i = next((k for k in range(i + 1, len(lines)) if q in lines[k]), len(lines) - 1) + 1
    while i < len(lines) and lines[i].startswith(("#", "//", "--")):
        i += 1
    return lines[:i]


def test_licence():
    with open(os.path.join(REPO, "LICENSE")) as f:
        text = f.read()
    for s in ("BSD 3-Clause License", "Copyright (c) 2026, the redlock authors",
              "1. Redistributions of source code", "2. Redistributions in binary form",
              "3. Neither the name of the copyright holder"):
        check(s in text, "LICENSE should contain %r" % s)
    files = _source_files()
    check(len(files) > 50 and "Makefile" in files and "ext/redlock_ext.c" in files,
          "the source files found: %r" % files[:5])
    missing = []
    for f in files:
        with open(os.path.join(REPO, f), errors="replace") as fh:
            header = _header(fh.read().split("\n"))
        if sum(1 for line in header if SPDX_COMMENT.match(line)) != 1:
            missing.append(f)
    eq(missing, [], "source files whose header comment lacks one '%s' line" % SPDX)


def _ensure_deps_with(missing):
    """Runs scripts/ensure-deps.sh with dpkg-query, apt-get, id and
    systemctl replaced by stubs on PATH: the packages in missing are not
    installed, the user is root, and every systemctl call is logged.
    Returns (exit code, the logged systemctl argument lines)."""
    d = tempfile.mkdtemp(dir=_scratch.name)
    log = os.path.join(d, "systemctl.log")
    stubs = {
        "dpkg-query": 'case " %s " in *" ${@: -1} "*) exit 1;; esac; printf "install ok installed"' % " ".join(missing),
        "apt-get": "exit 0",
        "id": "echo 0",
        "systemctl": 'echo "$*" >> %s' % log,
    }
    for name, body in stubs.items():
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write("#!/bin/bash\n" + body + "\n")
        os.chmod(p, 0o755)
    env = _env(PATH=d + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run(["bash", os.path.join(REPO, "scripts", "ensure-deps.sh")], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    calls = open(log).read().split("\n")[:-1] if os.path.exists(log) else []
    return r.returncode, calls


def test_ensure_deps_leaves_an_installed_redis_alone():
    """A redis-server that was there before is the host's: installing another
    missing package must not stop or disable it. One that the script itself
    installed (and that Debian started on 6379) is stopped."""
    rc, calls = _ensure_deps_with(["libssl-dev"])
    eq(rc, 0, "ensure-deps with only libssl-dev missing")
    eq(calls, [], "systemctl calls when redis-server was already installed")
    rc, calls = _ensure_deps_with(["redis-server", "libssl-dev"])
    eq(rc, 0, "ensure-deps with redis-server missing")
    eq(calls, ["disable --now redis-server"], "systemctl calls when redis-server was just installed")


def test_packaged_file_found_through_a_directory_alias():
    """make install and make uninstall leave a file that a Debian package
    owns alone when LIBDIR names its directory through a symbolic link (as
    /lib is /usr/lib on a merged-/usr system): dpkg lists the file under its
    real path only. A fake dpkg database (DPKG_ADMINDIR) owns real/redlock.so."""
    d = tempfile.mkdtemp(dir=_scratch.name)
    real, link, admin = (os.path.join(d, x) for x in ("real", "link", "dpkg"))
    os.makedirs(real)
    os.symlink(real, link)
    os.makedirs(os.path.join(admin, "info"))
    os.makedirs(os.path.join(admin, "updates"))
    with open(os.path.join(admin, "status"), "w") as f:
        f.write("Package: fakepkg\nStatus: install ok installed\nVersion: 1\nArchitecture: all\n"
                "Maintainer: x <x@example.org>\nDescription: stands in for the .deb\n\n")
    open(os.path.join(admin, "available"), "w").close()
    target = os.path.join(real, "redlock.so")
    with open(os.path.join(admin, "info", "fakepkg.list"), "w") as f:
        f.write(target + "\n")
    with open(target, "w") as f:
        f.write("the package's file\n")
    env = _env(DPKG_ADMINDIR=admin)
    for verb in ("uninstall", "install"):
        for libdir in (real, link):
            rc, out, err = _make(verb, "LIBDIR=" + libdir, ok=False, env=env)
            check(rc != 0 and "belongs to the Debian package fakepkg" in err,
                  "make %s LIBDIR=%s should refuse (rc %d): %r" % (verb, libdir, rc, err))
            with open(target) as f:
                eq(f.read(), "the package's file\n", "the package's file after make %s LIBDIR=%s" % (verb, libdir))
