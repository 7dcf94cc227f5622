"""The third-party path: the example vendor plugin's partition compiler, found through its hook."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import numpy
import pytest

import opcore
from opcore.graph.partition import PartitionError, PartitionSpec, PartNode, ValueRef, compilers
from opcore.types import TensorMeta

R = ValueRef


@pytest.fixture
def example() -> object:
    found = compilers().get("example")
    if found is None:
        pytest.skip("opcore-example-vendor is not installed here")
    return found


def _spec() -> tuple[PartitionSpec, numpy.ndarray, numpy.ndarray]:
    rng = numpy.random.default_rng(3)
    x, gate = rng.standard_normal((4, 5)).astype("float32"), rng.standard_normal((4, 5)).astype("float32")
    nodes = (
        PartNode("silu", (R("x"),), ("a",)),
        PartNode("example.swiglu", (R("a"), R("gate")), ("b",)),
        PartNode("silu", (R("b"),), ("c",)),
    )
    meta = TensorMeta.of(x)
    spec = PartitionSpec(
        "p0", nodes, ("x",), {"gate": gate}, ("c", "a"), dict.fromkeys(("x", "gate", "a", "b", "c"), meta)
    )
    return spec, x, gate


def test_the_vendor_compiler_runs_a_chain_like_its_kernels(example) -> None:
    spec, x, gate = _spec()
    assert example.supports("example.swiglu") and not example.supports("linear")
    c, a = example.compile(spec)(x)
    expected_a = opcore.run("silu", x, backend="example")
    expected_c = opcore.run(
        "silu", opcore.run("example.swiglu", expected_a, gate, backend="example"), backend="example"
    )
    numpy.testing.assert_allclose(a, expected_a, rtol=1e-6)
    numpy.testing.assert_allclose(c, expected_c, rtol=1e-6)


def test_a_node_it_has_no_step_for_is_named(example) -> None:
    spec, _, _ = _spec()
    bad = PartitionSpec(
        spec.name, (*spec.nodes, PartNode("relu", (R("c"),), ("d",))), spec.inputs, spec.constants, ("d",), spec.metas
    )
    with pytest.raises(PartitionError) as caught:
        example.compile(bad)
    assert (caught.value.node, caught.value.op, caught.value.backend) == (3, "relu", "example")


def test_save_and_load_in_a_fresh_process(example, tmp_path: pathlib.Path) -> None:
    spec, x, _ = _spec()
    part = example.compile(spec)
    record = part.save(tmp_path)
    (tmp_path / "record.json").write_text(json.dumps(record))
    numpy.save(tmp_path / "x.npy", x)
    code = (
        "import json, sys, pathlib, numpy; from opcore.graph.partition import PartitionSpec, compilers; "
        "d = pathlib.Path(sys.argv[1]); spec = PartitionSpec('p0', (), ('x',), {}, ('c', 'a'), {}); "
        "part = compilers()['example'].load(d, json.loads((d / 'record.json').read_text()), spec); "
        "numpy.save(d / 'c.npy', part(numpy.load(d / 'x.npy'))[0])"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, capture_output=True)
    numpy.testing.assert_array_equal(numpy.load(tmp_path / "c.npy"), part(x)[0])


def test_a_tampered_file_naming_an_unknown_op_is_refused(example, tmp_path: pathlib.Path) -> None:
    spec, _, _ = _spec()
    record = example.compile(spec).save(tmp_path)
    steps = tmp_path / record["files"][0]
    document = json.loads(steps.read_text())
    document["steps"][0]["op"] = "os:system"
    steps.write_text(json.dumps(document))
    with pytest.raises(PartitionError, match="names unknown ops"):
        example.load(tmp_path, record, spec)


def test_attributes_and_none_arguments_compile_save_and_load(example, tmp_path: pathlib.Path) -> None:
    """clamp(x, min=None, max=2.0): the example holds a node's attributes and absent arguments in its
    steps, and its files keep them (a copy of the example works for real ops)."""
    torch = pytest.importorskip("torch")
    import opcore.graph

    class Clamps(torch.nn.Module):  # type: ignore[name-defined]
        def forward(self, x: Any) -> Any:
            h = torch.nn.functional.silu(torch.clamp(x, min=-1.0))
            h = torch.nn.functional.silu(torch.clamp(h, max=2.0))
            return torch.nn.functional.silu(torch.clamp(h, min=-0.5, max=0.5))

    x = torch.linspace(-4, 4, 24).reshape(4, 6)
    plan = opcore.graph.capture(Clamps(), (x,), backends=["example", "cpu"], measure=False)
    assert [p.backend for p in plan.partitions] == ["example"], plan.explain()
    ops = [(op, args[1:]) for op, args, _ in plan.partitions[0].compiled.steps if op == "clamp"]
    assert ops == [("clamp", (-1.0, None)), ("clamp", (None, 2.0)), ("clamp", (-0.5, 0.5))]
    torch.testing.assert_close(plan(x), Clamps()(x))
    plan.save(tmp_path / "plan")
    steps = json.loads((tmp_path / "plan" / "p0.json").read_text())["steps"]
    assert steps[0]["args"] == [{"ref": steps[0]["args"][0]["ref"]}, -1.0, None]
    again = opcore.graph.load(tmp_path / "plan")
    assert [p.backend for p in again.partitions] == ["example"] and not any("failed" in n for n in again.notes)
    torch.testing.assert_close(again(x), Clamps()(x))
