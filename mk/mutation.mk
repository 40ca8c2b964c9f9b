# The mutual-exclusion checker's long runs. Included by the Makefile.
#
#   make checker    the whole fault matrix (sql-tests/checker_matrix.py): each
#                   fault for CHECKER_SECONDS (default 10) with 6 worker
#                   processes on 5 nodes; prints the table fault /
#                   acquisitions / violations / fences checked; fails when a
#                   scenario misses its expectation (handoff_partitions and
#                   partition_mid_*, real partitions in network namespaces,
#                   need root: a SKIP line says so otherwise). About 5
#                   minutes. Then the
#                   shared-lock scenarios (sql-tests/checker_shared.py): shared
#                   and exclusive holders and holder limits under faults; then
#                   the fair-queue scenarios (sql-tests/checker_fair.py): order
#                   inversions and the longest wait of fair waiters under faults.
#   make mutants    builds the engine with deliberate bugs in build/mutant-*/
#                   (sql-tests/mutants.py) and runs checker scenarios against
#                   each: every mutant must be caught, the unchanged baseline
#                   must pass. About 3 minutes.
#
# `make test` runs a few checker scenarios for a shorter time (test_checker.py).
# SPDX-License-Identifier: BSD-3-Clause

CHECKER_SECONDS ?= 10
MUTANT_SECONDS  ?= 5

.PHONY: checker mutants

checker: deps ## the checker's whole fault matrix, CHECKER_SECONDS per fault
	@$(MAKE) -s redlock.so
	@CHECKER_SECONDS=$(CHECKER_SECONDS) /usr/bin/python3 sql-tests/checker_matrix.py $(CHECKER_ARGS)
	@CHECKER_SECONDS=$(CHECKER_SECONDS) /usr/bin/python3 sql-tests/checker_shared.py
	@CHECKER_SECONDS=$(CHECKER_SECONDS) /usr/bin/python3 sql-tests/checker_fair.py

mutants: deps ## engines with deliberate bugs, each of which the checker must catch
	@$(MAKE) -s redlock.so
	@CC="$(CC)" MUTANT_FLAGS="$(RLFLAGS) $(CPPFLAGS) $(CFLAGS)" MUTANT_LIBS="$(LDFLAGS) $(LIBS)" MUTANT_SECONDS=$(MUTANT_SECONDS) \
	  /usr/bin/python3 sql-tests/mutants.py $(MUTANTS)
