"""The shape of the C code, derived from the sources themselves.

A module is a header src/rl_NAME.h (or ext/NAME.h) with the .c files whose
name starts with its stem (rl_session_keeper.c belongs to rl_session). An
edge A -> B means a file of A includes B's header or calls a function B
defines. The tests check that:

* the engine's module graph has no cycle (dependencies point one way);
* every engine function a header declares is defined in that module's files
  and named with the module's prefix (or a type it defines);
* the binding (ext/) includes only the engine's public headers, opens no
  socket and reads no field of the engine's structs it is not given as a
  copy (views and snapshots);
* the binding includes only engine headers, never the other way round.

Run on its own (python3 sql-tests/test_module_graph.py [ROOT]) it prints the
graph, so ARCHITECTURE.md's module list can be checked against it.
"""
# SPDX-License-Identifier: BSD-3-Clause

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# What the binding may include: the engine's entry points and the plain
# data types they take. Everything else (rounds, nodes, connections, votes,
# fencing, waiting, the wire) is the engine's own business.
PUBLIC_ENGINE_HEADERS = {
    "rl_session.h", "rl_client.h", "rl_lock.h", "rl_settings.h", "rl_endpoint.h",
    "rl_text.h", "rl_random.h", "rl_error.h",
    "rl_stats.h",  # the counters' plain types, and the percentiles of a copy of them
    "rl_fleet.h",  # the read of every node's locks and waiters, into rows of plain data
}

# Engine struct fields the binding must not read: it asks the engine
# (rl_session_client, rl_session_validity, ...) instead.
FORBIDDEN_EXT_FIELDS = re.compile(r"->\s*(client|nheld|capheld|held|cancel|cancel_ctx|recent_fenced)\b|->\s*set\.|\bsession->")

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a function definition: a line at column 0 with a name, "(", no ";" before "{"
DEFINITION = re.compile(r"^[A-Za-z_][\w \*]*?\b(rl_\w+|redlock_\w+)\s*\(([^;{]*?)\)\s*\{", re.M | re.S)
DECLARATION = re.compile(r"^[A-Za-z_][\w \*]*?\b(rl_\w+|redlock_\w+)\s*\([^;{]*?\)\s*(?:__attribute__\(\(.*?\)\)\s*)?;",
                         re.M | re.S)
CALL = re.compile(r"\b(rl_\w+|redlock_\w+)\s*\(")


def _strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return _strip_comments(f.read())


class Graph:
    def __init__(self, root):
        self.root = root
        self.files = {}      # "src/rl_x.c" -> text
        for d in ("src", "ext"):
            for f in sorted(os.listdir(os.path.join(root, d))):
                if f.endswith((".c", ".h")):
                    self.files[d + "/" + f] = _read(os.path.join(root, d, f))
        self.headers = {p for p in self.files if p.endswith(".h")}
        self.defined = {}    # function -> module
        for p, text in self.files.items():
            if p.endswith(".c"):
                for m in DEFINITION.finditer(text):
                    self.defined.setdefault(m.group(1), self.module_of(p))

    def module_of(self, path):
        """The module a file belongs to: its header's stem, else the longest
        header stem its name starts with."""
        d, f = path.split("/")
        stem = f.rsplit(".", 1)[0]
        best = None
        for h in self.headers:
            hd, hf = h.split("/")
            hs = hf[:-2]
            if hd == d and (stem == hs or stem.startswith(hs + "_")) and (best is None or len(hs) > len(best)):
                best = hs
        return d + "/" + (best or stem)

    def edges(self, area=None):
        """module -> {module: why} over the files of area ("src", "ext" or both)."""
        out = {}
        for p, text in self.files.items():
            if area and not p.startswith(area + "/"):
                continue
            a = self.module_of(p)
            deps = out.setdefault(a, {})
            for inc in INCLUDE.findall(text):
                for h in (p.split("/")[0] + "/" + inc, "src/" + inc, "ext/" + inc):
                    if h in self.headers:
                        b = self.module_of(h)
                        if b != a:
                            deps.setdefault(b, "%s includes %s" % (p, inc))
                        break
            if p.endswith(".c"):
                for name in CALL.findall(text):
                    b = self.defined.get(name)
                    if b and b != a:
                        deps.setdefault(b, "%s calls %s" % (p, name))
        return out

    def cycle(self, edges):
        """A cycle as a list of (module, why) steps, or None."""
        state, stack = {}, []

        def visit(m):
            state[m] = 1
            for n, why in sorted(edges.get(m, {}).items()):
                stack.append((m, n, why))
                if state.get(n) == 1:
                    start = next(i for i, s in enumerate(stack) if s[0] == n)
                    return stack[start:]
                if not state.get(n):
                    found = visit(n)
                    if found:
                        return found
                stack.pop()
            state[m] = 2
            return None

        for m in sorted(edges):
            if not state.get(m):
                found = visit(m)
                if found:
                    return found
        return None


def _describe(cyc):
    return "; ".join("%s -> %s (%s)" % step for step in cyc)


