"""onnxruntime partitions run with denormals flushed to zero (opcore_onnxruntime.denormals: its exp
takes a slow path for each denormal result, which a masked attention makes by the thousand), on the
calling thread and on the session's pool threads, while the caller's own flags never change."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy
import pytest
import torch

pytest.importorskip("onnxruntime", reason="the onnxruntime partition compiler needs onnxruntime")

from opcore.graph.partition import PartitionSpec, PartNode, ValueRef, compilers
from opcore.types import TensorMeta

DENORMAL_AS_ZERO = "session.set_denormal_as_zero"
TINY = 1e-38  # the smallest normal float32 is 1.18e-38: a hundredth of it is a denormal
# the flags are the CPU's (x86's MXCSR): where torch cannot set them, partitions keep onnxruntime's default
needs_flags = pytest.mark.skipif(
    not torch.set_flush_denormal(False), reason="torch cannot set this CPU's flush-to-zero flags"
)


@pytest.fixture(autouse=True)
def _caller_flags_restored() -> Any:
    """Each test starts and ends with the thread's flags off (torch's default)."""
    from opcore_onnxruntime.denormals import flags

    torch.set_flush_denormal(False)
    yield
    assert flags() == (False, False), "a test left the thread flushing denormals"
    torch.set_flush_denormal(False)


def test_a_process_without_torch_loaded_runs_onnxruntime_s_default(tmp_path: pathlib.Path) -> None:
    # a partition loaded and run on its own takes numpy alone and must not import torch for this
    printed = 'loaded.flush, bool((loaded(x)[0] > 0).all()), "torch" in sys.modules'
    assert _loaded_in_a_fresh_process(tmp_path, "", printed) == "False True False"


def _loaded_in_a_fresh_process(tmp_path: pathlib.Path, first: str, printed: str) -> str:
    """What a new Python process prints (``printed``, a tuple's items) after running ``first`` and
    loading ``_scaled()``'s saved partition as ``loaded`` (its input ``x``) before any other session."""
    part, _ = _scaled()
    record = part.save(tmp_path)
    script = f"""
import sys, numpy
{first}
from opcore.graph.partition import PartitionSpec, PartNode, ValueRef
from opcore.types import TensorMeta
from opcore_onnxruntime.partition import load_partition
from opcore_onnxruntime.denormals import flags
x = numpy.full((4,), {TINY!r}, "float32")
spec = PartitionSpec("p0", (PartNode("mul", (ValueRef("x"), 0.01), ("y",)),), ("x",), {{}}, ("y",),
                     {{"x": TensorMeta.of(x), "y": TensorMeta.of(x)}})
loaded = load_partition({str(tmp_path)!r}, {record!r}, spec)
print({printed})
"""
    return _last_line(script)


def _last_line(script: str) -> str:
    """The last line ``script`` prints, run in a new Python process (which must succeed)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split("\n")[-2]


def _scaled(dtype: str = "float32", size: int = 4) -> tuple[Any, PartitionSpec]:
    """A partition computing x * 0.01 (and its spec)."""
    x = numpy.full((size,), TINY, dtype)
    spec = PartitionSpec(
        "p0",
        (PartNode("mul", (ValueRef("x"), 0.01), ("y",)),),
        ("x",),
        {},
        ("y",),
        {"x": TensorMeta.of(x), "y": TensorMeta.of(x)},
    )
    return compilers()["onnxruntime"].compile(spec), spec


def _config(part: Any) -> str | None:
    try:
        return str(part.session.get_session_options().get_session_config_entry(DENORMAL_AS_ZERO))
    except RuntimeError:  # onnxruntime raises for a key never set
        return None


@needs_flags
def test_a_partition_flushes_denormals_and_the_caller_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcore_onnxruntime.denormals import DENORMALS, flags

    monkeypatch.delenv(DENORMALS, raising=False)
    x = numpy.full((4,), TINY, "float32")
    assert (x * numpy.float32(0.01) > 0).all()  # this thread computes the denormal
    part, _ = _scaled()
    assert flags() == (False, False)  # the session's option set the creating thread's flags: given back
    assert part.flush and _config(part) == "1"
    assert (part(x)[0] == 0).all()
    assert flags() == (False, False)
    assert (x * numpy.float32(0.01) > 0).all()


@needs_flags
def test_the_pool_threads_flush_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # two intra-op threads: onnxruntime splits a large elementwise op between the caller and a pool
    # thread, which gets its flags from the session option
    from opcore_onnxruntime.denormals import DENORMALS

    monkeypatch.delenv(DENORMALS, raising=False)
    monkeypatch.setenv("OPCORE_RUNTIME_THREADS", "2")
    part, _ = _scaled(size=1 << 20)
    assert part.session.get_session_options().intra_op_num_threads == 2
    assert not part(numpy.full((1 << 20,), TINY, "float32"))[0].any()


@needs_flags
def test_a_caller_that_flushes_already_keeps_flushing(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcore_onnxruntime.denormals import DENORMALS, flags

    monkeypatch.delenv(DENORMALS, raising=False)
    part, _ = _scaled()
    torch.set_flush_denormal(True)
    try:
        assert (part(numpy.full((4,), TINY, "float32"))[0] == 0).all()
        assert flags() == (True, True)
    finally:
        torch.set_flush_denormal(False)


@needs_flags
def test_a_loaded_partition_flushes_too(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    from opcore_onnxruntime.denormals import DENORMALS, flags
    from opcore_onnxruntime.partition import load_partition

    monkeypatch.delenv(DENORMALS, raising=False)
    part, spec = _scaled()
    loaded = load_partition(tmp_path, part.save(tmp_path), spec)
    assert flags() == (False, False)
    assert loaded.flush and _config(loaded) == "1"
    assert (loaded(numpy.full((4,), TINY, "float32"))[0] == 0).all()


def test_keep_leaves_onnxruntime_s_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcore_onnxruntime.denormals import DENORMALS

    monkeypatch.setenv(DENORMALS, "keep")
    part, _ = _scaled()
    assert not part.flush and _config(part) is None
    got = part(numpy.full((4,), TINY, "float32"))[0]
    numpy.testing.assert_allclose(got, TINY * 0.01, rtol=1e-5)


def test_a_float16_partition_keeps_its_denormals(monkeypatch: pytest.MonkeyPatch) -> None:
    # float16's denormals reach 6.1e-5: weights and activations hold them, and AVX512-FP16 would flush them
    from opcore_onnxruntime.denormals import DENORMALS

    monkeypatch.delenv(DENORMALS, raising=False)
    part, _ = _scaled("float16")
    assert not part.flush and _config(part) is None


def test_a_setting_it_cannot_read_keeps_onnxruntime_s_default_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcore_onnxruntime import denormals
    from opcore_onnxruntime.doctor import describe

    monkeypatch.setenv(denormals.DENORMALS, "off")
    monkeypatch.setattr(denormals, "_warned", set())
    with pytest.warns(UserWarning, match=r"OPCORE_ORT_DENORMALS='off' is neither .*onnxruntime's default is kept"):
        part, _ = _scaled()
    assert not part.flush
    assert describe()["denormals"].startswith("computed: OPCORE_ORT_DENORMALS='off' is neither")


@needs_flags
def test_a_masked_softmax_flushed_equals_torch_s(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the flush is for: scores a mask sets to -inf (all but a few), whose exp underflows
    from opcore_onnxruntime.denormals import DENORMALS

    monkeypatch.delenv(DENORMALS, raising=False)
    scores = torch.randn(1, 2, 7, 257) * 30
    scores[..., 20:] = -torch.inf
    scores[..., 5] -= 120.0  # a seen score so far below the others that its weight is a denormal
    values = {"s": scores.numpy(), "p": scores.numpy()}
    spec = PartitionSpec(
        "p0",
        (PartNode("softmax", (ValueRef("s"), -1), ("p",)),),
        ("s",),
        {},
        ("p",),
        {n: TensorMeta.of(v) for n, v in values.items()},
    )
    part: Any = compilers()["onnxruntime"].compile(spec)
    assert part.flush
    got = torch.from_numpy(part(values["s"])[0])
    torch.testing.assert_close(got, torch.softmax(scores, -1), rtol=1e-5, atol=1e-30)
    assert (got[..., 20:] == 0).all()


@needs_flags
def test_the_first_session_of_a_process_leaves_the_caller_s_flags(tmp_path: pathlib.Path) -> None:
    # onnxruntime sets the creating thread's flags from the first session a process makes (only the
    # first's): a saved plan's partition, loaded first in a new process, is that session
    first = "import torch  # as in a plan's process: the flags are set through torch, never imported for it"
    printed = "flags(), loaded.flush, bool((loaded(x)[0] == 0).all()), flags()"
    assert _loaded_in_a_fresh_process(tmp_path, first, printed) == "(False, False) True True (False, False)"


@pytest.mark.parametrize(
    ("setting", "says"), [pytest.param(None, "flushed to zero", marks=needs_flags), ("keep", "onnxruntime's default")]
)
def test_doctor_says_which(monkeypatch: pytest.MonkeyPatch, setting: str | None, says: str) -> None:
    from opcore_onnxruntime.denormals import DENORMALS
    from opcore_onnxruntime.doctor import describe

    if setting is None:
        monkeypatch.delenv(DENORMALS, raising=False)
    else:
        monkeypatch.setenv(DENORMALS, setting)
    assert describe()["denormals"].startswith(says)


@needs_flags
def test_a_caller_s_own_flush_setting_survives_the_first_session() -> None:
    # onnxruntime clears the creating thread's flush-to-zero flag when the process's first session is
    # made without the option (the opset probe, a one-op session): given back
    script = """
import numpy, torch, opcore
torch.set_flush_denormal(True)
from opcore_onnxruntime.denormals import flags
y = opcore.run("relu", numpy.ones((2, 3), numpy.float32), backend="onnxruntime")
print(flags())
"""
    assert _last_line(script) == "(True, True)"
