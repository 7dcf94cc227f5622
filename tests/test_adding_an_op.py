"""Adding a built-in op touches three files: its contract (opcore/opset/<family>.py), its reference
kernel (opcore/reference/<family>.py) and its kit entry (opcore/testing/ops/<family>.py); a new
family adds one line to opcore/families.py. Shown with a toy family "toy" holding one op, trunc,
injected as those three modules into a fresh interpreter: it then runs on the reference backend,
and on the torch backend through the by-name ATen fallback (torch.ops.aten.trunc), and the kit
checks both.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

CONTRACT = """
from functools import partial

from opcore.contracts import define_op
from opcore.meta import FLOATING
from opcore.types import TensorMeta

define = partial(define_op, family="toy")

def trunc_meta(x: TensorMeta) -> TensorMeta:
    return x

TRUNC = define("trunc(Tensor x) -> Tensor", meta=trunc_meta, dtypes=FLOATING,
               doc="x rounded towards zero; mirrors torch.trunc.")
CONTRACTS = (TRUNC,)
"""

REFERENCE = """
import numpy

OPS = ("trunc",)

def trunc(x):
    return numpy.asarray(numpy.trunc(x))  # a 0-d array, not a numpy scalar
"""

KIT = """
from opcore.testing.builders import SampleSet
from opcore.testing.records import OpEntry

def trunc_samples():
    s = SampleSet("trunc")
    for dtype in ("float32", "float64", "float16"):
        s.add(f"{dtype}-2x3", s.tensor((2, 3), dtype, low=-5, high=5))
    s.add("empty", s.tensor((0, 4)))
    s.add("0-d", s.tensor(()))
    return s

ENTRIES = (OpEntry("trunc", trunc_samples),)
"""

SCRIPT = f"""
import json, sys, types
import opcore.families

opcore.families.FAMILIES = (*opcore.families.FAMILIES, "toy")  # the one line a new family adds
for name, source in (("opcore.opset.toy", {CONTRACT!r}), ("opcore.reference.toy", {REFERENCE!r}),
                     ("opcore.testing.ops.toy", {KIT!r})):
    module = types.ModuleType(name)
    exec(source, module.__dict__)
    sys.modules[name] = module

import numpy, opcore
from opcore.opset import BUILTIN_DTYPES
from opcore.testing import check_sample, entry, samples_of

x = numpy.array([-1.5, 0.5, 2.7], "float32")
report = {{
    "dtypes": sorted(d.value for d in BUILTIN_DTYPES["trunc"]),
    "reference": opcore.run("trunc", x, backend="reference").tolist(),
    "chosen": {{b: opcore.explain("trunc", x, backend=b).chosen for b in ("reference", "cpu")}},
    "kit": {{b: sorted({{str(check_sample(b, entry("trunc"), s).status) for s in samples_of(entry("trunc"))}})
             for b in ("reference", "cpu", "onnxruntime")}},
}}
print(json.dumps(report))
"""


def test_a_toy_op_needs_only_its_contract_reference_kernel_and_kit_entry():
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)], check=False, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["dtypes"] == ["bfloat16", "float16", "float32", "float64"]
    assert report["reference"] == [-1.0, 0.0, 2.0]
    assert report["chosen"] == {"reference": "reference", "cpu": "cpu/aten-fallback"}
    # every sample passes on reference and on cpu (torch.ops.aten.trunc by name); the graph runtime
    # declares no kernel for it (its kernels package does not list it)
    assert report["kit"] == {"reference": ["passed"], "cpu": ["passed"], "onnxruntime": ["not covered"]}


def test_a_contract_must_name_the_family_module_it_is_in():
    script = """
import sys, types
import opcore.families
opcore.families.FAMILIES = (*opcore.families.FAMILIES, "toy")
from opcore.contracts import define_op
module = types.ModuleType("opcore.opset.toy")
module.CONTRACTS = (define_op("trunc(Tensor x) -> Tensor", meta=lambda x: x, family="elementwise"),)
sys.modules["opcore.opset.toy"] = module
import opcore.opset
"""
    done = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "the contract of 'trunc' in opcore.opset.toy says family='elementwise'" in done.stderr
