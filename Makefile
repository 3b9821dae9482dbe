# The two commands a newcomer runs: `make demo` and `make test`. Each sets up
# what it needs (apt packages, .venv, pip packages, the C++ build) and is
# quick when nothing changed.

SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
STAMPS := $(VENV)/.stamps
export CMAKE_BUILD_PARALLEL_LEVEL := 2

CSRC := $(shell find csrc -name '*.cc' -o -name '*.h' -o -name CMakeLists.txt 2>/dev/null)
# The editable install maps each Python module to its file: adding or
# removing one needs a reinstall (editing one does not, but costs only seconds).
PYSRC := $(shell find python -name '*.py' 2>/dev/null)

.PHONY: all demo test test-cpp test-python build cpp asan hf-suite opinfo bench-runtime bench-eager bench-compile bench-moe bench-hf-ecosystem bench-serving bench-distributed readiness-examples bench bench-quick torchtitan clean

all: build

# --- system packages -------------------------------------------------------
$(STAMPS)/apt: tools/apt-packages.txt | $(STAMPS)
	tools/install_apt_packages.sh tools/apt-packages.txt
	@touch $@

# --- Python environment ----------------------------------------------------
$(PY):
	python3 -m venv $(VENV)

$(STAMPS): | $(PY)
	mkdir -p $(STAMPS)

$(STAMPS)/pip: requirements/dev.txt requirements/plugin-cpu.txt | $(STAMPS)
	$(PIP) install -q -r requirements/dev.txt
	$(PIP) install -q --no-deps --require-hashes -r requirements/plugin-cpu.txt
	@touch $@

# --- builds ----------------------------------------------------------------
# The extension, installed editable into the venv. Rebuilt when any C++ or
# build file changes; scikit-build-core reuses build/py-* incrementally.
$(STAMPS)/build: $(STAMPS)/apt $(STAMPS)/pip pyproject.toml CMakeLists.txt $(CSRC) tools/fetch_pjrt_header.py $(PYSRC)
	$(PIP) install -q --no-build-isolation --no-deps -e .
	@touch $@

build: $(STAMPS)/build

# The torch-free runtime and its GoogleTest suite.
build/cpp/build.ninja: CMakeLists.txt tests/cpp/CMakeLists.txt benchmarks/cpp/CMakeLists.txt | $(STAMPS)/apt $(STAMPS)/pip
	cmake -S . -B build/cpp -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE=$(abspath $(PY))

cpp: build/cpp/build.ninja
	ninja -C build/cpp -j2

# --- the two commands ------------------------------------------------------
test: test-cpp test-python

test-cpp: cpp
	ctest --test-dir build/cpp -j2 --output-on-failure

# The device, training and Transformers files run a second time under fused
# eager mode: its results must match strict's within the tests' tolerances.
FUSED_TESTS = tests/test_device.py tests/test_eager.py tests/test_storage_views.py \
	tests/test_copies.py tests/test_random.py tests/test_training.py \
	tests/test_training_errors.py tests/test_ops_training.py tests/test_transformers.py \
	tests/test_moe_ops.py tests/test_kernel_library.py tests/test_ops_rnn_cells.py \
	tests/test_ops_former_fallbacks.py tests/test_fused_optimizers.py

# --durations: the slowest tests, printed where CI logs them, to keep the
# suite inside its 30-minute budget on 2 cores. -n 2: two worker processes
# (pytest-xdist); most tests keep one core busy with Python and compiles,
# so two workers cut the wall time by about a quarter. Each worker has its
# own compile cache (tests/conftest.py), and multi-process tests pick free ports.
# The distributed tests run alone afterwards: their multi-process runs (a
# 4-rank torchrun) would share 2 cores with the other worker, and their
# ranks-as-threads run uses XLA's in-process collectives, whose rendezvous
# aborts the process when a participant is 40 s late (a stall once seen
# under that load; its cause is fixed, see docs/ARCHITECTURE.md, Build).
PYTEST_WORKERS ?= 2
test-python: build $(STAMPS)/bench-pip $(STAMPS)/kernels-pip $(STAMPS)/hf-suite-pip $(STAMPS)/hf-ecosystem-pip
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --durations=25 --ignore=tests/test_distributed.py tests
	$(PY) -m pytest -q --durations=5 tests/test_distributed.py
	$(PY) -m pytest -q -n $(PYTEST_WORKERS) --eager-mode=fused $(FUSED_TESTS)

demo: build
	$(PY) -m torch_pjrt.demo

# --- extras ----------------------------------------------------------------
# The example readiness reports under docs/ (docs/readiness.md), made by the
# command as shipped; the prices are illustrative, not quotes.
READINESS_PRICES := --price tpu=1.20 --price cpu=0.10
readiness-examples: build
	for ex in tiny-llama-train minilm-embed; do \
	  $(PY) -m torch_pjrt.readiness --example $$ex --budget 10m $(READINESS_PRICES) \
	    --out docs/readiness-examples/$$ex || exit $$?; \
	  rm -rf docs/readiness-examples/$$ex/parts; \
	done

