# aiinfra - build, test and run.  `make run` and `make test` are the two set-up commands.
#
#   make            library build/libaiinfra.a and CLI build/aiinfra (release, -O2)
#   make test       deps, build, ASan/UBSan unit tests, parity tests against HF (test venv)
#   make run        deps, build, fetch the default model (SmolLM2-135M-Instruct), stream an answer to PROMPT
#   make demo       tokenizer + chat template on real vocabularies
#   make fuzz       libFuzzer targets (clang), each run for FUZZ_SECONDS
#   make bench      benchmarks (tokenizer encode speed vs HF tokenizers)
#   make asan       the same CLI and tests built with -fsanitize=address,undefined
#   make gpu        release builds of the GPU tests and benchmarks (scripts/gpu-check.sh runs them)
#
# CUDA: when $(CUDA_HOME)/bin/nvcc exists (CI and dev machines have it, with no GPU), every .cu file
# under src/ is compiled for sm_90a and linked in; GPU tests then skip with one line where no device
# is present. Without nvcc the CUDA backend is left out and reports "built without CUDA".

CC      ?= gcc
CSTD    := -std=c11 -D_POSIX_C_SOURCE=200809L
WARN    := -Wall -Wextra -Wshadow -Wno-unused-parameter
DEPS_CFLAGS := $(shell pkg-config --cflags libpcre2-8 libcjson libutf8proc 2>/dev/null)
DEPS_LIBS   := -lpcre2-8 -lcjson -lutf8proc -lxxhash -lmicrohttpd -lcurl -lm -lpthread
OPT     ?= -O2 -g
CFLAGS  += $(CSTD) $(WARN) $(OPT) -Iinclude -Isrc $(DEPS_CFLAGS) -MMD -MP
SAN     := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

BUILD   := build
CUDA_HOME ?= /usr/local/cuda
NVCC    := $(CUDA_HOME)/bin/nvcc
HAVE_CUDA := $(shell test -x $(NVCC) && echo 1)
ALL_LIB_SRC := $(shell find src -name '*.c' -not -path 'src/tools/*' | sort)
CUDA_C_SRC := $(filter src/backend/cuda/%,$(ALL_LIB_SRC))
ifeq ($(HAVE_CUDA),1)
LIB_SRC := $(ALL_LIB_SRC)
CU_SRC  := $(shell find src -name '*.cu' | sort)
CFLAGS  += -DAIINFRA_CUDA=1 -I$(CUDA_HOME)/include
DEPS_LIBS += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart_static -ldl -lrt -lstdc++
TEST_SRC := $(sort $(wildcard tests/unit/test_*.c))
else
LIB_SRC := $(filter-out $(CUDA_C_SRC),$(ALL_LIB_SRC))
CU_SRC  :=
TEST_SRC := $(sort $(filter-out tests/unit/test_cuda_%,$(wildcard tests/unit/test_*.c)))
endif
NVCCFLAGS ?= -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo --compress-mode=size -Xcompiler -Wall,-Wextra,-Wno-unused-parameter \
             -Iinclude -Isrc -MMD -MP
