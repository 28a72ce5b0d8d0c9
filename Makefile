# make                 library + tools            (build/)
# make test            library + tools, doctest suite, tests/tools.sh (build/)
# make SANITIZE=1 test AddressSanitizer + UBSan    (build-san/)
# make test-scalar     the suite on the scalar kernels (ENG_CPU=scalar)
# make CXX=clang++     clang build                (build-clang/, build-clang-san/)
# make test-aarch64    ARM64 cross build, tests run under qemu-user (build-aarch64/)
# make data            install Fashion-MNIST (Debian package dataset-fashion-mnist)
# make fuzz            libFuzzer targets, FUZZ_SECONDS each (build-fuzz/; needs clang)
# make CUDA=1          with the CUDA backend (build-cuda/; nvcc from CUDA_HOME, CUDA_ARCH=90; docs/cuda.md)
# make CUDA=1 cuda-compile   only the CUDA sources and their test file (what CI checks: it has no GPU)
# make MPI=1 test-mpi  data-parallel training over Open MPI (build/mpi/; docs/distributed.md)
# Each variant has its own directory, so switching never mixes objects.

CXX ?= g++
SANITIZE ?= 0
CUDA ?= 0

ifneq ($(findstring clang,$(CXX)),)
  VARIANT := clang
endif
# Cross build for 64-bit ARM (Debian's g++-aarch64-linux-gnu); its binaries run under qemu-user (RUN).
ifneq ($(findstring aarch64,$(CXX)),)
  VARIANT := aarch64
  RUN ?= qemu-aarch64 -L /usr/aarch64-linux-gnu
endif
# Cross build for 32-bit ARM (Debian's g++-arm-linux-gnueabihf, ARMv7 hard float): the scalar kernels only (the
# SIMD tables are x86-64 and AArch64 code; docs/embedding.md), run under qemu-user.
ifneq ($(findstring arm-linux-gnueabihf,$(CXX)),)
  VARIANT := armhf
  RUN ?= qemu-arm -L /usr/arm-linux-gnueabihf
  # GCC notes that passing some structs changed in GCC 7.1: an ABI remark about old binaries, not a defect here.
  CXXFLAGS_ARCH := -Wno-psabi
endif
ifeq ($(SANITIZE),1)
  VARIANT := $(if $(VARIANT),$(VARIANT)-san,san)
endif
ifeq ($(CUDA),1)
  VARIANT := $(if $(VARIANT),$(VARIANT)-cuda,cuda)
endif
BUILD ?= build$(if $(VARIANT),-$(VARIANT))

# -O3: GCC 12 vectorises the kernels' inner loops only from -O3 (its -O2 cost model is too cautious). OPT=-O1
# compiles faster for a build that is only tested (CI's 32-bit ARM stage).
OPT ?= -O3
CXXFLAGS ?= $(OPT)
# -fno-trapping-math: we never read floating-point exception flags; without it GCC will not turn a loop's
# `x > 0 ? a : b` into vector selects, and elementwise kernels stay scalar.
CXXFLAGS += -std=c++17 -Wall -Wextra -Werror -pthread -I. -MMD -MP -fno-trapping-math $(CXXFLAGS_ARCH)
# A section per function and object, so that a program linked with --gc-sections (the lean embed) keeps only the
# code it reaches.
CXXFLAGS += -ffunction-sections -fdata-sections
LDFLAGS += -pthread
# Link-time optimisation for the lean embed, in the default g++ build (not the cross, clang, sanitizer or CUDA
# ones): the library's objects carry GCC's intermediate code beside their machine code (-ffat-lto-objects, about
# 8 % more compile time). Every other link uses the machine code; the embed's link optimises the program whole:
# a smaller program with fewer resident pages (docs/embedding.md).
ifeq ($(VARIANT)$(findstring clang,$(CXX)),)
  LTO := -flto=auto -ffat-lto-objects
  # GCC would optimise every link whole once its objects carry the intermediate code: only the embed's does.
  LDFLAGS += -fno-lto
