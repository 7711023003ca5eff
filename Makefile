# spindle: plain Makefile. `make` builds build/spindle; `make test` sets up what is
# missing, builds and runs every test; `make run` serves the default model over the
# OpenAI API; `make debug` builds with ASan+UBSan into build/debug and runs the tests there.

CC      ?= gcc
ifeq ($(CC),cc)
CC      := gcc
endif
BUILD   ?= build
OPT     ?= -O2
CFLAGS  ?= -g
# OPT (optimization, and the sanitizers for `make debug`) is always added, even when
# CFLAGS comes from the environment.
override CFLAGS += $(OPT) -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -I. -MMD -MP -pthread
LDLIBS  += -lmicrohttpd -lnettle -lpcre2-8 -ljansson -lyaml -lm -pthread
PYTHON  ?= python3
MODEL   ?= models/SmolLM2-135M-Instruct.Q4_1.gguf
# Where the shared test fixtures live (tests read SPINDLE_TESTDATA).
SPINDLE_TESTDATA ?= ../shared/testdata
export SPINDLE_TESTDATA

# ---- sources, one explicit list per module ----------------------------------------
# In layer order (docs/architecture.md; `make layers` checks it).
COMMON_SRC    := common/status.c common/log.c common/strbuf.c common/thread.c common/grow.c common/kinds.c
QUANT_SRC     := quant/quant.c quant/quant_kquants.c
SAMPLE_SRC    := sample/sample.c
GGUF_SRC      := gguf/gguf.c gguf/gguf_access.c gguf/gguf_write.c
TOKENIZER_SRC := tokenizer/tokenizer.c tokenizer/tokenizer_spm.c tokenizer/tokenizer_bpe.c tokenizer/unicode.c
TEMPLATE_SRC  := template/template_lexer.c template/template_parser.c template/template_parse_expr.c \
                 template/template_value.c template/template_json.c template/template_eval.c \
                 template/template_ops.c template/template_format.c template/template_strings.c \
                 template/template_str_methods.c template/template_filters.c template/template_builtins.c \
                 template/template_gguf.c
GRAMMAR_SRC   := grammar/gram_gbnf.c grammar/gram_match.c grammar/gram_mask.c grammar/gram_keys.c grammar/gram_dfa.c grammar/gram_schema.c grammar/gram_schema_types.c \
                 grammar/gram_regex.c
GPU_SRC       := gpu/device.c gpu/host/host_backend.c gpu/host/host_ops.c gpu/host/host_matmul.c gpu/host/host_amx.c \
                 gpu/host/host_attention.c gpu/host/host_attention_quant.c gpu/host/host_cpu.c gpu/host/host_quant_dot.c gpu/host/host_quant_dot_rows.c gpu/host/host_quant_dot_pairs.c \
                 gpu/host/host_quant_dot_wrows.c \
                 gpu/host/host_sample.c gpu/host/threadpool.c
KVCACHE_SRC   := kvcache/kv_blocks.c kvcache/kvtier_entries.c kvcache/kvtier.c kvcache/kvtier_disk.c
MODEL_SRC     := model/arch.c model/model.c model/forward.c
SCHED_SRC     := scheduler/sched.c scheduler/clock.c scheduler/running.c scheduler/draw.c scheduler/submit.c scheduler/queue.c \
                 scheduler/request.c scheduler/kv_tiers.c scheduler/policy.c scheduler/slo.c \
                 scheduler/tick.c scheduler/masks.c scheduler/end_tick.c scheduler/embed.c scheduler/stop_match.c scheduler/sched_metrics.c \
                 scheduler/spec_tick.c scheduler/spec_seq.c scheduler/spec_draft.c scheduler/spec/spec_ngram.c scheduler/spec/spec_suffix.c \
                 scheduler/spec/spec_gate.c scheduler/spec/spec_cost.c scheduler/spec/spec_accept.c
