# ThreadSanitizer: the extension built with -fsanitize=thread, loaded into
# a small C driver (tsan/tsan.c, also built with it, linked with the system
# libsqlite3) that runs the keeper, waiting acquires and their wake-up on
# release, and closes, from many threads: one connection each, then several
# sharing one serialized connection. Any report fails (tsan/run.py). The
# driver is needed because the TSan runtime, unlike ASan's, cannot be
# preloaded into /usr/bin/python3 or the sqlite3 shell.
#   make tsan             build and run (TSAN_SECONDS per part, default 8)
# SPDX-License-Identifier: BSD-3-Clause

TSAN_DIR     := build/tsan
TSAN_CC       = $(or $(shell command -v clang 2>/dev/null),$(CC))
TSAN_FLAGS   := -O1 -g -fsanitize=thread -fno-omit-frame-pointer
TSAN_SECONDS ?= 8

.PHONY: tsan

$(TSAN_DIR)/redlock.so: $(ENGINE_SRC) $(EXT_SRC) $(HEADERS) Makefile mk/tsan.mk
	@mkdir -p $(@D)
	$(TSAN_CC) $(RLFLAGS) $(CPPFLAGS) $(TSAN_FLAGS) $(LDFLAGS) -shared -o $@ $(ENGINE_SRC) $(EXT_SRC) $(LIBS)

$(TSAN_DIR)/tsan: tsan/tsan.c mk/tsan.mk
	@mkdir -p $(@D)
	$(TSAN_CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CPPFLAGS) $(TSAN_FLAGS) $(LDFLAGS) -o $@ tsan/tsan.c -lsqlite3 -lpthread

tsan: deps ## the extension under ThreadSanitizer from many threads
	@$(MAKE) -s $(TSAN_DIR)/redlock.so $(TSAN_DIR)/tsan
	@/usr/bin/python3 tsan/run.py $(TSAN_DIR) $(TSAN_SECONDS)
