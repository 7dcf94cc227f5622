# make demo: set up .venv with every distribution in this repository, then run the demo. The core's
#   optional compiled parts (setup.py) are built in place where a compiler is: opcore._fastrun (C), then,
#   with the core built again against the installed torch, opcore._torchguard (C++, torch's headers);
#   without a compiler pip warns and opcore stays pure Python.
# make test: the same setup, then ruff, mypy, import-linter's contracts (pyproject.toml), the whole test
#   suite (where a C++ compiler is, a missing opcore._torchguard fails it: EXPECT_TORCHGUARD), the
#   dispatch, resolved and some graph tests again on the pure-Python path (test-pure), the cpu and nn
#   tests with oneDNN capped at AVX2, and the conformance kit (what CI runs).
# make test-oldest: the backend tests and the kit with the oldest onnxruntime, onnx and openvino the
#   plugins declare, in .venv-oldest.
# make constraints: re-resolve the newest versions (torch stays pinned) and rewrite constraints.txt.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# every distribution in the repository: the core, then each backend folder with a pyproject
DISTS  := . $(patsubst %/pyproject.toml,%,$(wildcard opcore_*/pyproject.toml plugins/*/pyproject.toml))
STAMP  := $(VENV)/.installed
OLDEST := .venv-oldest

.PHONY: demo test test-avx2 test-oldest constraints conformance lint bench docs clean

$(STAMP): constraints.txt requirements-dev.txt $(addsuffix /pyproject.toml,$(DISTS)) setup.py opcore/_fastrun.c opcore/_torchguard.cpp
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -r requirements-dev.txt $(addprefix -e ,$(DISTS))
	# the core again, without build isolation: its build now sees the pinned torch and compiles opcore._torchguard
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	EXPECT_TORCHGUARD=$(if $(shell command -v c++ 2>/dev/null),1,0) $(BIN)/python -m pytest
	$(MAKE) test-pure
	$(MAKE) test-avx2
	$(MAKE) conformance

# the dispatch, resolved and graph-plan tests again in a process without opcore's compiled parts
# (OPCORE_PURE_PYTHON=1: what a wheel installed without a compiler runs; run(), ResolvedOp's base, the
# tensor guard and the weights watch in Python or torch's own; ~1 min here: 62 s wall at load 4.4)
PURE_TESTS := tests/test_dispatch.py tests/test_resolved.py tests/test_resolved_torch.py tests/test_slot_layout.py \
	tests/test_torch_style_arguments.py tests/test_graph_signature.py tests/test_graph_torch_route.py \
	tests/test_graph_weights.py tests/test_graph_ranges.py
.PHONY: test-pure
test-pure: $(STAMP)
	OPCORE_PURE_PYTHON=1 $(BIN)/python -m pytest -q $(PURE_TESTS)

# the cpu and nn tests again with oneDNN capped at AVX2: on an AVX-512 machine this covers the path
# an AVX2-only CPU takes (the tests expect what opcore_cpu.system.onednn_bfloat16_reason says; the
# openvino backend is unavailable under that cap on an AVX-512 CPU: docs/backends/openvino.md)
test-avx2: $(STAMP)
	ONEDNN_MAX_CPU_ISA=AVX2 $(BIN)/python -m pytest -q $(wildcard tests/test_cpu_*.py) $(wildcard tests/test_nn_*.py)

# the conformance kit (opcore.testing) against every backend of this repository; a backend that is
# unavailable here (cuda without a GPU) is reported as not run, with its reason. TF32 off: the kit's
# float32 tolerances are float32's (docs/backends/cuda.md)
conformance: $(STAMP)
	NVIDIA_TF32_OVERRIDE=0 $(BIN)/python -m pytest -p opcore.testing.plugin --pyargs opcore.testing \
	    --opcore-backend reference --opcore-backend cpu --opcore-backend onnxruntime --opcore-backend openvino \
	    $(if $(wildcard opcore_cuda/pyproject.toml),--opcore-backend cuda)
	$(BIN)/python -m pytest plugins/example/tests

# the oldest declared runtimes (scripts/constraints.py oldest reads the plugins' floors)
$(OLDEST)/.installed: constraints.txt requirements-dev.txt scripts/constraints.py $(addsuffix /pyproject.toml,$(DISTS)) setup.py opcore/_fastrun.c
	$(PYTHON) -m venv $(OLDEST)
	$(OLDEST)/bin/python -m pip install --quiet --upgrade pip 'tomli; python_version < "3.11"'
	$(OLDEST)/bin/python scripts/constraints.py oldest > $(OLDEST)/constraints.txt
	$(OLDEST)/bin/python -m pip install --quiet -c $(OLDEST)/constraints.txt -r requirements-dev.txt $(addprefix -e ,$(DISTS))
	touch $@

test-oldest: $(OLDEST)/.installed
	$(OLDEST)/bin/python -m pip list 2>/dev/null | grep -iE '^(numpy|onnx|onnxruntime|openvino|torch) '
	$(OLDEST)/bin/python -m pytest -q $(wildcard tests/test_onnxruntime_*.py) $(wildcard tests/test_openvino_*.py)
	$(OLDEST)/bin/python -m pytest -q -p opcore.testing.plugin --pyargs opcore.testing \
	    --opcore-backend reference --opcore-backend onnxruntime --opcore-backend openvino

# every package pinned to what a fresh resolve picks today (torch kept at its pin): run make test
# after it, and commit constraints.txt only when that passes
constraints:
	rm -rf build/constraints-venv
	$(PYTHON) -m venv build/constraints-venv
	build/constraints-venv/bin/python -m pip install --quiet --upgrade pip
	build/constraints-venv/bin/python -m pip install --quiet "$$(grep '^torch==' constraints.txt)" \
	    -r requirements-dev.txt $(addprefix -e ,$(DISTS))
	build/constraints-venv/bin/python scripts/constraints.py refresh > build/constraints.txt
	mv build/constraints.txt constraints.txt
	rm -rf build/constraints-venv

# mypy takes its files and settings from pyproject.toml's [tool.mypy] (the whole repository)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

docs: $(STAMP)
	$(BIN)/python scripts/gen_ops_doc.py

clean:
	rm -rf $(VENV) $(OLDEST) build dist *.egg-info