CONFIG_SRC    := config/cfg.c config/cfg_yaml.c config/cfg_args.c
# server/api: the OpenAI, Responses and Anthropic layer (bodies in, scheduler requests and
# answer bytes out); no libmicrohttpd. server/http: the transport over it.
SERVER_API_SRC  := server/api/errors.c server/api/json_text.c server/api/random.c server/api/openai_fields.c server/api/openai_request.c \
                   server/api/openai_refused.c server/api/openai_constraint.c server/api/openai_response.c \
                   server/api/chat.c server/api/tools.c server/api/reasoning.c server/api/tokenize.c \
                   server/api/embeddings.c server/api/api_bridge.c server/api/responses.c \
                   server/api/response_store.c server/api/anthropic.c server/api/anthropic_answer.c
SERVER_HTTP_SRC := server/http/http.c server/http/http_send.c server/http/http_generation.c server/http/http_framing.c \
                   server/http/http_security.c server/http/prep.c server/http/deadlines.c server/http/idle_drain.c server/http/watch.c \
                   server/http/metrics.c server/http/auth.c server/http/notify.c server/http/access_log.c \
                   server/http/retry_after.c server/http/ui.c
SERVER_SRC      := $(SERVER_API_SRC) $(SERVER_HTTP_SRC)
# cli/: everything but main.c goes into the library, so unit tests link it too
CLI_SRC       := cli/cli_session.c cli/cmd_generate.c cli/cmd_inspect.c cli/cmd_bench.c cli/cmd_quantize.c \
                 cli/cmd_template.c cli/cmd_serve.c

LIB_SRC := $(COMMON_SRC) $(QUANT_SRC) $(SAMPLE_SRC) $(GGUF_SRC) $(TOKENIZER_SRC) $(TEMPLATE_SRC) \
           $(GRAMMAR_SRC) $(GPU_SRC) $(KVCACHE_SRC) $(MODEL_SRC) $(SCHED_SRC) $(CONFIG_SRC) $(SERVER_SRC) $(CLI_SRC)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)

