# fuzz/fuzz.mk - libFuzzer targets, built with clang whatever CC configure chose.
#
#   make fuzz FUZZ_SECONDS=60              (from the top of a configured tree)
#   make -f fuzz/fuzz.mk run FUZZ_SECONDS=600 TARGETS=fuzz_dsl   (by hand)
#
# SRC is the source tree, BUILD the configured tree holding config.h, OUT
# where binaries, corpora and crash files go. Each target runs for
# FUZZ_SECONDS on one core; the summary prints executions and crashes per
# target and the run fails if any target crashed. Corpora persist in
# $(OUT)/corpus so later runs continue where earlier ones stopped.
HERE := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
SRC ?= $(abspath $(HERE)/..)
BUILD ?= $(SRC)
OUT ?= $(BUILD)/fuzz/out
FUZZ_SECONDS ?= 60
TARGETS ?= fuzz_dsl fuzz_plan_json fuzz_api fuzz_dclient fuzz_bundle_index fuzz_listing fuzz_tar_read
CLANG ?= clang
PYTHON3 ?= python3

PKGS := jansson libcrypto libxxhash expat libarchive
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS := $(shell pkg-config --libs $(PKGS))
FUZZ_CFLAGS = -std=gnu11 -g -O1 -fno-omit-frame-pointer \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-Wall -Wno-unused-parameter \
	-I$(BUILD) -I$(SRC)/common -I$(SRC)/daemon $(PKG_CFLAGS)

DSL_SRCS = $(SRC)/common/dsl.c $(SRC)/common/dsl_rules.c $(SRC)/common/dsl_json.c $(SRC)/common/log.c \
	$(SRC)/common/dsl_expand.c
API_SRCS = $(SRC)/daemon/api_decode.c $(DSL_SRCS)
DCLIENT_SRCS = $(SRC)/common/dclient.c $(SRC)/common/conf.c $(SRC)/common/log.c
BUNDLE_SRCS = $(SRC)/common/bundle.c $(SRC)/common/checksum.c

all: $(addprefix $(OUT)/,$(TARGETS))

$(OUT)/fuzz_dsl: $(SRC)/fuzz/fuzz_dsl.c $(DSL_SRCS) $(SRC)/common/dsl.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_dsl.c $(DSL_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_plan_json: $(SRC)/fuzz/fuzz_plan_json.c $(DSL_SRCS) $(SRC)/common/dsl.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_plan_json.c $(DSL_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_api: $(SRC)/fuzz/fuzz_api.c $(API_SRCS) $(SRC)/daemon/api_decode.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_api.c $(API_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_dclient: $(SRC)/fuzz/fuzz_dclient.c $(DCLIENT_SRCS) $(SRC)/common/dclient.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_dclient.c $(DCLIENT_SRCS) $(PKG_LIBS) -lmunge -lpthread

$(OUT)/fuzz_bundle_index: $(SRC)/fuzz/fuzz_bundle_index.c $(BUNDLE_SRCS) $(SRC)/common/bundle.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_bundle_index.c $(BUNDLE_SRCS) $(PKG_LIBS)

$(OUT)/fuzz_listing: $(SRC)/fuzz/fuzz_listing.c $(SRC)/daemon/xfer_url_xml.c $(SRC)/daemon/xfer_url_xml.h $(BUILD)/config.h
	@mkdir -p $(OUT)
	$(CLANG) $(FUZZ_CFLAGS) -o $@ $(SRC)/fuzz/fuzz_listing.c $(SRC)/daemon/xfer_url_xml.c $(PKG_LIBS)

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

run: all seeds
	@$(SRC)/fuzz/run-fuzz $(OUT) $(FUZZ_SECONDS) $(SRC)/fuzz $(TARGETS)

clean:
	rm -rf $(OUT)

.PHONY: all seeds run clean
