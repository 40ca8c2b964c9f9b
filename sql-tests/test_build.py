"""The build as a packager and a maintainer use it (Makefile, mk/*.mk):

* every compile and link takes the packager's CPPFLAGS and LDFLAGS;
* `make WERROR=0` drops -Werror from every compile, and it is there by default;
* the fragments mk/*.mk are included by name (MK_FRAGMENTS): a missing one
  stops make, and their order does not change what a recipe runs (it did:
  mk/unit.mk read mk/hardening.mk's compiler while it was read, so with
  hardening.mk read later `make unit SANITIZE=1` ran no compiler);
* `make help` lists every target once, each with its line.

Read from `make -n` (nothing is built) and from the make files themselves."""
# SPDX-License-Identifier: BSD-3-Clause

import glob
import os
import re
import shutil
import subprocess
import tempfile

import harness as h
from harness import check, eq

REPO = h.REPO
CPP, LD = "-DRL_PACKAGER_CPPFLAGS", "-Wl,-O1,--sort-common"
# Goals that compile, one of each kind of rule: the extension, the unit
# tests, the sanitizer, ThreadSanitizer, fuzz replay and bench builds.
COMPILING = ["redlock.so", "build/unit/plain/unit", "build/tsan/redlock.so", "build/tsan/tsan",
             "build/fuzz/replay_url", "build/bench/bare", "build/bench/redlock_nostats.so"]


def _env():
    """make's environment without the runner's make or a user's build flags."""
    env = dict(os.environ)
    for k in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LTOFLAGS",
              "WERROR", "SANITIZE", "CC", "LD_PRELOAD"):
        env.pop(k, None)
    return env