# ---- the CUDA backend (gpu/cuda/), built when nvcc is found ---------------------
# For sm_80, sm_89 and sm_90, plus PTX for newer GPUs; the CUDA runtime linked
# statically, cuBLAS from the toolkit (found through an rpath). No GPU is needed to
# build or to run: without one, --device auto runs on the CPU.
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifneq ($(NVCC),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_SRC   := $(wildcard gpu/cuda/*.cu)
CUDA_OBJ   := $(CUDA_SRC:%.cu=$(BUILD)/obj/%.o)
CUDA_ARCH  := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_89,code=sm_89 \
              -gencode arch=compute_90,code=[sm_90,compute_90]
NVCCFLAGS  ?= -O2 -g
CUDA_LIBS  := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart_static -ldl -lrt -lstdc++
override CFLAGS += -DSP_HAVE_CUDA
LIB_OBJ    += $(CUDA_OBJ)
else
$(info spindle: nvcc not found: building without the CUDA backend (--device cuda will say so))
endif

# ---- build/gpu_rates (bench/gpu_rates.cu), built by `make all` when nvcc is found --
# The GPU's device-to-device copy bandwidth and cuBLAS BF16 GEMM rates: the ceilings
# bench/gpu_check.sh compares spindle's decode and prefill with. Compiled by the .cu
# rule below, linked like the spindle binary (cuBLAS through the rpath, the CUDA runtime
# statically: CUDA_LIBS). Without a GPU it says so and exits 2.
ifneq ($(NVCC),)
all: $(BUILD)/gpu_rates
$(BUILD)/gpu_rates: $(BUILD)/obj/bench/gpu_rates.o
	$(CC) $(CFLAGS) -o $@ $< $(CUDA_LIBS) -lm
-include $(BUILD)/obj/bench/gpu_rates.d
endif

BIN_OBJ := $(BUILD)/obj/cli/main.o
LIB     := $(BUILD)/libspindle.a

# build/loadgen: the serving benchmark's load generator (bench/loadgen/, libcurl multi);
# built by `make bench-serve` and before the integration tests, not by `make all`.
LOADGEN_SRC    := bench/loadgen/main.c bench/loadgen/api.c bench/loadgen/dataset.c bench/loadgen/run.c \
                  bench/loadgen/sse.c bench/loadgen/stream.c bench/loadgen/stats.c bench/loadgen/report.c
LOADGEN_OBJ    := $(LOADGEN_SRC:%.c=$(BUILD)/obj/%.o)
LOADGEN_LDLIBS := -lcurl -ljansson -lm

# Unit tests: every tests/unit/<module>/test_*.c is one Criterion binary.
TEST_SRC := $(wildcard tests/unit/*/test_*.c)
TEST_BIN := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
# The unit tests of server/api (every server test that includes no server/http header):
# linked without libmicrohttpd (`make api-check` compiles them where <microhttpd.h>
# cannot be included).
SERVER_API_TEST_SRC := $(shell grep -L '^\#include "server/http' tests/unit/server/test_*.c)
SERVER_API_TEST_BIN := $(SERVER_API_TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)

.PHONY: all test layers calls api-check unit-test integration-test run debug setup fuzz bench bench-template bench-serve bench-spec bench-grammar bench-kv-tiers bench-kv-quant bench-slo bench-soak format format-check clean install

all: $(BUILD)/spindle $(BUILD)/mkmodel

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -std=c++20 -I. -DSP_HAVE_CUDA $(CUDA_ARCH) -Xcompiler -Wall,-Wextra,-Werror -MMD -MP -c $< -o $@

# server/http/ui.c embeds the chat page with .incbin, which -MMD does not see
$(BUILD)/obj/server/http/ui.o: server/http/ui/chat.html

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/spindle: $(BIN_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(BIN_OBJ) $(LIB) $(LDLIBS) $(CUDA_LIBS)

# build/mkmodel: synthetic GGUF models in real shapes (tools/mkmodel.c)
$(BUILD)/mkmodel: $(BUILD)/obj/tools/mkmodel.o $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS) $(CUDA_LIBS) -lcriterion

# server/api's tests link without libmicrohttpd: none of their objects may need it.
$(SERVER_API_TEST_BIN): override LDLIBS := $(filter-out -lmicrohttpd,$(LDLIBS))

setup:
	@tools/setup.sh

# The layering checks first (the include graph, and the call order inside folders, which
# compiles those folders' objects), unit tests next (fast), then the end-to-end tests on
# the real binary. Every fuzz harness is built too (at -O0, build/fuzz-O0: about 45 CPU
# seconds), and tests/integration/test_fuzz_build.py runs each over its seeds.
test: setup layers
	@$(MAKE) --no-print-directory all $(TEST_BIN) fuzz-build FUZZ_OPT=-O0
	@$(MAKE) --no-print-directory api-check unit-test integration-test FUZZ_OPT=-O0

# The folder-level include graph, checked against tools/layers.txt (no cycles, no include
# against the layer order, no other folder's internal header); prints the graph. Then
# `make calls`.
layers: calls
	@$(PYTHON) tools/check_layers.py

# The generated blocks of the docs (the layer graph in docs/architecture.md, the test
# catalogue in tests/README.md), rewritten from the tree; tests/integration/test_docs.py
# fails when they are stale.
.PHONY: docs
docs:
	@$(PYTHON) tools/update_docs.py

# server/api without the transport: every server/api/*.c and its unit tests compile where
# <microhttpd.h> is a header that fails (a shadow found first on the include path), the
# unit tests link without -lmicrohttpd, and no object of server/ uses a symbol defined
# by a layer its own does not use (server/api calling into server/http: nm).
API_CHECK_DIR := $(BUILD)/api-check
api-check: $(LIB_OBJ) $(SERVER_API_TEST_BIN)
	@mkdir -p $(API_CHECK_DIR)
	@printf '#error "server/api must not include <microhttpd.h>: the transport is server/http"\n' \
	    >$(API_CHECK_DIR)/microhttpd.h
	@for f in $(SERVER_API_SRC) $(SERVER_API_TEST_SRC); do \
	    $(CC) $(filter-out -MMD -MP,$(CFLAGS)) -isystem $(API_CHECK_DIR) -fsyntax-only $$f || exit 1; \
	done
	@$(PYTHON) tools/check_layers.py --objects $(BUILD)/obj --only server >/dev/null
	@echo "api-check: server/api builds without <microhttpd.h>, its tests link without -lmicrohttpd," \
	    "no call runs back up"

# The file-level call graph inside scheduler/, server/api, server/http and kvcache/ (nm
# of their objects), checked against tools/calls.txt (leaves first: no call back up or
# across, no cycle); prints the graphs.
calls: $(SCHED_SRC:%.c=$(BUILD)/obj/%.o) $(SERVER_API_SRC:%.c=$(BUILD)/obj/%.o) \
       $(SERVER_HTTP_SRC:%.c=$(BUILD)/obj/%.o) $(KVCACHE_SRC:%.c=$(BUILD)/obj/%.o)
	@$(PYTHON) tools/check_calls.py --objs $(BUILD)/obj $^

unit-test: $(TEST_BIN)
	@tools/run_unit_tests.sh $(TEST_BIN)

integration-test: $(BUILD)/spindle $(BUILD)/loadgen
	@SPINDLE_BIN=$(BUILD)/spindle LOADGEN_BIN=$(BUILD)/loadgen $(PYTHON) -m pytest -q tests/integration

# Serves the default model on http://$(HOST):$(PORT)/v1 until Ctrl-C, with the sampling
# its model card recommends (temperature 0.2, top_p 0.9) for requests that give none:
# its file has no general.sampling.* metadata, and at temperature 1 a 135M model rambles.
HOST ?= 127.0.0.1
PORT ?= 8080
RUN_FLAGS ?= --temperature 0.2 --top-p 0.9
run: setup all
	$(BUILD)/spindle serve --model $(MODEL) --host $(HOST) --port $(PORT) $(RUN_FLAGS)

debug: setup
	@SPINDLE_SANITIZED=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan.supp $(MAKE) --no-print-directory BUILD=build/debug OPT="-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
	    LDLIBS="-lmicrohttpd -lnettle -lpcre2-8 -ljansson -lyaml -lm -pthread -fsanitize=address,undefined" all unit-test integration-test

# ---- the libFuzzer harnesses (tests/fuzz/fuzz_*.c), built with clang ---------------
# The whole library (LIB_SRC: the CPU-only configuration, no CUDA object and no
# SP_HAVE_CUDA) compiled again with coverage instrumentation and the sanitizers into
# build/fuzz/libspindle.a; every tests/fuzz/fuzz_<name>.c (a new one too: the wildcard)
# links against it into build/fuzz/fuzz_<name>, pulling only the objects it needs.
# `make fuzz-build` builds them all (CI does, in `make test`, so a harness that stops
# linking fails there); `make fuzz` builds and runs each for FUZZ_SECONDS (tools/fuzz.sh,
# which names the harness that failed to build, crashed or skipped). FUZZ_SANITIZE= builds
# with coverage only (no ASan/UBSan), into build/fuzz-nosan; FUZZ_OPT=-O0 (what `make test`
# builds and runs: a quarter of -O1's compile time, with the same sanitizers) into
# build/fuzz-O0. Needs clang and its compiler-rt (tools/setup.sh installs both).
FUZZ_CC       ?= clang
FUZZ_SANITIZE ?= -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_OPT      ?= -O1
FUZZ_DIR      ?= build/fuzz$(if $(strip $(FUZZ_SANITIZE)),,-nosan)$(filter-out -O1,$(FUZZ_OPT))
FUZZ_CFLAGS   := -std=c11 -g $(FUZZ_OPT) -fno-omit-frame-pointer -Wall -Wextra -D_GNU_SOURCE -I. -MMD -MP -pthread \
                 $(FUZZ_SANITIZE)
FUZZ_LIB      := $(FUZZ_DIR)/libspindle.a
FUZZ_OBJ      := $(LIB_SRC:%.c=$(FUZZ_DIR)/obj/%.o)
FUZZ_HARNESS_DIR ?= tests/fuzz
FUZZ_SRC      := $(wildcard $(FUZZ_HARNESS_DIR)/fuzz_*.c)
FUZZ_BIN      := $(FUZZ_SRC:$(FUZZ_HARNESS_DIR)/%.c=$(FUZZ_DIR)/%)
FUZZ_LDLIBS   := -lmicrohttpd -lnettle -lpcre2-8 -ljansson -lyaml -lm -pthread
FUZZ_SECONDS  ?= 60

.PHONY: fuzz-build fuzz-lib fuzz-dir
fuzz-build: $(FUZZ_BIN)
fuzz-lib: $(FUZZ_LIB)
fuzz-dir:
	@echo $(FUZZ_DIR)

$(FUZZ_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_DIR)/obj/server/http/ui.o: server/http/ui/chat.html

$(FUZZ_LIB): $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(FUZZ_DIR)/fuzz_%: $(FUZZ_HARNESS_DIR)/fuzz_%.c $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) $(FUZZ_LDLIBS)

