"""Regression tests for what an adversarial review of redlock_acquire_many
and redlock_release_many found.

A resources_json text with a NUL byte in it (possible when a program binds
text with an explicit length) was read by SQLite's JSON functions only up
to the NUL: acquire_many took the names before it, returned a token, and
silently left out the names after it, so the caller believed it held names
it did not. Such a text must be refused, like a name with a NUL in
redlock_acquire, and nothing may be set on any node.

An acquire_many that waited for a name held shared left no writer-waiting
marker, as redlock_acquire does, so a stream of overlapping shared holders
kept it out for as long as the stream lasted.

Run: /usr/bin/python3 sql-tests/run.py test_review_many
"""
# SPDX-License-Identifier: BSD-3-Clause

import json

import harness as h
from harness import eq, no_key, value
from harness import timeout_env as env


def test_raw_nul_in_resources_json_is_refused_3n():
    c = h.shared_cluster(3)
    con = h.connect(env(c))
    text = '["rnul:a"]\x00["rnul:b"]'
    h.redlock_error(con, "SELECT redlock_acquire_many(?, 10000)", text, contains=("NUL",))
    eq(value(con, "SELECT count(*) FROM redlock_locks"), 0, "no name listed after the refusal")
    h.settle(con)
    for k in ("rnul:a", "rnul:b"):
        no_key(c, k, "nothing taken by the refused call")
    # release_many reads its list the same way: the names after the NUL
    # must not be skipped without a word either
    h.redlock_error(con, "SELECT redlock_release_many(?)", text, contains=("NUL",))
    h.redlock_error(con, "SELECT redlock_release_many(?, ?)", text, "0" * 32, contains=("NUL",))


def test_waiting_acquire_many_not_starved_by_shared_holders_3n():
    """Shared workers overlap without a gap (one always holds the name); an
    acquire_many of that name and another, waiting 8 s, must still get in,
    and while it holds them no shared holder is in."""
    names = json.dumps(["stm:a", "stm:b"])
    h.check_not_starved_by_shared(
        env(h.shared_cluster(3)), "stm:a", lambda x: value(x, "SELECT redlock_acquire_many(?, 5000, 8000)", names),
        lambda x: eq(value(x, "SELECT redlock_release_many(?)", names), 2, "release"), "acquire_many")
