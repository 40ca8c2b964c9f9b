"""The mutual-exclusion checker for several names at once
(checker_many.py) on 5 nodes with 6 worker processes: overlapping sets of 2
or 3 names out of 5, taken with redlock_acquire_many, while one node is
killed -9 (and restarted after the TTL) and another is SIGSTOPped, in turn;
per name, no two holds may overlap, no counter update may be lost, fencing
numbers must rise and no stale write be accepted. The negative control
(quorum forced to 1) must report violations, which shows the checker can
fail. `make checker` runs these and more for longer."""
# SPDX-License-Identifier: BSD-3-Clause

from harness import check
import checker
import checker_matrix as m


def _expect(fn, seconds, least):
    def attempt(secs):
        out = m.run_one(fn.__name__, fn, secs)
        out.min_acquisitions = min(out.min_acquisitions, least)
        return out.problems(), out.res
    problems, res = checker.run_long_enough(attempt, seconds)
    check(not problems, "%s: %s\n%s" % (fn.__name__, "; ".join(problems), res.summary(fn.__name__)))
    return res


def test_checker_many_kills_and_pauses_5n():
    res = _expect(m.many_kills_and_pauses, 2.5, 20)
    check(res.fences_checked == res.acquisitions, "every name of every set has a fencing number")


def test_checker_many_negative_quorum_1_5n():
    _expect(m.many_negative_quorum_1, 1.5, 0)
