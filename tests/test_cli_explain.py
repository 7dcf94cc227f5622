"""``opcore explain``: candidates with status and reason, the precedence, JSON, and input errors."""

from __future__ import annotations

import importlib.util
import re

import pytest
from cli_support import assert_one_line_error, run_cli

# fixture_unavailable disabled; the real backends too, so that fixture_good (priority 50) ranks first
DISABLED = {"OPCORE_DISABLE": "fixture_unavailable,cpu,cuda,onnxruntime,openvino"}


def _rows(out: str) -> dict[str, str]:
    """backend -> its table row (the lines between the header and the verdict)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == ["backend"])
    rows = {}
    for line in lines[start + 1 :]:
        if line.startswith("->"):
            break
        rows[re.split(r"\s{2,}", line.strip())[0]] = line
    return rows


def test_chooses_the_highest_priority_kernel_and_lists_every_plugin() -> None:
    result = run_cli("explain", "relu", "--shapes", "2x3", fixtures=True, env=DISABLED)
    assert result.status == 0, result.err
    assert result.out.splitlines()[0] == "relu(x: float32[2, 3] on cpu)"
    rows = _rows(result.out)
    assert rows["fixture_good"].split()[1:3] == ["50", "chosen"]
    assert rows["reference"].split()[1:3] == ["0", "fallback"]
    assert "failed" in rows["fixture_importerror"] and "libwidget.so.3" in rows["fixture_importerror"]
    assert "disabled" in rows["fixture_unavailable"] and "by OPCORE_DISABLE" in rows["fixture_unavailable"]
    assert "-> runs on fixture_good" in result.out
    assert "opcore: note: " in result.err and "Traceback" not in result.err


def test_a_declining_checker_shows_its_reason() -> None:
    result = run_cli("explain", "relu", "--shapes", "20x30", fixtures=True, env=DISABLED)
    rows = _rows(result.out)
    assert (
        "declined" in rows["fixture_good"] and "fixture only takes up to 16 elements, got 600" in rows["fixture_good"]
    )
    assert "-> runs on reference" in result.out


def test_strict_makes_the_decline_an_impossible_call() -> None:
    result = run_cli("explain", "relu", "--shapes", "20x30", "--strict", fixtures=True, env=DISABLED)
    assert result.status == 1
    assert "order: by priority · strict" in result.out
    assert "-> cannot run: relu(): no kernel accepts" in result.out


def test_backend_argument_pins_the_call() -> None:
    result = run_cli("explain", "relu", "--shapes", "2x3", "--backend", "reference", fixtures=True, env=DISABLED)
    assert result.status == 0
    assert "pinned to reference" in result.out
    assert "passed over" in _rows(result.out)["fixture_good"]
    assert "-> runs on reference" in result.out


def test_environment_order_beats_priority_and_the_call_beats_the_environment() -> None:
    env = {**DISABLED, "OPCORE_BACKENDS": "reference,fixture_good"}
    by_env = run_cli("explain", "relu", "--shapes", "2x3", fixtures=True, env=env)
    assert "order: reference, fixture_good (from OPCORE_BACKENDS)" in by_env.out
    assert "-> runs on reference" in by_env.out
    by_call = run_cli("explain", "relu", "--shapes", "2x3", "--backend", "fixture_good", fixtures=True, env=env)
    assert "-> runs on fixture_good" in by_call.out
    by_prefer = run_cli("explain", "relu", "--shapes", "2x3", "--prefer", "fixture_good", fixtures=True, env=env)
    assert "(from opcore.prefer)" in by_prefer.out and "-> runs on fixture_good" in by_prefer.out


def test_a_missing_backend_in_the_environment_is_one_line() -> None:
    result = run_cli("explain", "relu", "--shapes", "2x3", fixtures=True, OPCORE_BACKENDS="nonexistent,reference")
    assert_one_line_error(result, "opcore: error: OPCORE_BACKENDS names backend 'nonexistent', which is not installed")


def test_pinning_a_failed_or_unknown_backend_is_one_line() -> None:
    failed = run_cli("explain", "relu", "--shapes", "2", "--backend", "fixture_importerror", fixtures=True)
    assert_one_line_error(failed, "names backend 'fixture_importerror', which is failed: import failed")
    unknown = run_cli("explain", "relu", "--shapes", "2", "--backend", "nonexistent")
    assert_one_line_error(unknown, "backend= names backend 'nonexistent', which is not installed")


def test_json_serialises_the_explanation() -> None:
    result = run_cli("explain", "relu", "--shapes", "20x30", "--json", fixtures=True, env=DISABLED)
    assert result.status == 0
    data = result.json()
    assert data["schema"] == 1 and data["op"] == "relu"
    assert data["signature"] == "relu(Tensor x) -> Tensor"
    assert data["inputs"] == {"x": "float32[20, 30] on cpu"}
    assert data["chosen"] == "reference" and data["backend"] == "reference" and data["error"] is None
    candidates = {c["backend"]: c for c in data["candidates"]}
    assert candidates["fixture_good"]["status"] == "declined"
    assert candidates["fixture_good"]["priority"] == 50
    assert candidates["fixture_good"]["source"] == "opcore_fixture_good.plugin:relu"
    assert (
        candidates["fixture_importerror"]["status"] == "failed"
        and candidates["fixture_importerror"]["priority"] is None
    )
    assert candidates["fixture_unavailable"] == {
        "backend": "fixture_unavailable", "label": "", "title": "fixture_unavailable", "status": "disabled",
        "reason": "by OPCORE_DISABLE", "priority": None, "source": "", "measured": None,
    }  # fmt: skip
    assert data["array_kind"] == "numpy" and data["device"] == "cpu"


def test_json_of_an_impossible_call() -> None:
    result = run_cli("explain", "relu", "--shapes", "20x30", "--strict", "--json", fixtures=True, env=DISABLED)
    assert result.status == 1
    data = result.json()
    assert data["chosen"] is None and data["backend"] is None and "no kernel accepts" in data["error"]
    assert data["strict"] is True


def test_attributes_lists_and_per_tensor_dtypes() -> None:
    cat = run_cli("explain", "cat", "--shapes", "2x3+2x5", "--attr", "dim=1", "--json")
    assert cat.json()["inputs"] == {"tensors": "[float32[2, 3] on cpu, float32[2, 5] on cpu]", "dim": "1"}
    embedding = run_cli("explain", "embedding", "--shapes", "4x8:int64,100x16", "--json")
    assert embedding.json()["inputs"]["input"] == "int64[4, 8] on cpu"
    gelu = run_cli("explain", "gelu", "--shapes", "4", "--attr", "approximate=tanh", "--json")
    assert gelu.json()["inputs"]["approximate"] == "'tanh'"
    scalar = run_cli("explain", "add", "--shapes", "4x4", "--attr", "other=2.0", "--json")
    assert scalar.json()["inputs"]["other"] == "2.0"


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="bfloat16 inputs are torch tensors")
def test_bfloat16_inputs_are_torch_tensors() -> None:
    result = run_cli("explain", "linear", "--shapes", "32x64,64x64", "--dtype", "bfloat16", "--json")
    assert result.status == 0, result.err
    data = result.json()
    assert data["array_kind"] == "torch"
    assert data["inputs"]["x"] == "bfloat16[32, 64] on cpu"


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["linear", "--shapes", "2x8,4x9"], ["linear(): argument 'w' expected in_features = 8"]),
        (["linear", "--shapes", "2y8"], ["argument '--shapes' expected sizes joined by 'x'", "'2y8'"]),
        (["linear", "--shapes", "2x8,8x8,8,8"], ["expected at most 3 shape(s), for x, w, b?"]),
        (["linear", "--shapes", "2x8"], ["expected a shape for each of x, w, b?", "found none for w"]),
        (["linear", "--shapes=-,8x8"], ["argument 'x' expected a shape (it is required)"]),
        (["softmax", "--shapes", "2x3"], ["softmax(): missing required argument 'dim'"]),
        (["rleu", "--shapes", "2"], ["unknown op 'rleu'", "did you mean 'relu'"]),
        (["relu", "--shapes", "2", "--dtype", "float8"], ["argument '--dtype' expected one of", "'float8'"]),
        (["relu", "--shapes", "2:int3"], ["argument '--shapes' expected one of"]),
        (["relu", "--shapes", "2", "--attr", "oops"], ["argument '--attr' expected NAME=VALUE"]),
        (["relu", "--shapes", "2", "--attr", "y=1"], ["unexpected keyword argument 'y'"]),
        (["relu", "--shapes", "2", "--device", "tpu"], ["argument 'device' expected"]),
    ],
)
def test_bad_input_is_one_line(args: list[str], fragments: list[str]) -> None:
    assert_one_line_error(run_cli("explain", *args), *fragments)


def test_missing_arguments_are_a_usage_error() -> None:
    # --shapes may be left out (a creation op takes none), so relu's missing shape is the op's error
    result = run_cli("explain", "relu")
    assert_one_line_error(result, "relu(): argument '--shapes' expected a shape for each of x")


def test_a_creation_op_takes_its_size_from_shapes_and_its_dtype_from_dtype() -> None:
    result = run_cli("explain", "zeros", "--shapes", "2x3", "--dtype", "int8")
    assert result.status == 0, result.err
    assert result.out.splitlines()[0] == "zeros(size: (2, 3), dtype: 'int8', device: 'cpu')"
    assert "-> runs on " in result.out
