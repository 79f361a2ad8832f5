# fuzz/fuzz.mk - libFuzzer targets, built with clang whatever CC configure chose.
#
#   make fuzz FUZZ_SECONDS=60              (from the top of a configured tree)
#   make -f fuzz/fuzz.mk run FUZZ_SECONDS=600 TARGETS=fuzz_dsl   (by hand)
#   make fuzz-corpus                       (minimize into fuzz/corpus/)
#
# SRC is the source tree, BUILD the configured tree holding config.h, OUT
# where binaries, corpora and crash files go. Each target runs for
# FUZZ_SECONDS on one core; the summary prints executions and crashes per
# target and the run fails if any target crashed. Corpora persist in
# $(OUT)/corpus so later runs continue where earlier ones stopped; the
# minimized corpus in $(SRC)/fuzz/corpus/TARGET (committed) is read by
# every run and rewritten only by "corpus". FUZZ_JOBS targets run at once.
HERE := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
SRC ?= $(abspath $(HERE)/..)
BUILD ?= $(SRC)
OUT ?= $(BUILD)/fuzz/out
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
TARGETS ?= fuzz_dsl fuzz_plan_json fuzz_api fuzz_dclient fuzz_bundle_index fuzz_listing fuzz_tar_read
CLANG ?= clang
PYTHON3 ?= python3

PKGS := jansson libcrypto libxxhash expat libarchive
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))
FUZZ_CFLAGS = -std=gnu11 -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wno-unused-parameter \
	-I$(BUILD) -I$(BUILD)/common -I$(SRC)/common $(addprefix -I$(SRC)/daemon/,core queue engine slurm api movers) $(PKG_CFLAGS)

# log.c hides URL queries in every message (urlredact.c); conf_keys.c reads
# OutboundAllow's networks (outbound.c).
LOG_SRCS = $(SRC)/common/log.c $(SRC)/common/urlredact.c
DSL_SRCS = $(SRC)/common/dsl.c $(SRC)/common/dsl_rules.c $(SRC)/common/dsl_json.c $(LOG_SRCS) \
	$(SRC)/common/dsl_expand.c $(SRC)/common/grow.c
API_SRCS = $(SRC)/daemon/api/api_decode.c $(DSL_SRCS)
DCLIENT_SRCS = $(SRC)/common/dclient.c $(SRC)/common/credbind.c $(SRC)/common/conf.c $(SRC)/common/conf_keys.c \
	$(SRC)/common/outbound.c $(LOG_SRCS) $(SRC)/common/grow.c
BUNDLE_SRCS = $(SRC)/common/bundle.c $(SRC)/common/checksum.c $(SRC)/common/evpguard.c $(SRC)/common/grow.c

all: $(addprefix $(OUT)/,$(TARGETS))

$(OUT)/fuzz_dsl: $(SRC)/fuzz/fuzz_dsl.c $(DSL_SRCS) $(SRC)/common/dsl.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_dsl.c $(DSL_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_plan_json: $(SRC)/fuzz/fuzz_plan_json.c $(DSL_SRCS) $(SRC)/common/dsl.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_plan_json.c $(DSL_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_api: $(SRC)/fuzz/fuzz_api.c $(API_SRCS) $(SRC)/daemon/api/api_decode.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_api.c $(API_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_dclient: $(SRC)/fuzz/fuzz_dclient.c $(DCLIENT_SRCS) $(SRC)/common/dclient.h $(BUILD)/config.h \
		$(BUILD)/common/conf_keys_tab.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_dclient.c $(DCLIENT_SRCS) $(PKG_LIBS) -lmunge -lpthread

$(OUT)/fuzz_bundle_index: $(SRC)/fuzz/fuzz_bundle_index.c $(BUNDLE_SRCS) $(SRC)/common/bundle.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_bundle_index.c $(BUNDLE_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_listing: $(SRC)/fuzz/fuzz_listing.c $(SRC)/daemon/engine/xfer_url_xml.c $(SRC)/daemon/engine/xfer_url_xml.h \
		$(SRC)/common/grow.c $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_listing.c $(SRC)/daemon/engine/xfer_url_xml.c \
		$(SRC)/common/grow.c $(PKG_LIBS)

$(OUT)/fuzz_tar_read: $(SRC)/fuzz/fuzz_tar_read.c $(SRC)/common/tar_read.c $(SRC)/common/tar.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_tar_read.c $(SRC)/common/tar_read.c $(PKG_LIBS)

# Seeds: the grammar vectors' scripts and plans, plus fuzz/seeds/api.
seeds: $(OUT)/seeds.stamp
$(OUT)/seeds.stamp: $(SRC)/fuzz/make-seeds $(wildcard $(SRC)/tests/vectors/*.json) \
		$(wildcard $(SRC)/fuzz/seeds/*/*)
	@mkdir -p $(OUT)
	$(PYTHON3) $(SRC)/fuzz/make-seeds $(SRC) $(OUT)/seeds
	@touch $@

# The Lua time-fuzzer (fuzz/fuzz_dsl_time.lua) runs after the libFuzzer
# targets whenever fuzz_dsl is one of them: FUZZ_SECONDS shared between the
# interpreters of LUA_FUZZ that are installed. A script over its CPU budget
# fails the run like a crash.
LUA_FUZZ ?= lua5.1 lua5.4
run: all seeds
	@rc=0; FUZZ_JOBS=$(FUZZ_JOBS) $(SRC)/fuzz/run-fuzz $(OUT) $(FUZZ_SECONDS) $(SRC)/fuzz $(TARGETS) || rc=1; \
	case " $(TARGETS) " in *" fuzz_dsl "*) \
		luas=; for l in $(LUA_FUZZ); do command -v $$l >/dev/null && luas="$$luas $$l"; done; \
		n=$$(echo $$luas | wc -w); \
		if [ $$n -eq 0 ]; then echo "fuzz_dsl_time: no Lua interpreter ($(LUA_FUZZ))"; rc=1; fi; \
		for l in $$luas; do \
			echo "fuzz: fuzz_dsl_time ($$l) for $$(( $(FUZZ_SECONDS) / n ))s"; \
			STAGEHAND_CONF=/dev/null $$l $(SRC)/fuzz/fuzz_dsl_time.lua --lua-dir $(SRC)/lua \
				--seconds $$(( $(FUZZ_SECONDS) / n )) --out $(OUT) || rc=1; \
		done;; \
	esac; exit $$rc

# Fold what runs found (OUT/corpus) into the corpus kept in the source tree,
# minimized with libFuzzer's -merge=1: the smallest set of inputs that keeps
# all the coverage of the kept corpus, the new inputs and the seeds.
corpus: all seeds
	@for t in $(TARGETS); do \
		rm -rf $(OUT)/merge/$$t && mkdir -p $(OUT)/merge/$$t $(OUT)/corpus/$$t $(SRC)/fuzz/corpus/$$t && \
		$(OUT)/$$t -merge=1 $(OUT)/merge/$$t $(SRC)/fuzz/corpus/$$t $(OUT)/corpus/$$t $(OUT)/seeds/$$t \
			>$(OUT)/$$t.merge.log 2>&1 || { tail -n 20 $(OUT)/$$t.merge.log; exit 1; }; \
		rm -rf $(SRC)/fuzz/corpus/$$t && mv $(OUT)/merge/$$t $(SRC)/fuzz/corpus/$$t && \
		echo "$$t: $$(ls $(SRC)/fuzz/corpus/$$t | wc -l) inputs kept in fuzz/corpus/$$t"; \
	done

clean:
	rm -rf $(OUT)

.PHONY: all seeds run corpus clean