CU_OBJS := $(patsubst %.cu,$(BUILD)/cuda/%.o,$(CU_SRC))
CLI_SRC := $(sort $(wildcard src/tools/*.c))
BENCH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(sort $(wildcard bench/bench_*.c)))

SHARED  ?= $(abspath ../shared)
DATA    := $(BUILD)/data
TOKDATA := $(DATA)/tokenizers

VENV_REQ := tests/requirements.txt
VENV    ?= $(HOME)/.cache/aiinfra/venv-$(shell cat $(VENV_REQ) 2>/dev/null | sha256sum | cut -c1-12)
PY      := $(VENV)/bin/python

# variant(dir, extra cflags) -> objects
objs = $(patsubst %.c,$(1)/obj/%.o,$(2))

.PHONY: all deps test run demo fuzz bench asan gpu clean venv data unit parity
all: $(BUILD)/aiinfra $(BENCH_BINS)

# ---- release build (NDEBUG: the debug-only invariant checks, e.g. kv_blocks_check after every
# block operation, run in the ASan build that the tests use, not in the release binary)
$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DNDEBUG -c $< -o $@

# CUDA objects are built once (no sanitizer applies to device code) and linked into both variants.
$(BUILD)/cuda/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/libaiinfra.a: $(call objs,$(BUILD),$(LIB_SRC)) $(CU_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/aiinfra: $(call objs,$(BUILD),$(CLI_SRC)) $(BUILD)/libaiinfra.a
	$(CC) $(CFLAGS) -o $@ $^ $(DEPS_LIBS)

$(BUILD)/tests/%: $(BUILD)/obj/tests/unit/%.o $(BUILD)/libaiinfra.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $^ -lcmocka $(DEPS_LIBS)

# ---- sanitizer build (same sources, separate tree)
ASAN := $(BUILD)/asan
$(ASAN)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN) -c $< -o $@

$(ASAN)/libaiinfra.a: $(call objs,$(ASAN),$(LIB_SRC)) $(CU_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(ASAN)/aiinfra: $(call objs,$(ASAN),$(CLI_SRC)) $(ASAN)/libaiinfra.a
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ $(DEPS_LIBS)

$(ASAN)/tests/%: $(ASAN)/obj/tests/unit/%.o $(ASAN)/libaiinfra.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SAN) -o $@ $^ -lcmocka $(DEPS_LIBS)

UNIT_BINS := $(patsubst tests/unit/%.c,$(ASAN)/tests/%,$(TEST_SRC))
asan: $(ASAN)/aiinfra $(UNIT_BINS)

# ---- GPU: release builds of the CUDA tests (run on a GPU machine by scripts/gpu-check.sh)
GPU_TEST_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(filter tests/unit/test_cuda_%,$(TEST_SRC)))
gpu: all $(GPU_TEST_BINS)

# ---- dependencies, data, test venv
deps:
	@scripts/deps.sh

data: $(TOKDATA)/.ok
$(TOKDATA)/.ok:
	@mkdir -p $(DATA)
	@if [ -f $(SHARED)/data/tokenizers.tar.xz ]; then \
	  tar xJf $(SHARED)/data/tokenizers.tar.xz -C $(DATA) && touch $@; \
	else echo "note: $(SHARED)/data/tokenizers.tar.xz absent; tests that need it will skip"; fi

venv: $(VENV)/.ok
$(VENV)/.ok: $(VENV_REQ)
	@scripts/venv.sh $(VENV) $(VENV_REQ)

# ---- test: unit tests under ASan/UBSan, then parity tests against the references
# (with nvcc: cuobjdump for the SASS check of the PDL waits, tests/py/test_sass_pdl.py; it skips without)
CUDA_TOOLS ?= $(HOME)/.cache/aiinfra/cuda-tools-13.5.37
test: deps
	@$(MAKE) --no-print-directory all asan data venv
	@cuobjdump=$$( [ "$(HAVE_CUDA)" = 1 ] && scripts/cuda-tools.sh $(VENV)/bin/pip $(CUDA_TOOLS) || true); \
	  AIINFRA_BIN=$(abspath $(ASAN)/aiinfra) AIINFRA_DATA=$(abspath $(DATA)) AIINFRA_SHARED=$(SHARED) \
	  CUOBJDUMP=$$cuobjdump NVCC=$(if $(HAVE_CUDA),$(NVCC)) PY=$(PY) scripts/run_tests.sh $(UNIT_BINS)

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run_default.sh $(BUILD)/aiinfra

demo: all data
	@scripts/demo.sh $(BUILD)/aiinfra $(TOKDATA) $(SHARED)

# ---- fuzzing (libFuzzer through clang)
FUZZ_SECONDS ?= 60
FUZZ_SRC := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BINS := $(patsubst fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))
FUZZ_CFLAGS := $(CSTD) -g -O1 -Iinclude -Isrc $(DEPS_CFLAGS) -fsanitize=address,undefined -MMD -MP
$(BUILD)/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(BUILD)/fuzz/libaiinfra.a: $(call objs,$(BUILD)/fuzz,$(filter-out $(CUDA_C_SRC),$(ALL_LIB_SRC)))
	@rm -f $@
	ar rcs $@ $^
$(BUILD)/fuzz/%: $(BUILD)/fuzz/obj/fuzz/%.o $(BUILD)/fuzz/libaiinfra.a
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ $(DEPS_LIBS)
fuzz: data
	@scripts/deps.sh --fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BINS)
	@scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BINS)

# (the .d file of a bench names headers as prerequisites of the binary: link only the .c and the library)
$(BUILD)/bench/%: bench/%.c $(BUILD)/libaiinfra.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $(filter %.c %.a,$^) $(DEPS_LIBS)

bench: all data venv $(BENCH_BINS)
	@PY=$(PY) scripts/bench_tokenizer.sh $(BUILD)/aiinfra $(TOKDATA)
	$(BUILD)/bench/bench_cpu_kernels $(shell nproc) 7

clean:
	rm -rf $(BUILD)

.SECONDARY:

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
