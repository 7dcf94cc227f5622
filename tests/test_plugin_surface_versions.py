"""A backend written against another version of a surface it builds on (opcore.torchkit's
TORCHKIT_API_VERSION, opcore.onemodel's ONEMODEL_API_VERSION) is unavailable, with why: it
registers nothing, opcore doctor shows the reason, and the other backends run its ops.

Each backend states the version it was built for (``TORCHKIT_BUILT_FOR``, ``ONEMODEL_BUILT_FOR``);
the test moves that number, which is what installing an older or newer backend release does.
"""

from __future__ import annotations

import importlib
import importlib.util

import numpy
import pytest

import opcore
from opcore.extend import ONEMODEL_API_VERSION, TORCHKIT_API_VERSION

# backend -> (module stating its version, the constant, the surface, the distribution, a runtime it needs)
BACKENDS = {
    "cpu": ("opcore_cpu.system", "TORCHKIT_BUILT_FOR", "torchkit", "opcore-cpu", "torch"),
    "cuda": ("opcore_cuda.system", "TORCHKIT_BUILT_FOR", "torchkit", "opcore-cuda", "torch"),
    "onnxruntime": ("opcore_onnxruntime.plugin", "ONEMODEL_BUILT_FOR", "onemodel", "opcore-onnxruntime", "onnxruntime"),
    "openvino": ("opcore_openvino.plugin", "ONEMODEL_BUILT_FOR", "onemodel", "opcore-openvino", "openvino"),
}


def _module(backend: str):
    where, *_ = BACKENDS[backend]
    return importlib.import_module(where)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_each_backend_states_the_version_this_opcore_provides(backend):
    _, constant, surface, *_ = BACKENDS[backend]
    provided = {"torchkit": TORCHKIT_API_VERSION, "onemodel": ONEMODEL_API_VERSION}[surface]
    assert getattr(_module(backend), constant) == provided


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_a_backend_built_for_another_version_is_unavailable_with_why(backend, monkeypatch):
    where, constant, surface, distribution, _ = BACKENDS[backend]
    module = _module(backend)
    monkeypatch.setattr(module, constant, getattr(module, constant) + 1)
    plugin = importlib.import_module(where.rsplit(".", 1)[0] + ".plugin")
    reason = plugin.opcore_backend().check_availability()
    assert isinstance(reason, str), reason
    assert reason.startswith(f"{distribution} was built for opcore's {surface} API ")
    assert f"pip install -U {distribution}" in reason


@pytest.mark.parametrize("backend", ["cpu", "onnxruntime", "openvino"])
def test_the_host_goes_on_without_it(backend, monkeypatch):
    *_, distribution, runtime = BACKENDS[backend]
    if importlib.util.find_spec(runtime) is None:
        pytest.skip(f"{runtime} is not installed here: the {backend} backend is unavailable anyway")
    module = _module(backend)
    constant = BACKENDS[backend][1]
    monkeypatch.setattr(module, constant, getattr(module, constant) + 1)
    opcore.reload_plugins()
    try:
        report = next(r for r in opcore.backends() if r.name == backend)
        assert report.status is opcore.PluginStatus.UNAVAILABLE
        assert f"{distribution} was built for" in report.reason
        x = numpy.array([-1.0, 2.0], dtype=numpy.float32)
        assert opcore.explain("relu", x).backend not in (backend, None)
        assert opcore.run("relu", x).tolist() == [0.0, 2.0]
    finally:
        monkeypatch.undo()
        opcore.reload_plugins()
