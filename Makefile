# make demo: set up .venv with every distribution in this repository, then run the demo.
# make test: the same setup, then ruff, the whole test suite, the cpu and nn tests with oneDNN capped at
#   AVX2, and the conformance kit (what CI runs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# every distribution in the repository: the core, then each backend folder with a pyproject
DISTS  := . $(patsubst %/pyproject.toml,%,$(wildcard opcore_*/pyproject.toml plugins/*/pyproject.toml))
STAMP  := $(VENV)/.installed

.PHONY: demo test test-avx2 conformance lint bench docs clean

$(STAMP): constraints.txt requirements-dev.txt $(addsuffix /pyproject.toml,$(DISTS))
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -r requirements-dev.txt $(addprefix -e ,$(DISTS))
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest
	$(MAKE) test-avx2
	$(MAKE) conformance

# the cpu and nn tests again with oneDNN capped at AVX2: on an AVX-512 machine this covers the path
# an AVX2-only CPU takes (the tests expect what opcore_cpu.system.onednn_bfloat16_reason says)
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

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

docs: $(STAMP)
	$(BIN)/python scripts/gen_ops_doc.py

clean:
	rm -rf $(VENV) build dist *.egg-info
