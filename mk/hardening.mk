# Hardening: sanitizers, valgrind, fuzzing. Included by the Makefile.
#
#   make test SANITIZE=1  the whole SQL suite against build/sanitize/redlock.so
#                         (ASan + UBSan), with the sanitizer runtime preloaded
#                         into /usr/bin/python3 and the sqlite3 shell; any
#                         sanitizer report fails the run
#   make valgrind         representative scenarios (contract, killed and
#                         stopped nodes, close with held locks, auth, bad
#                         input) in the sqlite3 shell under memcheck
#   make fuzz             each libFuzzer target (clang) for FUZZ_SECONDS
#                         (default 60); new crash inputs land in build/fuzz/
#   make fuzz-regress     replays every corpus file (seeds and kept crash
#                         inputs) through each target under ASan + UBSan,
#                         with $(CC) and no libFuzzer; quick, run by CI
#
# Reports of the sanitizer run are written to build/sanitize/logs/ and read
# by mk/hardening/sanitizer_logs.py, so a report from any process (a shell
# that was expected to fail, a worker) is seen, not only a failed test.
# SPDX-License-Identifier: BSD-3-Clause

HARDEN      := mk/hardening
SAN_DIR     := build/sanitize
SAN_FLAGS   := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
SAN_LOGS     = $(CURDIR)/$(SAN_DIR)/logs

# The sanitized build uses clang when there is one: its ASan runtime carries
# the UBSan handlers too, so one preloaded library writes every report to
# log_path. gcc splits them into libasan + libubsan, each with its own copy
# of the report machinery, and then UBSan reports go to stderr instead of
# the log directory (they still abort the process: -fno-sanitize-recover).
SAN_CC       = $(or $(shell command -v clang 2>/dev/null),$(CC))
SAN_IS_CLANG = $(shell $(SAN_CC) --version 2>/dev/null | grep -qi clang && echo 1)
SAN_SO       = $(SAN_DIR)/$(notdir $(SAN_CC))/redlock.so
SAN_PRELOAD  = $(if $(SAN_IS_CLANG),$(shell $(SAN_CC) -print-file-name=libclang_rt.asan-x86_64.so),$(shell $(SAN_CC) -print-file-name=libasan.so) $(shell $(SAN_CC) -print-file-name=libubsan.so))

SAN_ENV = LD_PRELOAD="$(SAN_PRELOAD)" \
  ASAN_OPTIONS="detect_leaks=1:verify_asan_link_order=0:detect_stack_use_after_return=1:check_initialization_order=1:log_exe_name=1:log_path=$(SAN_LOGS)/asan" \
  LSAN_OPTIONS="suppressions=$(CURDIR)/$(HARDEN)/lsan.supp:print_suppressions=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$(SAN_LOGS)/ubsan" \
  PYTHONMALLOC=malloc REDLOCK_SANITIZE=1 \
  REDLOCK_EXT="$(CURDIR)/$(SAN_SO:.so=)"

ifeq ($(SANITIZE),1)
all: $(SAN_SO)
endif

$(SAN_DIR)/%/redlock.so: $(ENGINE_SRC) $(EXT_SRC) $(HEADERS) Makefile mk/hardening.mk
	@mkdir -p $(@D)
	$(SAN_CC) $(RLFLAGS) $(CPPFLAGS) $(CFLAGS) $(SAN_FLAGS) $(LDFLAGS) -shared -o $@ $(ENGINE_SRC) $(EXT_SRC) $(LIBS)

.PHONY: sanitize-test sanitize-run valgrind fuzz fuzz-build fuzz-regress fuzz-seeds

# ./redlock.so is built too: one shell test loads ./redlock from the repo root.
sanitize-test: deps ## the SQL suite against an ASan+UBSan build (make test SANITIZE=1)
	@bash scripts/ensure-deps.sh clang libclang-rt-14-dev || true
	@$(MAKE) -s sanitize-run

sanitize-run: ## what sanitize-test runs once clang is there
	@$(MAKE) -s redlock.so $(SAN_SO)
	@for f in $(SAN_PRELOAD); do test -f "$$f" || { \
	  echo "redlock: sanitizer runtime '$$f' not found (gcc: apt-get install libasan8 libubsan1)" >&2; exit 1; }; done
	@rm -rf $(SAN_LOGS) && mkdir -p $(SAN_LOGS)
	@echo "redlock: sanitizer run: $(SAN_SO) with $(SAN_PRELOAD) preloaded"
	@rc=0; $(SAN_ENV) /usr/bin/python3 sql-tests/run.py $(TESTS) || rc=$$?; \
	  /usr/bin/python3 $(HARDEN)/sanitizer_logs.py $(SAN_LOGS) || rc=1; exit $$rc

# ---- valgrind ---------------------------------------------------------------

VALGRIND_FLAGS := --leak-check=full --errors-for-leak-kinds=definite,indirect --error-exitcode=1 \
                  --show-leak-kinds=definite,indirect --track-origins=yes --num-callers=30

