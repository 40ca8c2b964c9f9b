# The long run: the mutual-exclusion checker for minutes under random
# faults (kill -9 and restart, SIGSTOP and SIGCONT), with the workers' RSS
# and open file descriptors sampled (sql-tests/soak.py). Not run by CI.
#   make soak                  10 minutes
#   make soak SOAK_SECONDS=60  shorter
# SPDX-License-Identifier: BSD-3-Clause

SOAK_SECONDS ?= 600

.PHONY: soak

soak: deps ## the checker for SOAK_SECONDS (600) under random faults
	@$(MAKE) -s redlock.so
	@SOAK_SECONDS=$(SOAK_SECONDS) /usr/bin/python3 sql-tests/soak.py
