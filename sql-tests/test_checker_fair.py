"""The fair-queue checker (checker_fair.py) on 5 nodes for 1.5 seconds per
scenario: fair waiters under kill -9 and restart of a minority and under
SIGSTOP of one are never two holders at once and keep their arrival order
(order inversions within the checker's allowance), and the negative
control: the same waiters with fair 0 break the order, so the order check
can fail. `make checker` runs the scenarios longer; mutants.py runs them
against a build whose waiters ignore the head of the queue."""
# SPDX-License-Identifier: BSD-3-Clause

from harness import check
import checker
import checker_fair as cf

SECONDS = 1.5


def _expect(fn):
    def attempt(seconds):
        res, expect, done = fn(seconds)
        return cf.problems(res, expect, done), res
    p, res = checker.run_long_enough(attempt, SECONDS)
    check(not p, "%s: %s\n%s" % (fn.__name__, "; ".join(p), res.summary(fn.__name__)))
    return res


def test_checker_fair_kill9_restart_5n():
    _expect(cf.fair_kill9_restart)


def test_checker_fair_shared_sigstop_5n():
    _expect(cf.fair_shared_sigstop)


def test_checker_fair_negative_not_fair_5n():
    _expect(cf.negative_not_fair)
