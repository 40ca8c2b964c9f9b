# make bench: builds ./redlock.so, the bare hiredis baseline and the SQLite
# driver, then runs bench/run.py (which starts and stops its own redis-server
# nodes on free loopback ports and prints one table).
#   BENCH_SECONDS=1     seconds per throughput measurement
#   BENCH_ARGS=...    more options for bench/run.py (see --help)
# SPDX-License-Identifier: BSD-3-Clause

BENCH_BUILD  = build/bench
BENCH_CFLAGS = -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra $(if $(filter-out 0,$(WERROR)),-Werror) -Isrc
BENCH_SECONDS ?= 1

$(BENCH_BUILD)/bare: bench/bare.c bench/measure.h src/rl_evalsha.c src/rl_resp.c $(wildcard src/*.h)
	@mkdir -p $(BENCH_BUILD)
	$(CC) $(BENCH_CFLAGS) $(CPPFLAGS) $(LDFLAGS) -o $@ bench/bare.c src/rl_evalsha.c src/rl_resp.c -lhiredis -lcrypto -lpthread

$(BENCH_BUILD)/driver: bench/driver.c bench/measure.h
	@mkdir -p $(BENCH_BUILD)
	$(CC) $(BENCH_CFLAGS) $(CPPFLAGS) $(LDFLAGS) -o $@ bench/driver.c -lsqlite3 -lpthread

# The delay proxy of the latency rows (bench/delay.c).
$(BENCH_BUILD)/delay: bench/delay.c bench/measure.h
	@mkdir -p $(BENCH_BUILD)
	$(CC) $(BENCH_CFLAGS) $(CPPFLAGS) $(LDFLAGS) -o $@ bench/delay.c

# The LD_PRELOAD timer of the span from a reply to the next request (bench/gap.c).
$(BENCH_BUILD)/gap.so: bench/gap.c
	@mkdir -p $(BENCH_BUILD)
	$(CC) $(BENCH_CFLAGS) $(CPPFLAGS) $(LDFLAGS) -fPIC -shared -o $@ bench/gap.c -ldl

# A stand-in extension of one PING per call: SQLite's own share of that span (bench/floor.c).
$(BENCH_BUILD)/floor.so: bench/floor.c
	@mkdir -p $(BENCH_BUILD)
	$(CC) $(BENCH_CFLAGS) $(CPPFLAGS) $(LDFLAGS) -fPIC -shared -o $@ bench/floor.c

# The extension with its statistics compiled out: what they cost.
$(BENCH_BUILD)/redlock_nostats.so: $(ENGINE_SRC) $(EXT_SRC) $(HEADERS)
	@mkdir -p $(BENCH_BUILD)
	$(CC) $(RLFLAGS) $(CPPFLAGS) $(CFLAGS) $(LTOFLAGS) $(LDFLAGS) -DRL_STATS_OFF -shared -o $@ $(ENGINE_SRC) $(EXT_SRC) \
	  $(LIBS)

bench: ## measure against a bare hiredis client on local nodes
	@bash scripts/ensure-deps.sh
	@$(MAKE) -s redlock.so
	@$(MAKE) -s $(BENCH_BUILD)/bare $(BENCH_BUILD)/driver $(BENCH_BUILD)/delay $(BENCH_BUILD)/gap.so $(BENCH_BUILD)/floor.so $(BENCH_BUILD)/redlock_nostats.so
	@timeout -k 10 780 /usr/bin/python3 bench/run.py --build $(BENCH_BUILD) --seconds $(BENCH_SECONDS) $(BENCH_ARGS)
