"""Docs that cannot drift (see docs/testing.md#doc-tests).

The reference check asks the loaded extension for every SQL function
(pragma_function_list), every table and its columns, hidden ones included
(pragma_module_list, pragma_table_xinfo), and every setting (the list that
redlock_config gives for an unknown name), and fails with the names that
docs/reference.md does not document.

The doc tests run every ```sql block of README.md and docs/ in the real
sqlite3 shell (-bail) against real redis-server nodes, and fail with the
file and line of each block that raised an error. A block runs alone, in
its own shell, on a copy of a small database with the tables the examples
use (FIXTURE below), with REDLOCK_NODES set to three local nodes. Its own
`.load` lines are dropped (the harness loads the build under test), and the
example hosts 10.0.0.1 to 10.0.0.5 on port 6379 are replaced by the local
nodes. A block that cannot run alone carries the comment
`<!-- doctest: skip: <why> -->` on the line before its opening fence.
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import re
import shutil
import sqlite3
import tempfile

import harness as h
from harness import check

# not a timing test: a slow node on a loaded machine must not fail it
h.default_config(timeout_ms=h.RELAXED_TIMEOUT_MS)

DOCS = os.path.join(h.REPO, "docs")
REFERENCE = os.path.join(DOCS, "reference.md")
SKIP = re.compile(r"^<!-- doctest: skip: .+ -->$")

# The tables the examples read and write, with a few rows.
FIXTURE = """
CREATE TABLE orders(id INTEGER PRIMARY KEY, day TEXT, amount_cents INTEGER,
                    reported INTEGER NOT NULL DEFAULT 0);
INSERT INTO orders(day, amount_cents) VALUES ('2025-03-01', 1250), ('2025-03-02', 990);
CREATE TABLE daily_report(day TEXT PRIMARY KEY, orders INTEGER, revenue_cents INTEGER,
                          built_by TEXT);
CREATE TABLE jobs(id INTEGER PRIMARY KEY, name TEXT, due INTEGER, done INTEGER DEFAULT 0);
INSERT INTO jobs(name, due) VALUES ('invoices', 1), ('payments', 1), ('ledger', 0);
CREATE TABLE fences(name TEXT PRIMARY KEY, last_fence INTEGER NOT NULL);
INSERT INTO fences VALUES ('nightly-report', 0);
CREATE TABLE batch(day TEXT, total INTEGER);
INSERT INTO batch VALUES ('2025-03-01', 2240);
CREATE TABLE results(day TEXT, total INTEGER);
"""


def doc_files():
    """README.md and every .md file under docs/, in a stable order."""
    out = [os.path.join(h.REPO, "README.md")]
    for d, dirs, files in os.walk(DOCS):
        dirs.sort()
        out += [os.path.join(d, f) for f in sorted(files) if f.endswith(".md")]
    return out


def sql_blocks(path):
    """(line of the opening fence, text, skipped) for each ```sql block."""
    with open(path) as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, lang, start = fence.group(1), fence.group(2), i
        i += 1
        body = []
        while i < len(lines) and not lines[i].strip().startswith("```"):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        if lang == "sql":
            skipped = start > 0 and SKIP.match(lines[start - 1].strip()) is not None
            blocks.append((start + 1, "\n".join(body), skipped))
    return blocks


def rel(path):
    return os.path.relpath(path, h.REPO)


# --------------------------------------------------------------------------
# the reference names every SQL name
# --------------------------------------------------------------------------

def _reference():
    with open(REFERENCE) as f:
        return f.read()


