#!/usr/bin/python3
"""Reads the sanitizer reports of a `make test SANITIZE=1` run.

    /usr/bin/python3 mk/hardening/sanitizer_logs.py DIR

Every process of the run has ASAN_OPTIONS/UBSAN_OPTIONS log_path pointing
into DIR, so a report lands in DIR/asan.<pid> or DIR/ubsan.<pid> whatever
the process's output was used for (a shell expected to fail, a worker that
was killed later). Any report there is a failure: an AddressSanitizer error,
a leak that the suppressions (mk/hardening/lsan.supp) let through, or a
UBSan runtime error. Prints each report (shortened) and a summary line;
exits 1 if there was any.

One known leak is not ours and is only noted: /usr/bin/python3 (3.11)'s
sqlite3 module does not sqlite3_free() the error message of a failed
load_extension (a test that loads the extension with a bad REDLOCK_NODES
triggers it). It shows as a leak in a python process whose every frame is
in libsqlite3 (the fast unwinder stops there). A leak with any frame
outside libsqlite3 (python's, or ours) still fails the run; leaks of
sqlite3_malloc'd memory by the extension are caught with full stacks by
the sqlite3 shell runs here and by `make valgrind`."""
# SPDX-License-Identifier: BSD-3-Clause

import os
import re
import sys

OURS = re.compile(r"redlock\.so|/src/rl_\w+\.c|/ext/redlock_\w+\.c")
MAX_LINES = 80


FRAME = re.compile(r"^\s*#\d+ 0x[0-9a-f]+")
ALLOCATOR = re.compile(r"__interceptor_|asan_malloc_linux|libasan|libclang_rt")


def known_python_sqlite_leak(exe, text):
    """True when the report is only leaks allocated inside libsqlite3, in a
    python process (see the module doc)."""
    if not exe.startswith("python"):
        return False
    blocks = re.split(r"\n(?=(?:Direct|Indirect) leak of)", text)
    leaks = [b for b in blocks if re.match(r"(?:Direct|Indirect) leak of", b)]
    if not leaks or "ERROR: LeakSanitizer" not in text or "ERROR: AddressSanitizer" in text:
        return False
    for b in leaks:
        frames = [l for l in b.splitlines() if FRAME.match(l)]
        rest = [f for f in frames if not ALLOCATOR.search(f)]
        if not rest or not all("libsqlite3.so" in f for f in rest):
            return False
    return True


def classify(text):
    kinds = []
    for m in re.finditer(r"ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)[^\n]*", text):
        kinds.append(m.group(0).strip())
    for m in re.finditer(r"[^\n]*runtime error:[^\n]*", text):
        kinds.append(m.group(0).strip())
    return kinds


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    d = argv[1]
    names = sorted(os.listdir(d)) if os.path.isdir(d) else []
    bad = 0
    for name in names:
        path = os.path.join(d, name)
        with open(path, errors="replace") as f:
            text = f.read()
        if not text.strip():
            continue
        kinds = classify(text) or ["unrecognised sanitizer output"]
        parts = name.split(".")
        exe = parts[1] if len(parts) == 3 else ""
        if known_python_sqlite_leak(exe, text):
            print("note: %s: leak inside libsqlite3 in a python process (python's sqlite3 module "
                  "does not free a failed load_extension's message); not counted" % name)
            continue
        bad += 1
        ours = "involves redlock" if OURS.search(text) else "no redlock frame in it"
        print("SANITIZER REPORT %s (%s): %s" % (name, ours, "; ".join(kinds[:3])))
        lines = text.rstrip().splitlines()
        for line in lines[:MAX_LINES]:
            print("    " + line)
        if len(lines) > MAX_LINES:
            print("    ... (%d more lines in %s)" % (len(lines) - MAX_LINES, path))
    if bad:
        print("sanitizers: %d report(s) in %s" % (bad, d))
        return 1
    print("sanitizers: no reports")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