valgrind: deps ## representative shell scenarios under valgrind memcheck
	@bash scripts/ensure-deps.sh valgrind
	@$(MAKE) -s redlock.so
	@VALGRIND_FLAGS="$(VALGRIND_FLAGS)" /usr/bin/python3 $(HARDEN)/valgrind_shell.py $(VALGRIND_TESTS)

# ---- fuzzing ----------------------------------------------------------------

FUZZ_TARGETS  := url reply conn nodes schema
FUZZ_SECONDS  ?= 60
FUZZ_CC       ?= clang
FUZZ_DIR      := build/fuzz
FUZZ_CFLAGS   := -std=c11 -D_GNU_SOURCE -DSQLITE_CORE -DREDLOCK_GUARD_HOOK $(WARN) -Isrc -Iext -g -O1 -fno-omit-frame-pointer
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=all
FUZZ_LIBS     := -Wl,--wrap=getaddrinfo -lsqlite3 $(LIBS)
FUZZ_DEPS     := $(ENGINE_SRC) $(EXT_SRC) $(HEADERS) $(wildcard fuzz/*.c fuzz/*.h) mk/hardening.mk
# fuzz_url, fuzz_reply and fuzz_conn need only the engine; fuzz_nodes and
# fuzz_schema the extension too (compiled with -DSQLITE_CORE, linked with
# libsqlite3; -DREDLOCK_GUARD_HOOK lets fuzz_schema see every call the
# schema guard lets through).
fuzz_srcs = fuzz/fuzz_$(1).c fuzz/no_dns.c $(ENGINE_SRC) $(if $(filter nodes schema,$(1)),$(EXT_SRC))

$(FUZZ_DIR)/fuzz_%: $(FUZZ_DEPS)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(CPPFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer $(LDFLAGS) -o $@ $(call fuzz_srcs,$*) $(FUZZ_LIBS)

$(FUZZ_DIR)/replay_%: $(FUZZ_DEPS)
	@mkdir -p $(@D)
	$(CC) $(FUZZ_CFLAGS) $(CPPFLAGS) $(FUZZ_SAN) $(LDFLAGS) -o $@ fuzz/replay_main.c $(call fuzz_srcs,$*) $(FUZZ_LIBS)

fuzz-build: deps ## build the libFuzzer targets (clang)
	@bash scripts/ensure-deps.sh clang libclang-rt-14-dev
	@echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n); int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; return (int)(n & 0); }' \
	  | $(FUZZ_CC) -x c -fsanitize=fuzzer -o /dev/null - 2>/dev/null || { \
	  echo "redlock: $(FUZZ_CC) cannot link libFuzzer; install clang and its runtime (Debian: libclang-rt-14-dev)" >&2; exit 1; }
	@$(MAKE) -s $(addprefix $(FUZZ_DIR)/fuzz_,$(FUZZ_TARGETS))

# Each target runs on a work copy of its corpus (build/fuzz/corpus/<t>), so
# the repository's corpus only changes by hand: a new crash input is fixed,
# then copied into fuzz/corpus/<t>/ as regress-<what> (see fuzz/README.md).
fuzz: fuzz-build ## run each libFuzzer target for FUZZ_SECONDS (default 60)
	@rc=0; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$t $(FUZZ_DIR)/crashes/$$t; \
	  echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(FUZZ_DIR)/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/crashes/$$t/ $$(test -f fuzz/dict/$$t.dict && echo -dict=fuzz/dict/$$t.dict) \
	    $(FUZZ_DIR)/corpus/$$t fuzz/corpus/$$t > $(FUZZ_DIR)/fuzz_$$t.log 2>&1 || rc=1; \
	  grep -a -E '^stat::(number_of_executed_units|new_units_added)' $(FUZZ_DIR)/fuzz_$$t.log; \
	  grep -a -E 'ERROR:|runtime error|fuzz invariant' $(FUZZ_DIR)/fuzz_$$t.log | head -5; \
	  ls $(FUZZ_DIR)/crashes/$$t/ 2>/dev/null | sed 's|^|   crash input: $(FUZZ_DIR)/crashes/'$$t'/|'; \
	done; \
	if [ $$rc = 0 ]; then echo "fuzz: no findings"; else echo "fuzz: FINDINGS (logs in $(FUZZ_DIR)/fuzz_<target>.log)"; fi; exit $$rc

fuzz-regress: deps ## replay the fuzz corpus under ASan+UBSan, without libFuzzer
	@$(MAKE) -s $(addprefix $(FUZZ_DIR)/replay_,$(FUZZ_TARGETS))
	@for t in $(FUZZ_TARGETS); do \
	  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  $(FUZZ_DIR)/replay_$$t fuzz/corpus/$$t || { echo "fuzz-regress: replay_$$t failed" >&2; exit 1; }; done

fuzz-seeds: ## write the fuzz corpus seeds again (fuzz/make_seeds.py)
	@/usr/bin/python3 fuzz/make_seeds.py