# The runtime tests under AddressSanitizer and UBSan, then the extension
# built with both and a short Python run (eager, views, errors, training,
# compile; tools/asan/python_smoke.py). Python is not instrumented: the
# sanitizer runtime is preloaded, and leaks are not checked there (CPython
# and torch keep allocations until exit by design).
asan: build | $(STAMPS)/apt $(STAMPS)/pip
	cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTORCH_PJRT_SANITIZE=ON -DPython3_EXECUTABLE=$(abspath $(PY))
	ninja -C build/asan -j2 pjrt_runtime_test
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 LSAN_OPTIONS=suppressions=$(abspath tools/lsan.supp) ctest --test-dir build/asan -j2 --output-on-failure
	cmake -S . -B build/asan-py -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTORCH_PJRT_SANITIZE=ON -DTORCH_PJRT_BUILD_PYTHON=ON -DPython3_EXECUTABLE=$(abspath $(PY))
	ninja -C build/asan-py -j2 _C
	LD_PRELOAD="$$(g++ -print-file-name=libasan.so) $$(g++ -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	$(PY) tools/asan/stage.py build/asan-py tools/asan/python_smoke.py

# Hugging Face's own Transformers test files (../shared/transformers-tests, or
# HF_TESTS=DIR) on the CPU and on tpu, test by test: the table goes to
# benchmarks/results/hf-suite-DATE.md. HF_SUITE_ARGS="--families bert -k x".
$(STAMPS)/hf-suite-pip: requirements/hf-suite.txt requirements/constraints.txt | $(STAMPS)/pip
	$(PIP) install -q -r requirements/hf-suite.txt -c requirements/constraints.txt
	@touch $@

# Diffusers, PEFT, TRL and Transformers' serving extras, for tests/hf_ecosystem.
$(STAMPS)/hf-ecosystem-pip: requirements/hf-ecosystem.txt requirements/constraints.txt | $(STAMPS)/pip
	$(PIP) install -q -r requirements/hf-ecosystem.txt -c requirements/constraints.txt
	@touch $@

hf-suite: build $(STAMPS)/hf-suite-pip
	$(PY) tools/hf_suite/run.py $(if $(HF_TESTS),--tests $(HF_TESTS)) $(HF_SUITE_ARGS)

# The OpInfo census: every op of PyTorch's op_db on tpu against the CPU,
# sample by sample, forward and backward (tools/opinfo/run.py). Writes
# benchmarks/results/opinfo-census.json, docs/op-coverage.md and the known
# gaps tests/test_opinfo_census.py accepts. OPINFO_ARGS="--ops add,sort --jobs 2".
opinfo: build
	$(PY) tools/opinfo/run.py $(OPINFO_ARGS)

bench-runtime: cpp
	$(PY) benchmarks/runtime.py --binary build/cpp/benchmarks/cpp/runtime_bench

bench-eager: build
	$(PY) benchmarks/eager_ops.py
	$(PY) benchmarks/dataloader_feed.py

bench-compile: build $(STAMPS)/bench-pip
	$(PY) benchmarks/compile.py

bench-moe: build $(STAMPS)/bench-pip
	$(PY) benchmarks/moe.py

bench-hf-ecosystem: build $(STAMPS)/bench-pip $(STAMPS)/hf-ecosystem-pip
	$(PY) benchmarks/hf_ecosystem.py

bench-serving: build $(STAMPS)/hf-ecosystem-pip
	$(PY) benchmarks/hf_serving.py

bench-distributed: build
	$(PY) benchmarks/distributed.py

# The benchmark harness (docs/BENCHMARKS.md): every workload in every mode.
$(STAMPS)/bench-pip: requirements/bench.txt requirements/bench-binary.txt | $(STAMPS)/pip
	$(PIP) install -q --no-deps --require-hashes -r requirements/bench-binary.txt
	$(PIP) install -q -r requirements/bench.txt
	@touch $@

# Hugging Face Kernels (requirements/kernels.txt), for the hub-kernel tests.
$(STAMPS)/kernels-pip: requirements/kernels.txt | $(STAMPS)/pip
	$(PIP) install -q --no-deps --require-hashes -r requirements/kernels.txt
	@touch $@

bench: build $(STAMPS)/bench-pip $(STAMPS)/hf-ecosystem-pip
	$(PY) -m torch_pjrt.bench --plot $(BENCH_ARGS)

bench-quick: build $(STAMPS)/bench-pip $(STAMPS)/hf-ecosystem-pip
	$(PY) -m torch_pjrt.bench --quick --plot $(BENCH_ARGS)

# torchtitan 0.3.0 trains its Llama debug model with FSDP2 on 2 processes,
# on tpu and on the CPU with gloo (docs/DISTRIBUTED.md, "TorchTitan"). Its
# own venv sees .venv and keeps torchtitan's pins out of it.
TT_VENV := .venv-torchtitan
$(TT_VENV)/.installed: requirements/torchtitan.txt | $(STAMPS)/build
	python3 -m venv $(TT_VENV)
	echo "import site; site.addsitedir('$$($(PY) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')')" \
		> "$$($(TT_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/torch_pjrt_venv.pth"
	$(TT_VENV)/bin/python -m pip --disable-pip-version-check install -q --no-deps -r requirements/torchtitan.txt
	@touch $@

torchtitan: build $(TT_VENV)/.installed
	$(TT_VENV)/bin/python examples/torchtitan/compare.py

clean:
	rm -rf build .deps $(STAMPS)