def _make(*args, cwd=REPO, ok=True):
    p = subprocess.run(["make", "--no-print-directory", "-C", cwd] + list(args),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                       timeout=60)
    if ok and p.returncode != 0:
        raise AssertionError("make %s exited %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p


def _make_files():
    return ["Makefile"] + sorted(os.path.relpath(p, REPO)
                                 for p in glob.glob(os.path.join(REPO, "mk", "*.mk")))


def _recipe_lines(path):
    """The recipe lines of a make file, continuation lines joined."""
    with open(os.path.join(REPO, path)) as f:
        text = f.read().replace("\\\n", " ")
    return [line for line in text.split("\n") if line.startswith("\t")]


def _compiles(out):
    """The commands of `make -n` output that compile or link something
    (continued lines joined)."""
    return [line for line in out.replace("\\\n", " ").splitlines()
            if " -o " in line and re.search(r"\.c\b", line)]


def _sanitizer_so():
    """The sanitizer build's file name, as mk/hardening.mk names it."""
    out = _make("-s", "--eval", "rl-print-san-so: ; @echo $(SAN_SO)", "rl-print-san-so").stdout
    check(re.fullmatch(r"build/sanitize/[^/ ]+/redlock\.so\n", out), "SAN_SO is %r" % out)
    return out.strip()


def test_every_compile_takes_cppflags_and_ldflags():
    for path in _make_files():
        for line in _recipe_lines(path):
            if "-o $@" in line:
                check("$(CPPFLAGS)" in line and "$(LDFLAGS)" in line,
                      "%s: a compile without $(CPPFLAGS) or $(LDFLAGS):\n%s" % (path, line.strip()))
            if "MUTANT_FLAGS=" in line:
                check("$(CPPFLAGS)" in line and "$(LDFLAGS)" in line,
                      "%s: the mutants' build without the packager's flags:\n%s" % (path, line))
    goals = COMPILING + [_sanitizer_so()]
    out = _make("-n", "-B", "CPPFLAGS=" + CPP, "LDFLAGS=" + LD, *goals).stdout
    commands = _compiles(out)
    eq(len(commands), len(goals), "compiles of %r: %r" % (goals, commands))
    for cmd in commands:
        check(CPP in cmd.split() and LD in cmd.split(),
              "a compile without CPPFLAGS=%s LDFLAGS=%s:\n%s" % (CPP, LD, cmd))
        words = cmd.split()
        check("-Isrc" not in words or words.index(CPP) > words.index("-Isrc"),
              "CPPFLAGS before the project's -Isrc: %s" % cmd)


def test_werror_on_by_default_and_off_with_werror_0():
    goals = COMPILING + [_sanitizer_so()]
    on = _compiles(_make("-n", "-B", *goals).stdout)
    off = _compiles(_make("-n", "-B", "WERROR=0", *goals).stdout)
    eq(len(on), len(off), "compiles with and without WERROR=0")
    check(on and all("-Werror" in c.split() for c in on),
          "a compile without -Werror by default: %r" % [c for c in on if "-Werror" not in c.split()])
    eq([c for c in off if "-Werror" in c.split()], [], "compiles with -Werror under WERROR=0")
    out = _make("-n", "WERROR=0", "mutants").stdout
    check("MUTANT_FLAGS=" in out and "-Werror" not in out, "make -n WERROR=0 mutants: %r" % out)
    for path in _make_files():
        with open(os.path.join(REPO, path)) as f:
            for line in f:
                if "-Werror" in line and not line.lstrip().startswith("#"):
                    check("$(if $(filter-out 0,$(WERROR)),-Werror)" in line,
                          "%s: -Werror that WERROR=0 does not switch off: %s" % (path, line.strip()))


def _copy_of_the_build(d):
    """The make files copied into d (the sources linked), to try other
    orders of the fragments without touching the tree."""
    for name in ("src", "ext", "unit", "fuzz", "tsan", "bench", "sql-tests", "scripts"):
        os.symlink(os.path.join(REPO, name), os.path.join(d, name))
    shutil.copytree(os.path.join(REPO, "mk"), os.path.join(d, "mk"), symlinks=True)
    shutil.copy(os.path.join(REPO, "Makefile"), d)
    with open(os.path.join(d, "Makefile")) as f:
        return f.read()


def _fragments(makefile):
    m = re.search(r"^MK_FRAGMENTS\s*=\s*((?:.*\\\n)*.*)$", makefile, re.M)
    check(m, "the Makefile sets no MK_FRAGMENTS")
    return m.group(1).replace("\\\n", " ").split()


def test_fragments_included_by_name_in_any_order():
    with open(os.path.join(REPO, "Makefile")) as f:
        makefile = f.read()
    check("wildcard mk/" not in makefile, "the Makefile still includes mk/ by wildcard")
    check(re.search(r"^include \$\(MK_FRAGMENTS\)$", makefile, re.M),
          "the Makefile includes $(MK_FRAGMENTS)")
    listed = _fragments(makefile)
    eq(sorted(listed), [p for p in _make_files() if p != "Makefile"],
       "MK_FRAGMENTS against mk/*.mk (each once)")
    want = _make("-n", "-B", "unit", "SANITIZE=1").stdout
    with tempfile.TemporaryDirectory() as d:
        text = _copy_of_the_build(d)
        block = re.search(r"^MK_FRAGMENTS\s*=\s*(?:.*\\\n)*.*$", text, re.M).group(0)
        for order in (listed[::-1], sorted(listed, key=lambda p: p != "mk/unit.mk")):
            with open(os.path.join(d, "Makefile"), "w") as f:
                f.write(text.replace(block, "MK_FRAGMENTS = " + " ".join(order)))
            got = _make("-n", "-B", "unit", "SANITIZE=1", cwd=d).stdout
            eq(got, want, "make -n unit SANITIZE=1 with the fragments in the order %s" % order)
            cc = _compiles(got)[0].split()[0]
            check(shutil.which(cc), "the unit tests' compiler %r (order %s)" % (cc, order))
        with open(os.path.join(d, "Makefile"), "w") as f:
            f.write(text)
        os.rename(os.path.join(d, "mk", "soak.mk"), os.path.join(d, "mk", "x-soak.mk"))
        p = _make("-n", "help", cwd=d, ok=False)
        check(p.returncode != 0 and "mk/soak.mk" in p.stderr,
              "make with mk/soak.mk renamed should stop naming it: rc %d, %r"
              % (p.returncode, p.stderr))


def test_help_lists_every_target_once():
    database = _make("-p", "-n", "version").stdout
    phony = set()
    for line in database.splitlines():
        if line.startswith(".PHONY:"):
            phony.update(line.split()[1:])
    check({"all", "test", "check", "help", "install", "unit", "fuzz"} <= phony,
          "the .PHONY targets make reads: %r" % sorted(phony))
    lines = _make("-s", "help").stdout.splitlines()
    listed = [line.split()[0] for line in lines if line.startswith("  ") and len(line.split()) > 1
              and not line.startswith("   ")]
    eq(len(listed), len(set(listed)), "targets listed twice by make help: %r" % listed)
    eq(sorted(set(listed)), sorted(phony | {"redlock.so"}), "the targets make help lists")
    for line in lines:
        if line.startswith("  ") and line.split()[0] in listed:
            check(len(line.split()) >= 3, "a target without its line in make help: %r" % line)