def _sections(text):
    """Heading text -> the text under it, for the ## sections."""
    parts = re.split(r"^## (.*)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _live_names():
    con = h.connect(None)
    functions = sorted({r[0] for r in con.execute(
        "SELECT name FROM pragma_function_list WHERE name LIKE 'redlock\\_%' ESCAPE '\\'")})
    tables = sorted(r[0] for r in con.execute(
        "SELECT name FROM pragma_module_list WHERE name LIKE 'redlock\\_%' ESCAPE '\\'"))
    columns = {t: [r[0] for r in con.execute("SELECT name FROM pragma_table_xinfo(?)", (t,))]
               for t in tables}
    try:
        con.execute("SELECT redlock_config('no such setting')")
        raise AssertionError("redlock_config took an unknown name")
    except sqlite3.OperationalError as e:
        listed = str(e).partition("the settings are: ")[2]
    check(listed, "redlock_config's error for an unknown name lists the settings")
    settings = [s.strip() for s in listed.split(",")]
    con.close()
    return functions, tables, columns, settings


def test_every_sql_name_is_in_the_reference():
    functions, tables, columns, settings = _live_names()
    check(len(functions) >= 10 and len(tables) >= 4 and len(settings) >= 10,
          "the extension lists its names: %r %r %r" % (functions, tables, settings))
    ref = _reference()
    sections = _sections(ref)
    missing = []
    for f in functions:
        if not any(re.match(r"`%s\(" % f, title) for title in sections):
            missing.append("function %s (a '## `%s(...)`' section)" % (f, f))
    for t in tables:
        body = sections.get("Table `%s`" % t)
        if body is None:
            missing.append("table %s (a '## Table `%s`' section)" % (t, t))
            continue
        for c in columns[t]:
            if not re.search(r"`%s`" % re.escape(c), body):
                missing.append("column %s.%s" % (t, c))
    settings_table = sections.get("Settings", "")
    for s in settings:
        if not re.search(r"^\| `%s` \|" % re.escape(s), settings_table, flags=re.M):
            missing.append("setting %s (a row of the Settings table)" % s)
    check(not missing, "docs/reference.md does not document: " + "; ".join(missing))


def test_settings_listed_by_the_extension_are_the_settings_table():
    """The list in redlock_config's error is the table src/rl_settings.c
    holds, so the check above sees every setting."""
    with open(os.path.join(h.REPO, "src", "rl_settings.c")) as f:
        source = re.findall(r'^\s*\{"([a-z_]+)", RL_SETTING_', f.read(), flags=re.M)
    check(sorted(source) == sorted(_live_names()[3]),
          "settings in src/rl_settings.c %r and listed by redlock_config differ" % source)


# --------------------------------------------------------------------------
# every SQL example runs
# --------------------------------------------------------------------------

def _prepare(sql, cluster):
    """The block as the shell gets it: no .load of its own, example hosts
    pointed at the local nodes."""
    lines = ["" if re.match(r"^\s*\.load\b", l) else l for l in sql.split("\n")]
    sql = "\n".join(lines)
    for i, node in enumerate(cluster.nodes, 1):
        sql = sql.replace("'10.0.0.%d', 6379" % i, "'127.0.0.1', %d" % node.port)
        sql = sql.replace("10.0.0.%d:6379" % i, "127.0.0.1:%d" % node.port)
    return sql


def _failing_line(fence_line, err):
    """The file's line of the statement the shell names ("near line N"),
    counted past what the harness puts before the block; else the fence."""
    m = re.search(r"near line (\d+)", err)
    cfg = h._test_config({}, False)
    before = 1 + (len(cfg) + 2 if cfg else 0)         # .load, then the settings
    if m and int(m.group(1)) > before:
        return fence_line + int(m.group(1)) - before
    return fence_line


def test_every_sql_example_runs():
    c = h.shared_cluster(3)
    broken, ran, skipped = [], 0, 0
    with tempfile.TemporaryDirectory() as d:
        fixture = os.path.join(d, "fixture.db")
        con = sqlite3.connect(fixture)
        con.executescript(FIXTURE)
        con.close()
        db = os.path.join(d, "shop.db")
        for path in doc_files():
            for line, sql, skip in sql_blocks(path):
                if skip:
                    skipped += 1
                    continue
                shutil.copyfile(fixture, db)
                c.flushall()
                rc, out, err = h.shell(_prepare(sql, c), c, args=["-bail"], db=db, cwd=d)
                ran += 1
                if rc != 0 or err.strip():
                    broken.append("%s:%d: %s" % (rel(path), _failing_line(line, err),
                                                 (err.strip() or "exit %d" % rc)[:300]))
    check(ran >= 20, "ran %d SQL blocks (skipped %d): the docs have more" % (ran, skipped))
    check(skipped * 5 <= ran, "%d of %d SQL blocks skipped: keep skips few" % (skipped, ran + skipped))
    check(not broken, "SQL examples that fail:\n  " + "\n  ".join(broken))


def test_every_skip_marker_is_on_a_sql_block():
    """A marker that lost its block (moved, or put before another kind of
    block) would hide nothing but mislead the reader."""
    stray = []
    for path in doc_files():
        with open(path) as f:
            lines = f.read().split("\n")
        fenced = False
        for i, l in enumerate(lines):
            if l.strip().startswith("```"):
                fenced = not fenced
            if not fenced and l.strip().startswith("<!-- doctest:"):
                nxt = lines[i + 1] if i + 1 < len(lines) else ""
                if not SKIP.match(l.strip()) or not nxt.strip().startswith("```sql"):
                    stray.append("%s:%d" % (rel(path), i + 1))
    check(not stray, "doctest markers not right before a ```sql block (or malformed): "
          + ", ".join(stray))


if __name__ == "__main__":
    import sys
    sys.exit(h.run_directly(globals()))