fuzz:
	@MAKE="$(MAKE)" FUZZ_DIR=$(FUZZ_DIR) tools/fuzz.sh $(FUZZ_SECONDS)

bench: setup all bench-template bench-serve bench-spec bench-grammar bench-kv-tiers bench-kv-quant bench-slo $(BUILD)/mem_bandwidth $(BUILD)/bench_matmul
	@$(BUILD)/mem_bandwidth
	@bench/bench_kernels.sh
	@bench/bench_profile.sh

# build/mem_bandwidth: how fast this machine reads memory (the batch-1 decode ceiling).
$(BUILD)/mem_bandwidth: bench/mem_bandwidth.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< -pthread

# spindle and llama-server side by side under build/loadgen (concurrency 1-64, random and
# shared-prefix prompts); writes the serve section of docs/benchmarks.md and its plot.
bench-serve: setup all $(BUILD)/loadgen
	@$(PYTHON) bench/bench_serve.py --bin $(BUILD)/spindle --loadgen $(BUILD)/loadgen --model $(MODEL)

# Speculative decoding: spindle with it, without it, and llama-server with its own lookup
# speculation, on copy-heavy, agentic multi-turn and prose datasets at concurrency 1-64,
# plus what one sampled row costs (bench_draw); writes the spec section of
# docs/benchmarks.md.
bench-spec: setup all $(BUILD)/loadgen $(BUILD)/bench_draw
	@$(PYTHON) bench/bench_spec.py --bin $(BUILD)/spindle --draw-bin $(BUILD)/bench_draw --model $(MODEL)