def check_no_cycle(root):
    g = Graph(root)
    cyc = g.cycle(g.edges())
    if cyc:
        raise AssertionError("the module graph has a cycle: " + _describe(cyc))


def check_declared_where_defined(root):
    g = Graph(root)
    wrong = []
    for h in sorted(g.headers):
        mod = g.module_of(h)
        for name in DECLARATION.findall(g.files[h]):
            where = g.defined.get(name)
            if where != mod:
                wrong.append("%s declared in %s but defined in %s" % (name, h, where or "no file"))
    if wrong:
        raise AssertionError("functions not defined in their header's module: " + "; ".join(wrong))


# Names that do not start with their module's prefix, and why: the clock's
# and the token's are the most called of the engine, kept short; the RESP
# reader is hiredis's redisReader, made by rl_resp.
PREFIX_EXCEPTIONS = {"rl_now_us", "rl_sleep_us", "rl_token_new", "rl_reader_new", "rl_reader_free",
                     "rl_reader_too_big"}
TYPEDEF = re.compile(r"\}\s*(rl_\w+)\s*;")


def check_prefixes(root):
    """Every function an engine header declares is named rl_<module>_...,
    or after a type that header defines (rl_buf_free in rl_resp.h)."""
    g = Graph(root)
    wrong = []
    for h in sorted(g.headers):
        if not h.startswith("src/"):
            continue
        stem = h.split("/")[1][:-2]
        prefixes = [stem + "_", stem.rstrip("s") + "_"] + [t + "_" for t in TYPEDEF.findall(g.files[h])]
        for name in DECLARATION.findall(g.files[h]):
            if name not in PREFIX_EXCEPTIONS and not any(name.startswith(p) for p in prefixes):
                wrong.append("%s in %s" % (name, h))
    if wrong:
        raise AssertionError("functions without their module's prefix: " + "; ".join(wrong))


def check_binding_uses_engine_api(root):
    g = Graph(root)
    bad = []
    for p, text in sorted(g.files.items()):
        if not p.startswith("ext/"):
            continue
        for inc in INCLUDE.findall(text):
            if ("src/" + inc) in g.headers and inc not in PUBLIC_ENGINE_HEADERS:
                bad.append("%s includes the engine-internal %s" % (p, inc))
        for m in FORBIDDEN_EXT_FIELDS.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            bad.append("%s:%d reads an engine struct field (%s)" % (p, line, m.group(0).strip()))
        for word in ("socket(", "connect(", "poll(", "redisConnect"):
            if re.search(r"\b" + re.escape(word), text):
                bad.append("%s calls %s...)" % (p, word))
    for p, text in g.files.items():
        if p.startswith("src/"):
            for inc in INCLUDE.findall(text):
                if ("ext/" + inc) in g.headers or "sqlite3" in inc:
                    bad.append("%s (engine) includes %s" % (p, inc))
    if bad:
        raise AssertionError("the binding goes past the engine's API: " + "; ".join(bad))


def test_engine_module_graph_has_no_cycle():
    check_no_cycle(REPO)


def test_engine_functions_defined_in_their_modules():
    check_declared_where_defined(REPO)


def test_engine_functions_carry_their_module_prefix():
    check_prefixes(REPO)


def test_binding_calls_engine_functions_only():
    check_binding_uses_engine_api(REPO)


def test_checks_catch_a_cycle_and_a_reach_into_the_engine():
    """The checks themselves can fail: a copy of the tree with a back-call
    added, and one with ext/ including the round header."""
    import shutil
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        for d in ("src", "ext"):
            shutil.copytree(os.path.join(REPO, d), os.path.join(tmp, d))
        with open(os.path.join(tmp, "src", "rl_clock.c"), "a") as f:
            f.write('\n#include "rl_session.h"\nvoid rl_clock_probe(void);\n'
                    'void rl_clock_probe(void) { rl_session_free(0); }\n')
        with open(os.path.join(tmp, "ext", "redlock_locks.c"), "a") as f:
            f.write('\n#include "rl_round.h"\n')
        for fn, what in ((check_no_cycle, "cycle"), (check_binding_uses_engine_api, "rl_round.h")):
            try:
                fn(tmp)
            except AssertionError as e:
                if what not in str(e):
                    raise AssertionError("%s failed for another reason: %s" % (fn.__name__, e))
            else:
                raise AssertionError("%s did not notice the planted %s" % (fn.__name__, what))


def main(argv):
    root = argv[1] if len(argv) > 1 else REPO
    g = Graph(root)
    for area in ("src", "ext"):
        for m, deps in sorted(g.edges(area).items()):
            print("%-22s -> %s" % (m, " ".join(sorted(d.split("/")[1] for d in deps))))
    rc = 0
    for fn in (check_no_cycle, check_declared_where_defined, check_prefixes, check_binding_uses_engine_api):
        try:
            fn(root)
        except AssertionError as e:
            print("FAIL %s: %s" % (fn.__name__, e))
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
