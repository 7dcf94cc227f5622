"""The partition compilers of opcore-onnxruntime and opcore-openvino, on the real runtimes: chains of
ops as one model matching the per-op kernels, nodes the builders or the runtime refuse, dynamic
batch, and save -> load in a fresh process."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import textwrap
from typing import Any

import numpy
import pytest

import opcore
from opcore.graph.partition import PartitionError, PartitionSpec, PartNode, ValueRef, compilers
from opcore.opset import BUILTIN_CONTRACTS
from opcore.types import TensorMeta

BACKENDS = ("onnxruntime", "openvino")
_CONTRACTS = {contract.name: contract for contract in BUILTIN_CONTRACTS}
R = ValueRef


def _rng() -> numpy.random.Generator:
    return numpy.random.default_rng(7)


def _run_nodes(nodes: tuple[PartNode, ...], values: dict[str, Any], backend: str) -> dict[str, Any]:
    """Every node run alone through opcore.run on ``backend`` (the one-op kernels)."""
    values = dict(values)
    for node in nodes:
        args = []
        for arg in node.args:
            if isinstance(arg, ValueRef):
                args.append(values[arg.name])
            elif isinstance(arg, tuple) and arg and isinstance(arg[0], ValueRef):
                args.append(tuple(values[v.name] for v in arg))
            else:
                args.append(arg)
        schema = _CONTRACTS[node.op].schema
        positional = [a for a, spec in zip(args, schema.arguments) if not spec.kwarg_only]
        keywords = {spec.name: a for a, spec in zip(args, schema.arguments) if spec.kwarg_only}
        values[node.outputs[0]] = opcore.run(node.op, *positional, backend=backend, **keywords)
    return values


def _spec(
    nodes: tuple[PartNode, ...],
    values: dict[str, Any],
    inputs: tuple[str, ...],
    constants: tuple[str, ...],
    outputs: tuple[str, ...],
    dynamic: dict[str, frozenset[int]] | None = None,
    name: str = "p0",
) -> PartitionSpec:
    return PartitionSpec(
        name,
        nodes,
        inputs,
        {n: values[n] for n in constants},
        outputs,
        {n: TensorMeta.of(v) for n, v in values.items()},
        dynamic or {},
    )


def _decoder_block() -> tuple[tuple[PartNode, ...], dict[str, Any]]:
    """A small pre-norm attention + gated-MLP block written as contract nodes (what a captured
    Llama layer becomes), with the weights as constants."""
    rng = _rng()
    hidden, heads = 16, 2

    def w(*shape: int) -> numpy.ndarray:
        return (rng.standard_normal(shape) / numpy.sqrt(shape[-1])).astype("float32")

    values = {
        "x": rng.standard_normal((2, 6, hidden)).astype("float32"),
        "norm": (1 + 0.1 * rng.standard_normal(hidden)).astype("float32"),
        "wq": w(hidden, hidden),
        "wk": w(hidden, hidden),
        "wv": w(hidden, hidden),
        "wo": w(hidden, hidden),
        "wg": w(24, hidden),
        "wu": w(24, hidden),
        "wd": w(hidden, 24),
        "ln_w": (1 + 0.1 * rng.standard_normal(hidden)).astype("float32"),
        "ln_b": (0.1 * rng.standard_normal(hidden)).astype("float32"),
    }
    nodes = (
        PartNode("rms_norm", (R("x"), (hidden,), R("norm"), 1e-6), ("h",)),
        PartNode("linear", (R("h"), R("wq"), None), ("q",)),
        PartNode("linear", (R("h"), R("wk"), None), ("k",)),
        PartNode("linear", (R("h"), R("wv"), None), ("v",)),
        PartNode("reshape", (R("q"), (2, 6, heads, hidden // heads)), ("q4",)),
        PartNode("reshape", (R("k"), (2, 6, heads, hidden // heads)), ("k4",)),
        PartNode("reshape", (R("v"), (2, 6, heads, hidden // heads)), ("v4",)),
        PartNode("transpose", (R("q4"), 1, 2), ("qt",)),
        PartNode("permute", (R("k4"), (0, 2, 1, 3)), ("kt",)),
        PartNode("transpose", (R("v4"), 1, 2), ("vt",)),
        PartNode("scaled_dot_product_attention", (R("qt"), R("kt"), R("vt"), None, 0.0, True, None, False), ("a",)),
        PartNode("transpose", (R("a"), 1, 2), ("at",)),
        PartNode("reshape", (R("at"), (2, 6, hidden)), ("a3",)),
        PartNode("linear", (R("a3"), R("wo"), None), ("o",)),
        PartNode("add", (R("x"), R("o"), 1), ("r",)),
        PartNode("linear", (R("r"), R("wg"), None), ("g",)),
        PartNode("silu", (R("g"),), ("gs",)),
        PartNode("linear", (R("r"), R("wu"), None), ("u",)),
        PartNode("mul", (R("gs"), R("u")), ("gu",)),
        PartNode("linear", (R("gu"), R("wd"), None), ("d",)),
        PartNode("add", (R("r"), R("d"), 0.5), ("y",)),
        PartNode("layer_norm", (R("y"), (hidden,), R("ln_w"), R("ln_b"), 1e-5), ("n",)),
        PartNode("gelu", (R("n"), "tanh"), ("ng",)),
        PartNode("softmax", (R("ng"), -1), ("s",)),
        PartNode("cat", ((R("s"), R("y")), -1), ("c",)),
    )
    return nodes, values


WEIGHTS = ("norm", "wq", "wk", "wv", "wo", "wg", "wu", "wd", "ln_w", "ln_b")


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    name = request.param
    if name not in {r.name for r in opcore.backends() if r.status.value == "loaded"}:
        pytest.skip(f"the {name} backend is not loaded here")
    return name


def test_every_runtime_offers_a_compiler_that_imports_nothing_at_plugin_load() -> None:
    code = (
        "import sys; from opcore.graph import compilers; c = compilers(); "
        "print(sorted(c), c['onnxruntime'].supports('linear'), c['openvino'].supports('example.swiglu'), "
        "sorted(m for m in ('onnxruntime', 'openvino', 'onnx', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("] ", 1)[1].strip() == "True False []"
    assert {"onnxruntime", "openvino"} <= set(eval(out.split("]")[0] + "]"))


def test_a_decoder_block_as_one_model_matches_the_per_op_kernels(backend: str) -> None:
    nodes, values = _decoder_block()
    expected = _run_nodes(nodes, values, backend)
    spec = _spec(nodes, expected, ("x",), WEIGHTS, ("c", "r"))
    part = compilers()[backend].compile(spec)
    assert part.backend == backend
    c, r = part(values["x"])
    assert c.dtype == numpy.float32 and c.shape == expected["c"].shape
    numpy.testing.assert_allclose(c, expected["c"], rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(r, expected["r"], rtol=1e-5, atol=1e-5)
    # and against PyTorch's own kernels (the cpu backend)
    on_cpu = _run_nodes(nodes, values, "cpu")
    numpy.testing.assert_allclose(c, on_cpu["c"], rtol=1e-4, atol=1e-5)


def test_embedding_and_conv_partitions(backend: str) -> None:
    rng = _rng()
    values = {
        "ids": rng.integers(0, 10, (2, 5)),
        "table": rng.standard_normal((10, 8)).astype("float32"),
        "img": rng.standard_normal((2, 3, 9, 9)).astype("float32"),
        "kernel": rng.standard_normal((4, 3, 3, 3)).astype("float32"),
        "bias": rng.standard_normal(4).astype("float32"),
    }
    nodes = (
        PartNode("embedding", (R("ids"), R("table"), None), ("e",)),
        PartNode("tanh", (R("e"),), ("t",)),
        PartNode("conv2d", (R("img"), R("kernel"), R("bias"), (2, 2), (1, 1), (1, 1), 1), ("conv",)),
        PartNode("relu", (R("conv"),), ("act",)),
        PartNode("matmul", (R("t"), R("t")), ("tt",)),  # (2,5,8) @ (2,5,8) is refused...
    )[:4]  # ...so the partition stops before it
    expected = _run_nodes(nodes, values, backend)
    spec = _spec(nodes, expected, ("ids", "img"), ("table", "kernel", "bias"), ("t", "act"))
    t, act = compilers()[backend].compile(spec)(values["ids"], values["img"])
    numpy.testing.assert_allclose(t, expected["t"], rtol=1e-5, atol=1e-6)
    numpy.testing.assert_allclose(act, expected["act"], rtol=1e-5, atol=1e-5)


def test_dynamic_batch(backend: str) -> None:
    rng = _rng()
    values = {"x": rng.standard_normal((3, 8)).astype("float32"), "w": rng.standard_normal((5, 8)).astype("float32")}
    nodes = (PartNode("linear_relu", (R("x"), R("w"), None), ("y",)), PartNode("exp", (R("y"),), ("z",)))
    expected = _run_nodes(nodes, values, backend)
    compiler = compilers()[backend]
    dynamic = compiler.compile(_spec(nodes, expected, ("x",), ("w",), ("z",), {"x": frozenset({0})}))
    static = compiler.compile(_spec(nodes, expected, ("x",), ("w",), ("z",)))
    for batch in (1, 3, 7):
        x = rng.standard_normal((batch, 8)).astype("float32")
        (z,) = dynamic(x)
        numpy.testing.assert_allclose(z, numpy.exp(numpy.maximum(x @ values["w"].T, 0)), rtol=1e-5)
    with pytest.raises(opcore.Unsupported, match=f"partition p0 on {backend} failed"):
        static(rng.standard_normal((7, 8)).astype("float32"))


def test_squeeze_of_a_tensor_with_two_dynamic_dims(backend: str) -> None:
    """DeBERTa's relative positions, (1, n, n) squeezed at dim 0 with n dynamic: one size-1 dim
    dropped, the two dynamic ones kept (a Reshape to the squeezed sizes would hold two -1)."""
    rng = _rng()
    values = {"x": rng.standard_normal((1, 5, 5)).astype("float32")}
    nodes = (PartNode("squeeze", (R("x"), (0,)), ("y",)), PartNode("exp", (R("y"),), ("z",)))
    expected = _run_nodes(nodes, values, backend)
    dynamic = compilers()[backend].compile(_spec(nodes, expected, ("x",), (), ("z",), {"x": frozenset({1, 2})}))
    for n in (2, 5, 9):
        x = rng.standard_normal((1, n, n)).astype("float32")
        (z,) = dynamic(x)
        assert z.shape == (n, n)
        numpy.testing.assert_allclose(z, numpy.exp(x[0]), rtol=1e-6)


def test_a_node_without_a_builder_is_named(backend: str) -> None:
    values = {"x": numpy.ones((2, 3), "float32")}
    values["y"] = values["x"]
    nodes = (PartNode("relu", (R("x"),), ("a",)), PartNode("example.swiglu", (R("a"), R("a")), ("y",)))
    values["a"] = values["x"]
    compiler = compilers()[backend]
    assert not compiler.supports("example.swiglu")
    with pytest.raises(PartitionError) as caught:
        compiler.compile(_spec(nodes, values, ("x",), (), ("y",)))
    assert (caught.value.node, caught.value.op, caught.value.backend) == (1, "example.swiglu", backend)


def test_a_compile_failure_names_the_node(backend: str) -> None:
    """A cat of a (2, 3) and a (2, 3, 1) value: the builders write it, the runtime refuses it;
    the error names node 2 (the cat), whichever of the two finds out."""
    values = {
        "x": numpy.ones((2, 3), "float32"),
        "a": numpy.ones((2, 3), "float32"),
        "b": numpy.ones((2, 3, 1), "float32"),
        "c": numpy.ones((4, 3), "float32"),  # the meta a planner would have (never computed)
    }
    nodes = (
        PartNode("relu", (R("x"),), ("a",)),
        PartNode("reshape", (R("x"), (2, 3, 1)), ("b",)),
        PartNode("cat", ((R("a"), R("b")), 0), ("c",)),
        PartNode("exp", (R("c"),), ("d",)),
    )
    values["d"] = values["c"]
    with pytest.raises(PartitionError) as caught:
        compilers()[backend].compile(_spec(nodes, values, ("x",), (), ("d",)))
    assert (caught.value.node, caught.value.op) == (2, "cat")
    assert isinstance(caught.value, opcore.Unsupported)
    assert f"partition p0 on {backend}: node 2 (cat) failed" in str(caught.value)


_LOAD = """
import json, sys, numpy, pathlib
from opcore.opset import BUILTIN_CONTRACTS
from opcore.graph.partition import PartitionSpec, compilers
from opcore.types import DType, TensorMeta
folder = pathlib.Path(sys.argv[1])
saved = json.loads((folder / "saved.json").read_text())
metas = {n: TensorMeta(tuple(s), DType(d)) for n, (s, d) in saved["metas"].items()}
spec = PartitionSpec("p0", (), tuple(saved["inputs"]), {}, tuple(saved["outputs"]), metas, {"x": frozenset({0})})
part = compilers()[saved["record"]["backend"]].load(folder, saved["record"], spec)
x = numpy.load(folder / "x.npy")
numpy.save(folder / "out.npy", part(x)[0])
print(sorted(m for m in ("torch",) if m in sys.modules))
"""


def test_save_then_load_in_a_fresh_process(backend: str, tmp_path: pathlib.Path) -> None:
    nodes, values = _decoder_block()
    expected = _run_nodes(nodes, values, backend)
    spec = _spec(nodes, expected, ("x",), WEIGHTS, ("c",), {"x": frozenset({0})})
    part = compilers()[backend].compile(spec)
    record = part.save(tmp_path)
    json.dumps(record)  # JSON-able
    assert record["backend"] == backend and all((tmp_path / f).is_file() for f in record["files"])
    suffixes = {pathlib.Path(f).suffix for f in record["files"]}
    assert suffixes == (
        {".onnx"} | ({".data"} if len(record["files"]) > 1 else set()) if backend == "onnxruntime" else {".xml", ".bin"}
    )
    metas = {n: [list(m.shape), m.dtype.value] for n, m in spec.metas.items() if n in ("x", "c")}
    saved = {"record": record, "inputs": ["x"], "outputs": ["c"], "metas": metas}
    (tmp_path / "saved.json").write_text(json.dumps(saved))
    numpy.save(tmp_path / "x.npy", values["x"])
    script = textwrap.dedent(_LOAD)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # loading a partition imports no torch
    numpy.testing.assert_allclose(numpy.load(tmp_path / "out.npy"), part(values["x"])[0], rtol=1e-6, atol=1e-6)


def test_a_reshape_to_a_size_computed_at_run_time(backend: str) -> None:
    """view(x, [n, 4, 2]) with n a dynamic batch size that the plan feeds as a 0-D input."""
    rng = _rng()
    values = {"x": rng.standard_normal((3, 8)).astype("float32"), "n": numpy.asarray(3, dtype=numpy.int64)}
    nodes = (PartNode("reshape", (R("x"), (R("n"), 4, 2)), ("y",)), PartNode("softmax", (R("y"), 1), ("z",)))
    values["y"] = values["x"].reshape(3, 4, 2)
    values["z"] = opcore.run("softmax", values["y"], 1)
    spec = _spec(nodes, values, ("x", "n"), (), ("z",), {"x": frozenset({0})})
    part = compilers()[backend].compile(spec)
    x = rng.standard_normal((5, 8)).astype("float32")
    (z,) = part(x, numpy.asarray(5, dtype=numpy.int64))
    numpy.testing.assert_allclose(z, opcore.run("softmax", x.reshape(5, 4, 2), 1, backend="cpu"), rtol=1e-5, atol=1e-6)
