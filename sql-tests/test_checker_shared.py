"""The shared-lock checker (checker_shared.py) on 5 nodes for 1.5 seconds per
scenario: shared and exclusive holders under SIGSTOP and kill -9 of a
minority (an exclusive holder is never beside another holder), holder
limits k = 2 and k = 3 under faults (never more than k shared holders at
once, and k reached), and the negative control: k = 2 counted with a
majority quorum lets more than k in, so the checker can fail. `make
checker` runs the same scenarios longer."""
# SPDX-License-Identifier: BSD-3-Clause

from harness import check
import checker
import checker_shared as cs

SECONDS = 1.5


def _expect(fn):
    def attempt(seconds):
        res, expect, done = fn(seconds)
        return cs.problems(res, expect, done), res
    p, res = checker.run_long_enough(attempt, SECONDS)
    check(not p, "%s: %s\n%s" % (fn.__name__, "; ".join(p), res.summary(fn.__name__)))
    return res


def test_checker_shared_exclusive_sigstop_5n():
    res = _expect(cs.mixed_sigstop)
    check(res.shared and res.exclusive, "both kinds were held: %s" % res.summary("mixed"))


def test_checker_shared_exclusive_kill9_5n():
    _expect(cs.mixed_kill9)


def test_checker_shared_limit_2_kill9_5n():
    _expect(cs.limit2_kill9)


def test_checker_shared_limit_3_sigstop_5n():
    _expect(cs.limit3_sigstop)


def test_checker_shared_negative_majority_5n():
    _expect(cs.negative_limit2_majority)
