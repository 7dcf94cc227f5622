"""opcore._torchguard, the compiled tensor guard (issue 15): the same answers as torch's TensorGuards on
every variant of a signature, no reference kept, and refused (with the reason) where it was built for
another torch or from another source. ``make`` builds it (the core built a second time without build
isolation); its test target sets EXPECT_TORCHGUARD=1 so that a failed build fails here instead of
skipping."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import weakref
from typing import Any

import pytest

from opcore import _guards

torch = pytest.importorskip("torch", reason="the guard checks torch tensors")


def guard_module() -> Any:
    try:
        from opcore import _torchguard  # type: ignore[attr-defined,unused-ignore]
    except ImportError as error:
        if os.environ.get("EXPECT_TORCHGUARD") == "1":
            raise AssertionError(f"make builds opcore._torchguard, and it is missing: {error}") from error
        pytest.skip(f"opcore._torchguard is not built here (make builds it): {error}")
    return _torchguard


def reload_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have opcore._guards look its compiled guard up again (both restored after the test)."""
    monkeypatch.setattr(_guards, "_Guard", None)
    monkeypatch.setattr(_guards, "_GUARD_REASON", "")


_Marked = type("_Marked", (torch.Tensor,), {})


def variants(x: Any) -> dict[str, Any]:
    """Tensors that differ from x (2x8 float32, contiguous, no grad) in one field each, or not at all."""
    with torch.inference_mode():
        inference = torch.randn(2, 8)
    return {
        "same": x,
        "other data": torch.randn(2, 8),
        "a view of the same layout": torch.randn(4, 8)[:2],
        "dtype": x.double(),
        "shape": torch.randn(3, 8),
        "rank": torch.randn(2, 8, 1),
        "strides": torch.randn(8, 2).T,
        "storage offset only": torch.randn(3, 8)[1:],
        "a subclass": x.as_subclass(_Marked),
        "requires_grad": torch.randn(2, 8, requires_grad=True),
        "inference tensor": inference,
        "meta device": torch.empty(2, 8, device="meta"),
        "sparse": x.to_sparse(),
        "not a tensor": x.numpy(),
        "a number": 1.0,
    }


def torch_answer(x: Any, value: Any) -> bool | None:
    check = _guards._torch_guard((x,))
    if check is None:
        return None
    try:
        return bool(check(value))
    except Exception:
        return False


def test_it_answers_as_torchs_tensor_guards() -> None:
    module = guard_module()
    x = torch.randn(2, 8)
    guard = module.Guard(x)
    answers = {name: guard(value) for name, value in variants(x).items()}
    expected = {
        name: name in ("same", "other data", "a view of the same layout", "storage offset only") for name in answers
    }
    assert answers == expected
    for name, value in variants(x).items():
        theirs = torch_answer(x, value)
        if theirs is not None:
            assert answers[name] is theirs, name
    three = module.Guard(x, torch.ones(8, 2).T, torch.ones(4, dtype=torch.int64))
    assert three(torch.randn(2, 8), torch.randn(8, 2).T, torch.zeros(4, dtype=torch.int64)) is True
    assert three(torch.randn(2, 8), torch.randn(8, 2), torch.zeros(4, dtype=torch.int64)) is False
    assert three(x, x.T) is False and guard(x, x) is False and guard() is False  # another count
    assert guard(x=x) is False  # keywords: never the examples'


def test_it_refuses_what_it_cannot_guard() -> None:
    module = guard_module()
    with pytest.raises(TypeError, match="argument 1 is a int, not a torch tensor"):
        module.Guard(torch.ones(2), 3)
    with pytest.raises(ValueError, match="argument 0 is not a strided tensor"):
        module.Guard(torch.ones(2).to_sparse())
    with pytest.raises(TypeError, match="keyword"):
        module.Guard(torch.ones(2), strict=True)
    assert module.Guard()() is True  # no tensors: nothing to differ


def test_it_keeps_no_reference() -> None:
    module = guard_module()
    x = torch.randn(2, 8)
    ref = weakref.ref(x)
    guard = module.Guard(x)
    before = sys.getrefcount(guard)
    y = torch.randn(2, 8)
    for _ in range(1000):
        assert guard(y)
    assert sys.getrefcount(guard) == before
    del x
    gc.collect()
    assert ref() is None


def test_opcores_guards_take_it_where_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    module = guard_module()
    reload_guard(monkeypatch)
    x = torch.randn(2, 8)
    check = _guards.tensor_guard((x,))
    assert isinstance(check, module.Guard) and check(torch.randn(2, 8)) and not check(x.T)
    assert _guards.guard_in_use() == f"opcore._torchguard (compiled for torch {torch.__version__})"
    sparse = x.to_sparse()  # opcore's guard refuses it: torch's, where it takes it, or none
    assert not isinstance(_guards.tensor_guard((sparse,)), module.Guard)


