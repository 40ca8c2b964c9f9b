# redlock: a SQLite loadable extension for Redlock distributed locks.
#   make          build ./redlock.so
#   make check    the unit tests and a 1-node subset of the SQL tests (< 1 min)
#   make test     install missing packages (as root), build, run every test
#   make demo     run the example batch job on three local Redis nodes
#   make help     every target, one line each: the `## ` comment on its rule
#                 line (here and in mk/*.mk), which a new target gets too
# SPDX-License-Identifier: BSD-3-Clause

CC      ?= cc
CFLAGS  ?= -O2 -g
# CPPFLAGS and LDFLAGS (empty here) are the packager's: every compile takes
# CPPFLAGS after the project's own -I and -D, every link LDFLAGS before the
# sources, as in make's own rules (Debian: dpkg-buildflags).
# Link-time optimisation for ./redlock.so: the engine's small functions are
# inlined across files (5% fewer instructions per lock cycle, see bench/).
# `make LTOFLAGS=` builds without it.
LTOFLAGS ?= -flto=auto
# Warnings are errors here (WERROR=1); `make WERROR=0` leaves them warnings,
# for a compiler newer than the ones the code is checked with, which may
# warn where they do not, and a packager's build that should not stop there.
WERROR  ?= 1
WARN     = -Wall -Wextra $(if $(filter-out 0,$(WERROR)),-Werror) -Wshadow -Wstrict-prototypes \
           -Wmissing-prototypes
RLFLAGS  = -std=c11 -D_GNU_SOURCE -fPIC -fvisibility=hidden $(WARN) -Isrc
# -z nodelete: SQLite unloads an extension with the last connection that
# loaded it, and a host that opens, loads and closes per request would map
# the library (and the memory its statics set up once) afresh each time;
# kept loaded, a new load finds everything as it was. Destructors that
# unmapped that memory instead would race threads still running at exit.
LIBS     = -lhiredis -lssl -lcrypto -lpthread -Wl,-z,nodelete

# SANITIZE=1: `make test` runs the suite against build/sanitize/redlock.so
# (ASan + UBSan, see mk/hardening.mk); ./redlock.so stays a normal build.

ENGINE_SRC = $(sort $(wildcard src/*.c))
EXT_SRC    = $(sort $(wildcard ext/*.c))
HEADERS    = $(wildcard src/*.h ext/*.h)

.PHONY: all deps check test demo bench clean help

all: redlock.so ## build ./redlock.so (the default target)

redlock.so: $(ENGINE_SRC) $(EXT_SRC) $(HEADERS) Makefile ## the extension (what all builds)
	$(CC) $(RLFLAGS) $(CPPFLAGS) $(CFLAGS) $(LTOFLAGS) $(LDFLAGS) -shared -o $@ \
	  $(ENGINE_SRC) $(EXT_SRC) $(LIBS)

deps: ## install the missing Debian packages (as root), or name them
	@bash scripts/ensure-deps.sh

test: deps ## build, then every test: SQL suite and unit (SANITIZE=1: ASan+UBSan)
ifeq ($(SANITIZE),1)
	@$(MAKE) -s sanitize-test
else
	@$(MAKE) -s redlock.so
	@/usr/bin/python3 sql-tests/run.py $(TESTS)
endif

# The edit-test loop, under a minute: the C unit tests, then the SQL tests
# sql-tests/check.txt lists (one node; the most coverage per second; see
# there). SANITIZE=1: both against the ASan + UBSan builds.
check: deps ## unit tests and a 1-node subset of the SQL tests, under a minute
ifeq ($(SANITIZE),1)
	@$(MAKE) -s unit SANITIZE=1
	@$(MAKE) -s sanitize-test TESTS='--from sql-tests/check.txt'
else
	@$(MAKE) -s redlock.so
	@$(MAKE) -s unit
	@/usr/bin/python3 sql-tests/run.py --from sql-tests/check.txt
endif

demo: deps ## run the example batch job on three local Redis nodes
	@$(MAKE) -s redlock.so
	@bash examples/demo.sh

clean: ## remove ./redlock.so and build/
	rm -f redlock.so
	rm -rf build

help: ## this list: every target, one line each
	@awk '/^[A-Za-z0-9_.-]+:.*## / { t = $$0; sub(/:.*/, "", t); d = $$0; sub(/^[^#]*## /, "", d); \
	  printf "  %-14s %s\n", t, d }' $(MAKEFILE_LIST)
	@echo "Variables (docs/getting-started.md, docs/testing.md): CC CFLAGS CPPFLAGS LDFLAGS" \
	  "LTOFLAGS WERROR SANITIZE TESTS DESTDIR PREFIX LIBDIR"

# Further targets live in fragments of their own, read in this order (the
# order `make help` lists them in): installing and packaging; the C unit
# tests; sanitizers, valgrind and fuzzing; ThreadSanitizer; the checker and
# mutants; the soak; the bench. A fragment uses the variables above and, at
# most, another's when a recipe runs (mk/unit.mk: the sanitizer's compiler
# from mk/hardening.mk), never while it is read, so the order is for the
# reader. A fragment renamed or missing stops make; a new one is added here.
MK_FRAGMENTS = mk/install.mk mk/unit.mk mk/hardening.mk mk/tsan.mk mk/mutation.mk mk/soak.mk \
               mk/bench.mk
include $(MK_FRAGMENTS)
