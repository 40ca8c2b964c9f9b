"""The mutual-exclusion checker (checker.py) on 5 nodes with 6 worker
processes, for 3 seconds per scenario: the fast part of the fault matrix
(checker_matrix.py; `make checker` runs all of it for longer, `make
mutants` runs it against engines with deliberate bugs).

Holds are intervals [acquire returned, + reported validity] on the shared
monotonic clock, cut short by the release; they must not overlap, the
counter must lose no update, fencing numbers must rise in the order the
holds started and the protected resource must never accept a stale write.
Here: clean; kill -9 and restart (after the TTL) of a minority; SIGSTOP of
a minority; delayed replies; clients that SIGSTOP themselves past their TTL
(they must see the lock lost); slow client links (the validity must
account for the time an acquisition took); a majority of nodes whose
clocks jump forward (the documented limit: violations are seen, and the
fencing numbers reject every stale write); jobs of one transaction each
(redlock_acquire_xact, checker_xact.py) paused past their TTL right before
COMMIT (none of their writes may be committed). The negative controls run the
same checker with a deliberately broken lock (quorum forced to 1;
processes given disjoint node sets) and must report violations, which
shows the checker can fail.

Each run prints one summary line (also appended to $REDLOCK_FAULT_REPORT
when set)."""
# SPDX-License-Identifier: BSD-3-Clause

from harness import check
import checker
import checker_matrix as m

SECONDS = 3.0


def _expect(fn):
    def attempt(seconds):
        out = m.run_one(fn.__name__, fn, seconds)
        # 3 s instead of the matrix's 10, and maybe a sanitizer build: fewer holds
        out.min_acquisitions = min(out.min_acquisitions, 20)
        return out.problems(), out.res
    problems, res = checker.run_long_enough(attempt, SECONDS)
    check(not problems, "%s: %s\n%s" % (fn.__name__, "; ".join(problems), res.summary(fn.__name__)))
    return res


def test_checker_clean_5n():
    res = _expect(m.clean)
    # Without faults an error means every node of a quorum missed its 50 ms:
    # only a host starved of CPU does that now and then, so this is no speed
    # assertion, but a systematic failure trips it.
    check(res.errors * 10 <= res.acquisitions,
          "errors without faults: %d, e.g. %r" % (res.errors, res.error_samples))
    check(res.fences_checked == res.acquisitions, "every hold has a fencing number")


def test_checker_kill9_restart_after_ttl_5n():
    _expect(m.kill9_restart_after_ttl)


def test_checker_sigstop_cont_5n():
    _expect(m.sigstop_nodes)


def test_checker_delayed_replies_5n():
    _expect(m.delayed_replies)


def test_checker_client_paused_past_ttl_5n():
    res = _expect(m.client_pauses)
    check(res.paused >= 1 and res.loss_seen == res.paused,
          "paused holders that saw their loss: %d of %d" % (res.loss_seen, res.paused))


def test_checker_xact_jobs_paused_before_commit_5n():
    res = _expect(m.xact_client_pauses)
    check(res.paused >= 1 and res.refused >= res.paused,
          "every paused job's COMMIT refused: %d refused, %d paused" % (res.refused, res.paused))


def test_checker_slow_client_links_5n():
    _expect(m.slow_client_links)


def test_checker_clock_jumps_majority_5n():
    res = _expect(m.clock_jumps_majority)
    check(res.violations > 0,
          "keys expired early on a majority, yet the checker saw no violation: %s"
          % res.summary("clock_jumps_majority"))
    check(res.stale_rejected > 0 and res.stale_accepted == 0 and res.fence_disorder == 0,
          "the fencing numbers must reject the stale writes: %s" % res.summary("clock_jumps_majority"))


def test_checker_negative_quorum_1_5n():
    _expect(m.negative_quorum_1)


def test_checker_negative_disjoint_nodes_5n():
    _expect(m.negative_disjoint_nodes)