@pytest.mark.parametrize("broken", ["version", "source"])
def test_a_build_for_another_torch_or_source_is_refused_with_the_fix(
    monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    module = guard_module()
    reload_guard(monkeypatch)
    if broken == "version":
        monkeypatch.setattr(module, "TORCH_VERSION", "1.0.0")
        fragment = f"built for torch 1.0.0, this is {torch.__version__}"
    else:
        monkeypatch.setattr(module, "SOURCE", "0123456789abcdef")
        fragment = "built from another version of opcore/_torchguard.cpp (built from 0123456789abcdef"
    x = torch.randn(2, 8)
    check = _guards.tensor_guard((x,))
    assert not isinstance(check, module.Guard)  # torch's TensorGuards, or none
    reason = _guards.guard_in_use()
    assert fragment in reason and "make" in reason, reason


def test_opcore_pure_python_keeps_it_out() -> None:
    guard_module()
    code = "import torch; from opcore import _guards; print(_guards.guard_in_use())"
    env = {**os.environ, "OPCORE_PURE_PYTHON": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "OPCORE_PURE_PYTHON=1 keeps opcore's compiled guard out" in done.stdout


def _watched(module: Any) -> tuple[Any, Any, Any]:
    """A layer with an inference-mode buffer, and a TensorWatch of its three tensors."""
    from opcore.torchkit.watch import TensorWatch

    layer = torch.nn.Linear(3, 2)
    with torch.inference_mode():
        layer.register_buffer("scale", torch.ones(2))
    watch = TensorWatch.of(
        [
            ("weight", layer._parameters, "weight"),
            ("bias", layer._parameters, "bias"),
            ("scale", layer._buffers, "scale"),
        ]
    )
    assert isinstance(watch._compiled, module.Watch)
    return layer, watch, TensorWatch


@pytest.mark.parametrize(
    "change", ["none", "in place", "assigned", "removed", "data swapped", "inference data swapped", "tensors swapped"]
)
def test_the_compiled_watch_answers_as_the_python_loop(change: str) -> None:
    module = guard_module()
    layer, watch, _ = _watched(module)
    with torch.no_grad():
        if change == "in place":
            layer.weight.mul_(2)
        elif change == "assigned":
            layer.bias = torch.nn.Parameter(layer.bias.detach().clone())
        elif change == "removed":
            del layer._parameters["bias"]
        elif change == "data swapped":
            layer.weight.data = torch.zeros(2, 3)
        elif change == "inference data swapped":
            layer.scale.data = torch.zeros(2)
        elif change == "tensors swapped":  # module.to with swapping on: the same object, another implementation
            other = torch.nn.Parameter(torch.zeros(2, 3))
            torch.utils.swap_tensors(layer.weight, other)
            del other
            gc.collect()  # the implementation the weight had is gone: the watch must not read it
    assert watch.stale() is (change != "none")
    assert watch._stale_python() is watch.stale()
    assert bool(watch.changed()) is watch.stale()


def test_the_compiled_watch_refuses_what_it_cannot_watch_and_keeps_no_extra_reference() -> None:
    module = guard_module()
    from opcore.torchkit.watch import _compiled_watch

    t = torch.ones(2)
    with pytest.raises(TypeError, match="not a tensor held in a dict"):
        module.Watch((types_mapping := _Mapping(),), ("t",), (t,), (0,), (t.data_ptr(),))
    assert _compiled_watch((("t", types_mapping, "t", t, 0, t.data_ptr()),)) is None  # the Python loop serves
    with pytest.raises(ValueError, match="one entry per tensor"):
        module.Watch(({},), ("t",), (t, t), (0,), (0,))
    holder = {"t": t}
    watch = module.Watch((holder,), ("t",), (t,), (t._version,), (t.data_ptr(),))
    with pytest.raises(TypeError, match="no arguments"):
        watch(1)
    before = sys.getrefcount(t), sys.getrefcount(holder)
    for _ in range(1000):
        assert watch() is False
    assert (sys.getrefcount(t), sys.getrefcount(holder)) == before


class _Mapping(dict):
    """A dict subclass: the compiled watch takes exact dicts only."""


def test_a_watch_pickles_and_copies_with_its_entries() -> None:
    import copy
    import pickle

    module = guard_module()
    _, watch, tensor_watch = _watched(module)
    for twin in (copy.deepcopy(watch), pickle.loads(pickle.dumps(watch))):
        assert isinstance(twin, tensor_watch) and len(twin) == 3 and isinstance(twin._compiled, module.Watch)
        # the copies' tensors have memory of their own: not what was watched, as the Python loop says too
        assert twin.stale() is True and twin._stale_python() is True