endif
CXXFLAGS += $(LTO)
ifeq ($(SANITIZE),1)
  SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  # -g1: line tables only, enough for the sanitizers' stack traces and much cheaper to compile than -g.
  CXXFLAGS := $(filter-out -O%,$(CXXFLAGS)) -O1 -g1 $(SANFLAGS) -DENG_SANITIZE
  LDFLAGS += $(SANFLAGS)
endif

LIB_SRC := $(wildcard engine/*.cpp ops/*.cpp models/*.cpp models/*/*.cpp datasets/*.cpp) ops/cuda/host.cpp

# The CUDA backend (docs/cuda.md): the .cu files are compiled by nvcc, the ops' dispatch to it (ops/cuda/*.cpp)
# by the host compiler, and the stand-ins that report CUDA as not built (engine/cuda_host.cpp,
# ops/cuda/host.cpp) are left out. CUDA_ARCH is the GPU generation the kernels are built for:
# 90 for the H100/H200 (sm_90); e.g. CUDA_ARCH=80 for the A100.
ifeq ($(CUDA),1)
  CUDA_HOME ?= /usr/local/cuda
  NVCC ?= $(CUDA_HOME)/bin/nvcc
  CUDA_ARCH ?= 90
  ifeq ($(shell command -v $(NVCC) 2>/dev/null),)
    $(error CUDA=1 needs nvcc, but $(NVCC) was not found: install the CUDA toolkit or set CUDA_HOME or NVCC)
  endif
  NVCCFLAGS := -O3 -std=c++17 -I. -MMD -MP -gencode arch=compute_$(CUDA_ARCH),code=sm_$(CUDA_ARCH) \
	-Xcompiler -Wall,-Wextra,-Werror,-fno-trapping-math -Werror all-warnings -DENG_CUDA
  CXXFLAGS += -DENG_CUDA
  LIB_SRC := $(filter-out engine/cuda_host.cpp ops/cuda/host.cpp,$(LIB_SRC)) $(wildcard engine/*.cu ops/cuda/*.cu) \
	$(filter-out ops/cuda/host.cpp,$(wildcard ops/cuda/*.cpp))
  LDFLAGS += -L$(CUDA_HOME)/lib64 -lcudart -Wl,-rpath,$(CUDA_HOME)/lib64
endif
TOOL_SRC := $(wildcard tools/*.cpp)
BENCH_SRC := $(wildcard tools/bench/*.cpp)  # bench's subcommands, linked into build/bench
TRAIN_SRC := $(wildcard tools/train/*.cpp)  # train's jobs (one file per task family), linked into build/train
TEST_SRC := $(wildcard tests/*.cpp) tests/fuzz/targets.cpp

LIB_OBJ := $(patsubst %.cu,$(BUILD)/obj/%.o,$(LIB_SRC:%.cpp=$(BUILD)/obj/%.o))
TOOL_BIN := $(TOOL_SRC:tools/%.cpp=$(BUILD)/%)
TEST_OBJ := $(TEST_SRC:%.cpp=$(BUILD)/obj/%.o)
BENCH_OBJ := $(BENCH_SRC:%.cpp=$(BUILD)/obj/%.o)
TRAIN_OBJ := $(TRAIN_SRC:%.cpp=$(BUILD)/obj/%.o)

DOCTEST_H := $(firstword $(wildcard /usr/include/doctest/doctest.h /usr/local/include/doctest/doctest.h))

.PHONY: all test clean check-doctest
all: $(BUILD)/libengine.a $(TOOL_BIN)

$(BUILD)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

ifeq ($(CUDA),1)
$(BUILD)/obj/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

# CI's check that the CUDA code compiles where nvcc exists but no GPU does: every .cu file, the ops' dispatch
# (ops/cuda/*.cpp) and the CUDA test files, without the rest of the CUDA=1 build.
.PHONY: cuda-compile
cuda-compile: $(patsubst %.cu,$(BUILD)/obj/%.o,$(filter %.cu,$(LIB_SRC))) \
	$(patsubst %.cpp,$(BUILD)/obj/%.o,$(filter ops/cuda/%.cpp,$(LIB_SRC))) $(filter $(BUILD)/obj/tests/test_cuda%,$(TEST_OBJ))
endif

# The SIMD kernel tables (engine/vec_kernels_*.cpp, ops/quant_kernels_*.cpp) are the only files built for an
# instruction set beyond baseline x86-64; the dispatch runs each only where the CPU has it. On ARM NEON is baseline.
# (The same flags for check-no-exceptions' compile of each file, in $(NOEXC).)
NOEXC := $(BUILD)/no-exceptions
ifeq ($(findstring aarch64,$(CXX))$(findstring arm-linux,$(CXX)),)
VEC_AVX2_FLAGS := -mavx2 -mfma
VEC_AVX512_FLAGS := -mavx512f -mavx512bw -mavx512vl -mavx2 -mfma
$(BUILD)/obj/engine/vec_kernels_avx2.o $(NOEXC)/engine/vec_kernels_avx2.check: CXXFLAGS += $(VEC_AVX2_FLAGS)
$(BUILD)/obj/engine/vec_kernels_avx512.o $(NOEXC)/engine/vec_kernels_avx512.check: CXXFLAGS += $(VEC_AVX512_FLAGS)
$(BUILD)/obj/ops/quant_kernels_avx2.o $(NOEXC)/ops/quant_kernels_avx2.check: CXXFLAGS += $(VEC_AVX2_FLAGS)
$(BUILD)/obj/ops/quant_kernels_avx512.o $(NOEXC)/ops/quant_kernels_avx512.check: \
	CXXFLAGS += $(VEC_AVX512_FLAGS) -mavx512vnni
else ifneq ($(findstring aarch64,$(CXX)),)
# The quantized products' sdot kernel (ARMv8.2 DotProd, optional): only its file, run where the CPU has it.
$(BUILD)/obj/ops/quant_kernels_neon_dotprod.o $(NOEXC)/ops/quant_kernels_neon_dotprod.check: \
	CXXFLAGS += -march=armv8.2-a+dotprod
endif

# The quantized products (ops/quant.h) promise the same bits at every kernel level: a multiply then an add per
# block. GCC fuses such pairs into FMAs in C++ (-ffp-contract=fast is its default outside ISO C), and would on
# ARM64 and in the AVX2 files only, so these files are built without contraction.
$(BUILD)/obj/ops/quant.o $(BUILD)/obj/ops/quant_kernels_%.o: CXXFLAGS += -ffp-contract=off

$(BUILD)/libengine.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# The tools link the archive plainly: the linker takes the objects they reach. Attention variants are registered
# explicitly (models/attention/variants.h), every one by REGISTER_ALL_OBJ; an op's registration (ENG_REGISTER_OP)
# lies in the object that defines the op. The tools' objects are kept (.SECONDARY): make would otherwise delete them
# as intermediate files after linking, print the `rm`, and compile them again on the next change to the library.
REGISTER_ALL_OBJ := $(BUILD)/obj/tools/registration/all_variants.o
.SECONDARY: $(TOOL_BIN:$(BUILD)/%=$(BUILD)/obj/tools/%.o) $(REGISTER_ALL_OBJ)
$(BUILD)/%: $(BUILD)/obj/tools/%.o $(REGISTER_ALL_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(BUILD)/libengine.a $(LDFLAGS) -o $@

# bench train times build/train's data-parallel step: it links those of train's objects.
BENCH_TRAIN_OBJ := $(patsubst %,$(BUILD)/obj/tools/train/%.o,data_parallel optimizer_shard job)
$(BUILD)/bench: $(BUILD)/obj/tools/bench.o $(BENCH_OBJ) $(BENCH_TRAIN_OBJ) $(REGISTER_ALL_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(BUILD)/libengine.a $(LDFLAGS) -o $@

$(BUILD)/train: $(BUILD)/obj/tools/train.o $(TRAIN_OBJ) $(REGISTER_ALL_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(BUILD)/libengine.a $(LDFLAGS) -o $@

# The embedding example linked lean (docs/embedding.md): `make embed VARIANTS="softmax causal-linear"` builds no
# model (the Generator reads the checkpoint: models/generator_checkpoint.h) and accepts the attention variants named
# (a generated list in place of REGISTER_ALL_OBJ), drops the functions nothing reaches (--gc-sections) and the
# symbols (-s), statically linked (not in the sanitizer and CUDA builds, whose runtimes are shared libraries).
# embed.map lists the archive members the link took (tests/tools/embed_lean_c_api.sh checks that no variant's file
# is among them).
VARIANTS ?= softmax causal-linear
EMBED_DIR := $(BUILD)/embed-lean
EMBED_STATIC := $(if $(filter 1,$(SANITIZE) $(CUDA)),,-static)
# The static embed's own terminate handler drops libstdc++'s demangler (tools/lean/quiet_terminate.cpp).
EMBED_OBJ := $(if $(EMBED_STATIC),$(BUILD)/obj/tools/lean/quiet_terminate.o)
# ISA=scalar|neon|avx2|avx512 caps the embed's kernel dispatch at that level when it is built (engine/simd_cap.h):
# the dispatch's files are compiled again with the cap into $(EMBED_DIR)/isa-$(ISA)/ and linked before the
# archive, whose copies of them the link then leaves, and with them every wider table. Unset: no cap.
ISA ?=
ISA_LEVEL_scalar := Scalar
ISA_LEVEL_neon := Neon
ISA_LEVEL_avx2 := Avx2
ISA_LEVEL_avx512 := Avx512
ISA_TABLES_scalar := scalar
ISA_TABLES_neon := scalar neon
ISA_TABLES_avx2 := scalar avx2
ISA_TABLES_avx512 := scalar avx2 avx512
ifneq ($(ISA),)
  ifeq ($(ISA_LEVEL_$(ISA)),)
    $(error ISA=$(ISA): expected scalar, neon, avx2 or avx512)
  endif
  EMBED_ISA_DIR := $(EMBED_DIR)/isa-$(ISA)
  EMBED_ISA_OBJ := $(patsubst %,$(EMBED_ISA_DIR)/%.o,engine/cpu_features engine/vec_kernels ops/gemm ops/quant)
  EMBED_OBJ += $(EMBED_ISA_OBJ)
$(EMBED_ISA_DIR)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DENG_SIMD_CAP=$(ISA_LEVEL_$(ISA)) -c $< -o $@
$(EMBED_ISA_DIR)/ops/quant.o: CXXFLAGS += -ffp-contract=off
-include $(EMBED_ISA_OBJ:.o=.d)
endif
# The code that runs once, before the first token (reading the checkpoint, its JSON header and configuration, the
# command line, the checks and their messages), compiled again at -Os into $(EMBED_DIR)/cold/ and linked before the
# archive like the ISA objects: 86 KB less, no change per token (the kernels, GEMM, the Generator and the thread
# pool keep -O3). This and the tables below in static builds only: the sanitizer and CUDA builds' embed checks ids.
ifneq ($(EMBED_STATIC),)
EMBED_COLD_DIR := $(EMBED_DIR)/cold
EMBED_COLD_OBJ := $(patsubst %,$(EMBED_COLD_DIR)/%.o,engine/json engine/cli engine/safetensors engine/parse_number \
	engine/safe_text engine/error engine/file_io engine/mapped_file engine/tensor models/checkpoint \
	models/generator_checkpoint models/quantized models/transformer models/attention/options)
EMBED_OBJ += $(EMBED_COLD_OBJ)
$(EMBED_COLD_DIR)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -O%,$(CXXFLAGS)) -Os -c $< -o $@
-include $(EMBED_COLD_OBJ:.o=.d)
# The vector kernel tables without their training entries (ENG_VEC_INFERENCE_ONLY, engine/vec_kernels.h): the
# backward passes, losses and Adam of each table the dispatch may pick are not linked. Their functions are then
# unused, hence -Wno-unused-function.
EMBED_TABLE_DIR := $(EMBED_DIR)/tables
EMBED_TABLES := $(or $(ISA_TABLES_$(ISA)),scalar avx2 avx512 neon)
EMBED_TABLE_OBJ := $(patsubst %,$(EMBED_TABLE_DIR)/engine/vec_kernels_%.o,$(EMBED_TABLES))
EMBED_OBJ += $(EMBED_TABLE_OBJ)
$(EMBED_TABLE_DIR)/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DENG_VEC_INFERENCE_ONLY -Wno-unused-function -c $< -o $@
$(EMBED_TABLE_DIR)/engine/vec_kernels_avx2.o: CXXFLAGS += $(VEC_AVX2_FLAGS)
$(EMBED_TABLE_DIR)/engine/vec_kernels_avx512.o: CXXFLAGS += $(VEC_AVX512_FLAGS)
-include $(EMBED_TABLE_OBJ:.o=.d)
endif
.PHONY: embed force
embed: $(EMBED_DIR)/embed
	@ls -l $<
# The variants the embed accepts: those whose step form the Generator runs (models/generator.h), which builds no
# attention class, so none is registered.
EMBED_RUNS := softmax stateful-softmax linear causal-linear
ifneq ($(filter-out $(EMBED_RUNS),$(VARIANTS)),)
  $(error VARIANTS: the lean embed runs $(EMBED_RUNS), not $(filter-out $(EMBED_RUNS),$(VARIANTS)))
endif
$(EMBED_DIR)/variants.cpp: force
	@mkdir -p $(dir $@)
	@{ echo '// Generated by make embed: the attention variants VARIANTS names ($(VARIANTS)); ISA: $(or $(ISA),none).'; \
	  echo '#include <string>'; echo '#include <vector>'; echo '#include "tools/tool_main.h"'; \
	  echo 'void eng::register_program_variants() {}'; \
	  echo 'const std::vector<std::string>& embed_variants() {'; \
	  echo '  static const std::vector<std::string> names{$(foreach v,$(sort $(VARIANTS)),"$(v)",)};'; \
	  echo '  return names;'; echo '}'; } >$@.new
	@cmp -s $@.new $@ && rm $@.new || mv $@.new $@
$(EMBED_DIR)/variants.o: $(EMBED_DIR)/variants.cpp
	$(CXX) $(CXXFLAGS) -c $< -o $@
# Without --tensor-step (tools/embed.cpp): LanguageModel::step was 164 KB of the static program.
$(EMBED_DIR)/embed.o: tools/embed.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(filter-out -O%,$(CXXFLAGS)) -Os -DENG_EMBED_GENERATOR_ONLY -c $< -o $@
# The link drops the -fno-lto of LDFLAGS: with it, GCC links the machine code and the -flto below does nothing.
$(EMBED_DIR)/embed: $(EMBED_DIR)/embed.o $(EMBED_DIR)/variants.o $(EMBED_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(BUILD)/libengine.a $(filter-out -fno-lto,$(LDFLAGS)) $(EMBED_STATIC) -Wl,--gc-sections -s \
	  $(if $(LTO),-flto=auto $(filter -O%,$(CXXFLAGS)) -Wno-free-nonheap-object) -Wl,-Map,$(EMBED_DIR)/embed.map -o $@

# The cases a cross build runs under qemu-user in CI (.ci/run): the SIMD and scalar kernels, GEMM, the quantized
# products, the Generator, mapped and buffer loading, and what the lean build rests on. Only these test files are
# compiled, so that the 32-bit ARM stage costs the library and a few test files, not the whole suite.
PORTABLE_TEST_SRC := tests/main.cpp tests/gradcheck.cpp \
	$(addprefix tests/test_,vec_kernels.cpp gemm.cpp quant.cpp quant_model.cpp generator.cpp generator_checkpoint.cpp \
	zero_copy.cpp lean_build.cpp)
$(BUILD)/run_portable_tests: $(PORTABLE_TEST_SRC:%.cpp=$(BUILD)/obj/%.o) $(LIB_OBJ)
	$(CXX) $^ $(LDFLAGS) -o $@

# The C interface's test (models/c_api.h): a C program, compiled as C, linked with the library.
CC_FOR_TESTS := $(patsubst %g++,%gcc,$(patsubst %clang++,%clang,$(CXX)))
$(BUILD)/obj/tests/c_api_test.o: tests/c_api_test.c models/c_api.h
	@mkdir -p $(dir $@)
	$(CC_FOR_TESTS) -std=c99 -pedantic -Wall -Wextra -Werror -O1 -I. $(SANFLAGS) -c $< -o $@
$(BUILD)/c_api_test: $(BUILD)/obj/tests/c_api_test.o $(BUILD)/libengine.a
	$(CXX) $< $(BUILD)/libengine.a $(LDFLAGS) -Wl,-Map,$@.map -o $@

# The inference path without exceptions and RTTI (docs/embedding.md): every library source the C interface's test
# links (the archive members its link map lists; a member's name is its file's, so a name two directories share
# brings both files) compiled with -fno-exceptions -fno-rtti, for syntax and semantics only (no code generated:
# seconds, not minutes). Each file is one target, so that it gets its instruction-set flags (above).
.PHONY: check-no-exceptions
check-no-exceptions: $(BUILD)/c_api_test
	@members=$$(grep -o '^$(BUILD)/libengine.a([^)]*)' $<.map | sed 's/.*(\(.*\)\.o)/\1/' | sort -u); \
	  checks=$$(for f in $(filter %.cpp,$(LIB_SRC)); do \
	    case " "$$(echo $$members)" " in *" $$(basename $$f .cpp) "*) echo $(NOEXC)/$${f%.cpp}.check ;; esac; done); \
	  echo "check-no-exceptions: $$(echo $$checks | wc -w) sources and the lean embed's program"; \
	  $(MAKE) --no-print-directory $$checks $(NOEXC)/tools/embed.check
$(NOEXC)/tools/embed.check: CXXFLAGS += -DENG_EMBED_GENERATOR_ONLY
$(NOEXC)/%.check: %.cpp force
	$(CXX) $(filter-out -MMD -MP,$(CXXFLAGS)) -fno-exceptions -fno-rtti -fsyntax-only $<

# Tests link the library objects directly (not the archive) so that every op file's registration
# is present: the registry test must see all ops, even those no test calls.
$(BUILD)/run_tests: $(TEST_OBJ) $(LIB_OBJ)
	$(CXX) $^ $(LDFLAGS) -o $@

$(TEST_OBJ): | check-doctest
# The test files are compiled at -O1: they are mostly assertions and small reference loops, and -O3 spends 40 %
# more compile time on them than the suite gains in run time. The library they test keeps its -O3.
$(TEST_OBJ): CXXFLAGS := $(filter-out -O% -flto=auto -ffat-lto-objects,$(CXXFLAGS)) -O1

check-doctest:
	@if [ -z "$(DOCTEST_H)" ]; then \
	  echo "doctest is missing: install it with 'apt-get install -y doctest-dev' (Debian/Ubuntu)"; \
	  echo "or put doctest.h at /usr/local/include/doctest/doctest.h"; exit 1; fi

# Every tool: tests/tools.sh runs each, and the README names each, so none may be missing after `make test`.
# The doctest suite and tests/tools.sh run side by side (each is mostly one thread, and the tools' tests wait on
# processes they start); the tools' output is printed after the suite's.
test: $(BUILD)/run_tests $(TOOL_BIN) $(EMBED_DIR)/embed $(BUILD)/c_api_test
	cd $(CURDIR) && bash tests/suite_and_tools.sh $(BUILD) "$(RUN)" $(TEST_ARGS)

# The suite again with the dispatch forced to the scalar reference kernels (ENG_CPU=scalar): the SIMD and
# scalar paths both pass the same tests.
.PHONY: test-scalar
test-scalar: $(BUILD)/run_tests
	cd $(CURDIR) && ENG_CPU=scalar $(RUN) ./$(BUILD)/run_tests $(TEST_ARGS)

clean:
	rm -rf build build-*

# MPI=1 (docs/distributed.md): the library and the tools' objects stay those of the default build; only the Open MPI
# backend (engine/mpi/comm_mpi.cpp) is compiled with mpicxx's flags (its headers as system headers, outside
# -Werror), and train, bench and the collectives' check are linked with it into $(BUILD)/mpi/.
ifeq ($(MPI),1)
  MPICXX ?= mpicxx
  ifeq ($(shell command -v $(MPICXX) 2>/dev/null),)
    $(error MPI=1 needs $(MPICXX): apt-get install -y openmpi-bin libopenmpi-dev)
  endif
  MPI_COMPILE := $(patsubst -I%,-isystem %,$(shell $(MPICXX) --showme:compile))
  MPI_LINK := $(shell $(MPICXX) --showme:link)
  MPI_OBJ := $(BUILD)/mpi/obj/comm_mpi.o
  LINK_LIB := $(BUILD)/libengine.a $(LDFLAGS) $(MPI_LINK)
all: $(BUILD)/mpi/train $(BUILD)/mpi/bench
$(MPI_OBJ): engine/mpi/comm_mpi.cpp
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) $(MPI_COMPILE) -c $< -o $@
$(BUILD)/mpi/train: $(BUILD)/obj/tools/train.o $(TRAIN_OBJ) $(REGISTER_ALL_OBJ) $(MPI_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(LINK_LIB) -o $@
$(BUILD)/mpi/bench: $(BUILD)/obj/tools/bench.o $(BENCH_OBJ) $(BENCH_TRAIN_OBJ) $(REGISTER_ALL_OBJ) $(MPI_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(LINK_LIB) -o $@
$(BUILD)/mpi/comm_check: $(BUILD)/obj/tests/mpi/comm_check.o $(REGISTER_ALL_OBJ) $(MPI_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(LINK_LIB) -o $@
$(BUILD)/mpi/checkpoint_close: $(BUILD)/obj/tests/mpi/checkpoint_close.o $(REGISTER_ALL_OBJ) $(BUILD)/libengine.a
	$(CXX) $(filter %.o,$^) $(BUILD)/libengine.a $(LDFLAGS) -o $@
-include $(MPI_OBJ:.o=.d) $(BUILD)/obj/tests/mpi/comm_check.d $(BUILD)/obj/tests/mpi/checkpoint_close.d
.PHONY: test-mpi
test-mpi: $(BUILD)/mpi/train $(BUILD)/mpi/bench $(BUILD)/mpi/comm_check $(BUILD)/mpi/checkpoint_close $(BUILD)/train
	cd $(CURDIR) && bash tests/mpi.sh $(BUILD)
endif

-include $(LIB_OBJ:.o=.d) $(TEST_OBJ:.o=.d) $(BENCH_OBJ:.o=.d) $(TRAIN_OBJ:.o=.d) $(TOOL_BIN:$(BUILD)/%=$(BUILD)/obj/tools/%.d) \
	$(REGISTER_ALL_OBJ:.o=.d) $(EMBED_DIR)/variants.d $(EMBED_DIR)/embed.d $(BUILD)/obj/tools/lean/quiet_terminate.d

# The main job: a small copy-task transformer with causal linear attention, trained end to end on the CPU,
# then the speed of its RNN-form generation beside softmax's KV cache at the same size.
RUN_FLAGS ?= --layers 2 --heads 4 --d-model 64 --seq-len 32 --batch 32 --steps 4000 --lr 1e-3 \
	--schedule step:3000=1e-4 --eval-every 250 --eval-batches 8 --log-every 25 --target-accuracy 0.99 \
	--attention causal-linear
RUN_GENERATE_FLAGS ?= --layers 2 --heads 4 --d-model 64 --tokens 1024 --batch 32 --modes stateful,linear
# The whole suite cross-built for ARM64 and run under qemu-user (apt-get install g++-aarch64-linux-gnu qemu-user).
.PHONY: test-aarch64
test-aarch64:
	$(MAKE) CXX=aarch64-linux-gnu-g++ test

.PHONY: run
run: $(BUILD)/train $(BUILD)/bench
	./$(BUILD)/train copy $(RUN_FLAGS)
	./$(BUILD)/bench generate $(RUN_GENERATE_FLAGS)

# Fashion-MNIST for the pixel-model experiments: Debian's dataset-fashion-mnist package, installed in
# /usr/share/datasets/fashion-mnist (what datasets/mnist.cpp reads by default; --data DIR reads another copy).
FASHION_MNIST_DIR := /usr/share/datasets/fashion-mnist
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
.PHONY: data
data:
	@if [ -f $(FASHION_MNIST_DIR)/t10k-labels-idx1-ubyte.gz ]; then \
	  echo "Fashion-MNIST is installed in $(FASHION_MNIST_DIR)"; \
	else \
	  $(SUDO) apt-get install -y dataset-fashion-mnist || \
	    { $(SUDO) apt-get update && $(SUDO) apt-get install -y dataset-fashion-mnist; }; \
	fi

# Fuzzing (clang's libFuzzer, under AddressSanitizer + UBSan): one binary per target of tests/fuzz/targets.h,
# each run for FUZZ_SECONDS from the committed seeds. New corpus entries stay in build-fuzz/corpus/; a crash
# leaves its input in build-fuzz/crashes/, to be committed under tests/fuzz/regressions/<target>/ with the fix.
FUZZ_TARGETS := safetensors idx cifar10 text gunzip cli tokenizer_json gpt2_vocab tokenizer_bin tokenize quantized
FUZZ_SECONDS ?= 60
FUZZ_CXX ?= clang++
FUZZ_DIR := build-fuzz
FUZZ_FLAGS := -O1 -g1 -std=c++17 -Wall -Wextra -Werror -pthread -I. -MMD -MP -fno-omit-frame-pointer \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined
# What the readers need, and no attention variant or op but the quantized products: the fuzz build stays small.
# The objects go into an archive, so that the linker takes only those the targets reach (a dataset file using ops
# is left out).
FUZZ_SRC := $(wildcard engine/*.cpp datasets/*.cpp) models/module.cpp models/attention/options.cpp models/quantized.cpp \
	$(wildcard ops/quant*.cpp)
FUZZ_OBJ := $(FUZZ_SRC:%.cpp=$(FUZZ_DIR)/obj/%.o)
FUZZ_MAIN_OBJ := $(FUZZ_DIR)/obj/tests/fuzz/targets.o
-include $(FUZZ_OBJ:.o=.d) $(FUZZ_MAIN_OBJ:.o=.d)
.SECONDARY: $(FUZZ_OBJ) $(FUZZ_MAIN_OBJ)
$(FUZZ_DIR)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer-no-link -c $< -o $@
$(FUZZ_DIR)/obj/engine/vec_kernels_avx2.o: FUZZ_FLAGS += $(VEC_AVX2_FLAGS)
$(FUZZ_DIR)/obj/engine/vec_kernels_avx512.o: FUZZ_FLAGS += $(VEC_AVX512_FLAGS)
$(FUZZ_DIR)/obj/ops/quant_kernels_avx2.o: FUZZ_FLAGS += $(VEC_AVX2_FLAGS)
$(FUZZ_DIR)/obj/ops/quant_kernels_avx512.o: FUZZ_FLAGS += $(VEC_AVX512_FLAGS) -mavx512vnni
$(FUZZ_DIR)/libfuzzdeps.a: $(FUZZ_OBJ)
	@rm -f $@
	ar rcs $@ $^
$(FUZZ_DIR)/fuzz_%: tests/fuzz/main.cpp $(FUZZ_MAIN_OBJ) $(FUZZ_DIR)/libfuzzdeps.a
	$(FUZZ_CXX) $(FUZZ_FLAGS) -fsanitize=fuzzer -DENG_FUZZ_TARGET=$* $^ -o $@
# Each target's run is its own goal, so that `make -j2 fuzz` runs two fuzzers at a time (each is one thread).
FUZZ_RUNS := $(FUZZ_TARGETS:%=fuzz-run-%)
.PHONY: fuzz $(FUZZ_RUNS)
fuzz: $(FUZZ_RUNS)
$(FUZZ_RUNS): fuzz-run-%: $(FUZZ_DIR)/fuzz_%
	@mkdir -p $(FUZZ_DIR)/crashes $(FUZZ_DIR)/corpus/$*
	@./$(FUZZ_DIR)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_DIR)/crashes/$*- $(FUZZ_DIR)/corpus/$* tests/fuzz/seeds/$* \
	  >$(FUZZ_DIR)/$*.log 2>&1 || { echo "== fuzz $* FAILED"; tail -40 $(FUZZ_DIR)/$*.log; exit 1; }
	@echo "== fuzz $* for $(FUZZ_SECONDS) s:" \
	  $$(grep -E "stat::number_of_executed_units|stat::peak_rss_mb" $(FUZZ_DIR)/$*.log | tr -s ' \n' ' ')
