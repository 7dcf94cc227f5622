"""opcore.graph.partition: the records, and compilers() collecting each backend's hook."""

from __future__ import annotations

import logging
import pathlib
import subprocess
import sys
import types
from collections.abc import Mapping
from typing import Any

import numpy
import pytest

import opcore
from opcore import BackendSpec, DeviceType
from opcore.graph.partition import (
    PartitionCompiler,
    PartitionError,
    PartitionSpec,
    PartNode,
    ValueRef,
    compilers,
)
from opcore.types import DType, TensorMeta

M = TensorMeta((4, 3), DType.FLOAT32)


class _Compiler:
    def __init__(self, backend: str) -> None:
        self.backend = backend

    def supports(self, op: str) -> bool:
        return op == "relu"

    def compile(self, spec: PartitionSpec) -> Any:
        raise PartitionError(spec.name, self.backend, "not really", node=0, op="relu")

    def load(self, folder: pathlib.Path, record: Mapping[str, Any], spec: PartitionSpec) -> Any:
        raise NotImplementedError


def _plugin(name: str, hook: Any) -> types.SimpleNamespace:
    def opcore_backend() -> BackendSpec:
        return BackendSpec(name=name, version="0", priority=5, device_types=(DeviceType.CPU,))

    def opcore_partition_compiler() -> Any:
        return hook()

    opcore.hookimpl(opcore_backend)
    opcore.hookimpl(opcore_partition_compiler)
    return types.SimpleNamespace(
        __name__=name, opcore_backend=opcore_backend, opcore_partition_compiler=opcore_partition_compiler
    )


def test_a_registered_backends_compiler_is_found() -> None:
    opcore.register_plugin(_plugin("graphy", lambda: _Compiler("graphy")))
    found = compilers()
    assert isinstance(found["graphy"], PartitionCompiler)
    assert found["graphy"].supports("relu") and not found["graphy"].supports("add")
    opcore.unregister_plugin("graphy")
    assert "graphy" not in compilers()


def test_a_failing_or_wrong_hook_is_logged_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    def boom() -> Any:
        raise RuntimeError("no device")

    opcore.register_plugin(_plugin("broken", boom))
    opcore.register_plugin(_plugin("liar", lambda: _Compiler("someone_else")))
    opcore.register_plugin(_plugin("silent", lambda: None))
    with caplog.at_level(logging.WARNING, logger="opcore.graph"):
        found = compilers()
    assert not {"broken", "liar", "silent"} & set(found)
    text = caplog.text
    assert "broken's opcore_partition_compiler() failed: RuntimeError: no device" in text
    assert "not a PartitionCompiler with backend 'liar'" in text


def test_partition_error_names_the_node() -> None:
    error = PartitionError("p3", "openvino", "no rule for Foo", node=2, op="softmax")
    assert isinstance(error, opcore.Unsupported)
    assert (error.node, error.partition, error.backend) == (2, "p3", "openvino")
    assert "partition p3 on openvino: node 2 (softmax) failed: no rule for Foo" in str(error)
    assert "Fix:" in str(error)
    assert "could not compile" in str(PartitionError("p3", "openvino", "boom"))


def test_input_dims_and_prefix() -> None:
    nodes = (
        PartNode("relu", (ValueRef("x"),), ("a",)),
        PartNode("add", (ValueRef("a"), ValueRef("w"), 1), ("b",)),
        PartNode("cat", ((ValueRef("b"), ValueRef("a")), 0), ("c",)),
    )
    spec = PartitionSpec(
        "p0",
        nodes,
        ("x",),
        {"w": numpy.ones((4, 3), "float32")},
        ("c",),
        {"x": M, "a": M, "w": M, "b": M, "c": TensorMeta((8, 3), DType.FLOAT32)},
        {"x": frozenset({0})},
    )
    assert spec.input_dims("x") == (None, 3)
    assert nodes[2].refs() == ("b", "a")
    one = spec.prefix(1)
    assert (one.nodes, one.outputs, tuple(one.constants)) == (nodes[:1], ("a",), ())
    two = spec.prefix(2)
    assert two.outputs == ("b",) and tuple(two.constants) == ("w",) and two.inputs == ("x",)
    assert spec.prefix(3).outputs == ("c",)


def test_constant_over_finds_a_constant_by_its_memory() -> None:
    w = numpy.arange(12, dtype="float32").reshape(4, 3)
    spec = PartitionSpec("p0", (), (), {"w": w, "empty": numpy.zeros(0, "float32")}, (), {"w": M})
    assert spec.constant_over(w) == "w"
    assert spec.constant_over(w.reshape(12)) == "w"  # the same memory seen through another shape
    assert spec.constant_over(w.copy()) is None
    assert spec.constant_over(w[:2]) is None  # part of the memory only
    assert spec.constant_over(w.T) is None  # not C-contiguous
    assert spec.constant_over(numpy.zeros(0, "float32")) is None  # no bytes: nothing to share
    assert spec.constant_over([1.0, 2.0]) is None
    assert spec.prefix(0).constant_over(w) is None  # the prefix keeps no constant


def test_importing_the_interface_imports_no_runtime() -> None:
    code = (
        "import sys, opcore.graph.partition, opcore.graph; opcore.graph.PartitionSpec; "
        "print(sorted(m for m in ('torch', 'onnxruntime', 'openvino', 'onnx') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_compile_or_locate_finds_the_first_node_a_runtime_refuses() -> None:
    """A runtime that refuses any model holding an ``exp`` without saying where: the search over
    prefixes names the exp node (index 3) after about log2(n) more compiles."""
    from opcore.onemodel.partition import compile_or_locate

    ops = ("relu", "tanh", "sigmoid", "exp", "relu", "tanh")
    nodes = tuple(PartNode(op, (ValueRef(f"v{i}"),), (f"v{i + 1}",)) for i, op in enumerate(ops))
    metas = {f"v{i}": M for i in range(len(ops) + 1)}
    spec = PartitionSpec("p1", nodes, ("v0",), {}, (f"v{len(ops)}",), metas)
    tried: list[int] = []

    def compile_spec(part: PartitionSpec) -> str:
        tried.append(len(part.nodes))
        if any(node.op == "exp" for node in part.nodes):
            raise PartitionError(part.name, "fussy", "model refused")
        return "compiled"

    with pytest.raises(PartitionError) as caught:
        compile_or_locate(spec, compile_spec, "fussy")
    assert (caught.value.node, caught.value.op, caught.value.reason) == (3, "exp", "model refused")
    assert len(tried) <= 1 + 3
    assert compile_or_locate(spec.prefix(3), compile_spec, "fussy") == "compiled"
