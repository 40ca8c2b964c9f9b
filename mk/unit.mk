# C unit tests of the engine's pure modules (unit/unit.c). Included by the
# Makefile; sql-tests/run.py runs `make unit` after the SQL tests, so its
# result is part of `make test` (and of `make test SANITIZE=1`, where the
# test binary is built with the sanitizers).
#   make unit             build and run build/unit/unit
# SPDX-License-Identifier: BSD-3-Clause

UNIT_ENGINE := src/rl_acl.c src/rl_clock.c src/rl_endpoint.c src/rl_error.c src/rl_evalsha.c src/rl_events.c \
               src/rl_floor.c src/rl_nameindex.c src/rl_proc.c src/rl_random.c src/rl_resp.c src/rl_text.c \
               src/rl_vote.c
# SAN_CC and SAN_FLAGS come from mk/hardening.mk: expanded when the recipe
# runs (=, not :=), so they are there whichever fragment make reads first.
UNIT_CC      = $(if $(filter 1,$(SANITIZE)),$(SAN_CC),$(CC))
UNIT_FLAGS   = $(if $(filter 1,$(SANITIZE)),$(SAN_FLAGS),-O1 -g)
UNIT_BIN    := build/unit/$(if $(filter 1,$(SANITIZE)),sanitize,plain)/unit

.PHONY: unit

$(UNIT_BIN): unit/unit.c $(UNIT_ENGINE) $(HEADERS) Makefile mk/unit.mk
	@mkdir -p $(@D)
	$(UNIT_CC) -std=c11 -D_GNU_SOURCE $(WARN) -Isrc $(CPPFLAGS) $(UNIT_FLAGS) $(LDFLAGS) -o $@ unit/unit.c $(UNIT_ENGINE) \
	  -lhiredis -lcrypto -lpthread

unit: $(UNIT_BIN) ## build and run the C unit tests (SANITIZE=1: sanitized)
	@$(UNIT_BIN)