$(BUILD)/bench_draw: bench/bench_draw.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS) $(CUDA_LIBS)

# What a CPU matmul of T rows costs (the kernels behind prefill and verify steps).
$(BUILD)/bench_matmul: bench/bench_matmul.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS) $(CUDA_LIBS)

# The prefix cache's host and disk tiers: a multi-turn chat of many users whose histories
# outgrow the KV pool, TTFT with and without the tiers; writes the kv-tiers section of
# docs/benchmarks.md.
bench-kv-tiers: setup all
	@$(PYTHON) bench/bench_kv_tiers.py --bin $(BUILD)/spindle --model $(MODEL)

# The KV cache in q8_0 and q4_0 against f16 in the same memory: sequences held at once
# and output throughput at c64; writes the kv-quant section of docs/benchmarks.md.
bench-kv-quant: setup all $(BUILD)/loadgen
	@$(PYTHON) bench/bench_kv_quant.py --bin $(BUILD)/spindle --model $(MODEL)

# Overload at twice the measured capacity: goodput (requests within TTFT and TPOT targets)
# with --policy slo against fcfs and llama-server; writes the slo section of docs/benchmarks.md.
bench-slo: setup all
	@$(PYTHON) bench/bench_slo.py --bin $(BUILD)/spindle --model $(MODEL)

# Constrained output: mask time per token, and output tok/s with a JSON Schema against
# unconstrained and against llama-server; writes the grammar section of docs/benchmarks.md.
bench-grammar: setup all $(BUILD)/bench_grammar
	@$(PYTHON) bench/bench_grammar.py --bin $(BUILD)/spindle --grammar-bin $(BUILD)/bench_grammar --model $(MODEL)

# build/bench_grammar: what a grammar mask costs per token (bench/bench_grammar.c)
$(BUILD)/bench_grammar: bench/bench_grammar.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS) $(CUDA_LIBS)

# Normal clients beside each front-end attack in turn for 10 minutes: latency per phase,
# RSS, failed requests; writes the soak section of docs/benchmarks.md.
bench-soak: setup all
	@$(PYTHON) bench/bench_soak.py --bin $(BUILD)/spindle --model $(MODEL)

# Chat-template rendering, spindle vs jinja2; writes its section of docs/benchmarks.md.
bench-template: setup $(BUILD)/bench_template
	@BENCH_TEMPLATE=$(BUILD)/bench_template $(PYTHON) bench/bench_template.py

$(BUILD)/bench_template: bench/bench_template.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS) $(CUDA_LIBS)

$(BUILD)/loadgen: $(LOADGEN_OBJ)
	$(CC) $(CFLAGS) -o $@ $(LOADGEN_OBJ) $(LOADGEN_LDLIBS)

FORMAT_FILES = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh')
format:
	clang-format -i $(FORMAT_FILES)
format-check:
	clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf build

# ---- install ----------------------------------------------------------------------
# `make install PREFIX=/usr/local DESTDIR=` puts
#   build/spindle          in $(DESTDIR)$(PREFIX)/bin
#   the systemd unit       in $(DESTDIR)$(UNITDIR), default $(PREFIX)/lib/systemd/system
#                          (systemd reads /usr/local/lib/systemd/system and /usr/lib/...;
#                          its /usr/local/ paths are rewritten to PREFIX, /etc/ to SYSCONFDIR)
#   config/spindle.yaml    in $(DESTDIR)$(SYSCONFDIR)/spindle/spindle.yaml, default /etc;
#                          an existing file is kept (the example goes next to it as .example)
#   an empty model folder  $(DESTDIR)$(PREFIX)/share/spindle/models (the unit's ReadOnlyPaths)
# then: systemctl daemon-reload && systemctl enable --now spindle (docs/operations.md).
PREFIX     ?= /usr/local
SYSCONFDIR ?= /etc
UNITDIR    ?= $(PREFIX)/lib/systemd/system
INSTALL    ?= install
install: $(BUILD)/spindle
	$(INSTALL) -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSCONFDIR)/spindle \
	    $(DESTDIR)$(PREFIX)/share/spindle/models
	$(INSTALL) -m 0755 $(BUILD)/spindle $(DESTDIR)$(PREFIX)/bin/spindle
	sed -e 's|/usr/local/|$(PREFIX)/|g' -e 's|/etc/spindle/|$(SYSCONFDIR)/spindle/|g' systemd/spindle.service \
	    > $(DESTDIR)$(UNITDIR)/spindle.service.tmp
	chmod 0644 $(DESTDIR)$(UNITDIR)/spindle.service.tmp
	mv $(DESTDIR)$(UNITDIR)/spindle.service.tmp $(DESTDIR)$(UNITDIR)/spindle.service
	@conf=$(DESTDIR)$(SYSCONFDIR)/spindle/spindle.yaml; \
	if [ ! -f config/spindle.yaml ]; then echo "install: config/spindle.yaml absent: no example config installed"; \
	elif [ -e $$conf ]; then echo "install: keeping $$conf; the example is $$conf.example"; \
	    $(INSTALL) -m 0644 config/spindle.yaml $$conf.example; \
	else echo "$(INSTALL) -m 0644 config/spindle.yaml $$conf"; $(INSTALL) -m 0644 config/spindle.yaml $$conf; fi

-include $(LIB_OBJ:.o=.d) $(FUZZ_OBJ:.o=.d) $(FUZZ_BIN:=.d) $(BIN_OBJ:.o=.d) $(TEST_BIN:=.d) $(LOADGEN_OBJ:.o=.d) $(BUILD)/obj/tools/mkmodel.d
