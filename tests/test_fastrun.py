"""The compiled fast path of opcore.run (opcore._fastrun, issue 15): built where a C compiler is, the same
answers, errors and warnings as the pure-Python run(), no references kept, safe from many threads.

test_dispatch.py and tests/adversarial run every test on both paths (the run_path fixture); this file
checks what only the compiled callable can get wrong: reference counts, the exception being handled while
a cached entry's failure is recovered, a BaseException left alone, threads, and how it is switched off.
"""

from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
import sysconfig
import threading
import tracemalloc
import types
import warnings
from collections.abc import Callable
from shutil import which
from typing import Any

import numpy
import pytest

import opcore
from opcore import BackendSpec, DeviceType, dispatch, kernel_walk

torch = pytest.importorskip("torch", reason="the compiled path serves torch tensors")
F = torch.nn.functional

pytestmark = pytest.mark.usefixtures("only_reference")


def compiled_only() -> None:
    if not dispatch.compiled():
        pytest.skip(f"the compiled fast path is not in this process: {dispatch.PURE_PYTHON_REASON}")


def make_plugin(name: str, kernels: dict[str, Any], priority: int = 500) -> types.SimpleNamespace:
    """An in-process plugin of torch-kind float32 kernels ``{op: fn}``."""

    def opcore_backend() -> BackendSpec:
        return BackendSpec(name=name, version="0", priority=priority, device_types=(DeviceType.CPU,))

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        for op, fn in kernels.items():
            registrar.add_kernel(op, fn, dtypes=["float32"], array_kind="torch")

    hooks = {f.__name__: opcore.hookimpl(f) for f in (opcore_backend, opcore_register_kernels)}
    return types.SimpleNamespace(__name__=name, **hooks)


class Flaky:
    """A relu kernel that raises a new ``error()`` from its ``after``-th call on (None: never). A new one
    each time: raising one instance again would chain its tracebacks, keeping every call's frames alive."""

    def __init__(self, error: Callable[[], BaseException] | None = None, after: int = 0) -> None:
        self.error, self.after, self.calls = error, after, 0

    def __call__(self, x: Any) -> Any:
        self.calls += 1
        if self.error is not None and self.calls > self.after:
            raise self.error()
        return torch.relu(x)


def on_both_paths(call: Any) -> dict[str, Any]:
    """``call()`` once on each path (dispatch.use_compiled), caches cleared before each."""
    results = {}
    for enabled in (False, True):
        dispatch.use_compiled(enabled)
        try:
            dispatch.clear_caches()
            results["compiled" if enabled else "python"] = call()
        finally:
            dispatch.use_compiled(True)
    return results


def test_the_extension_is_built_where_a_c_compiler_is() -> None:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if which(compiler) is None and which("cc") is None:
        pytest.skip(f"no C compiler here ({compiler!r}, 'cc'): the extension may rightly be missing")
    assert dispatch.PURE_PYTHON_REASON is None, dispatch.PURE_PYTHON_REASON
    assert dispatch.compiled()
    assert opcore.run is dispatch.run


def test_it_looks_like_run() -> None:
    compiled_only()
    assert inspect.signature(opcore.run) == inspect.signature(dispatch.run_python)
    assert opcore.run.__doc__ == dispatch.run_python.__doc__
    assert opcore.run.__wrapped__ is dispatch.run_python  # type: ignore[attr-defined]
    assert "compiled fast path" in repr(opcore.run)
    assert opcore.run.__name__ == "run"
    assert pickle.loads(pickle.dumps(opcore.run)) is opcore.run  # by reference, as a function is


def test_a_build_of_another_source_is_refused_with_the_fix() -> None:
    compiled_only()
    from opcore import _fastrun  # type: ignore[attr-defined,unused-ignore]

    assert dispatch._stale_build(_fastrun.SOURCE) is None  # this build is of the file beside it
    reason = dispatch._stale_build("0123456789abcdef")  # a build of an older _fastrun.c
    assert reason is not None and "another version" in reason and "0123456789abcdef" in reason
    assert "make" in reason and "pip install -e ." in reason


@pytest.mark.parametrize(
    ("value", "compiled"), [("1", False), ("yes", False), ("0", True), ("", True), ("maybe", None)]
)
def test_opcore_pure_python_keeps_the_extension_out(value: str, compiled: bool | None) -> None:
    compiled_only()  # the variable switches off what was built: only meaningful where it was
    code = "from opcore import dispatch; print(dispatch.compiled(), dispatch.PURE_PYTHON_REASON)"
    env = {**os.environ, "OPCORE_PURE_PYTHON": value}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if compiled is None:  # a value that is no flag: the error names the variable and what it takes
        assert done.returncode != 0 and "OPCORE_PURE_PYTHON" in done.stderr and "1 or 0" in done.stderr
        return
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == str(compiled)
    if not compiled:
        assert "OPCORE_PURE_PYTHON=1" in done.stdout


def test_no_reference_is_kept_on_any_branch() -> None:
    """Hits (torch and numpy), keyword hits, guard misses, first-level misses promoting a shape's slot,
    unguarded calls and recovered failures (torch and numpy), 2,000 times each: the arguments' and the
    slots' reference counts are where they started, and memory does not grow."""
    compiled_only()
    flaky = Flaky(lambda: RuntimeError("flaky"), after=10**9)
    opcore.register_plugin(
        make_plugin("torchy", {"relu": flaky, "linear": torch.nn.functional.linear, "layer_norm": F.layer_norm})
    )
    x, w, b = torch.ones(2, 3), torch.ones(4, 3), torch.zeros(4)
    wide = torch.ones(8)[::2]  # the bias's shape, other strides: the guard says no
    tall = torch.ones(5, 3)  # relu(x) and relu(tall) alternate: each takes its shape's slot and promotes it
    xn, wn, bn = x.numpy().copy(), w.numpy().copy(), b.numpy().copy()  # numpy arrays: the inline numpy key
    calls = [
        lambda: opcore.run("linear", xn, wn, bn),
        lambda: opcore.run("linear", xn, wn, b=bn),
        lambda: opcore.run("relu", xn),
        lambda: opcore.run("relu", xn.T),
        lambda: opcore.run("linear", x, w, b),
        lambda: opcore.run("linear", x, w, b=b),
        lambda: opcore.run("linear", x, w, wide),
        lambda: opcore.run("linear", x, w, backend="torchy"),
        lambda: opcore.run("relu", x),
        lambda: opcore.run("relu", tall),
        lambda: opcore.run("softmax", x, -1),
        lambda: opcore.run("softmax", x, dim=-1),
        lambda: opcore.run("layer_norm", x, (3,), x[0], x[1]),  # a constant between tensors: a pattern slot
        lambda: opcore.run("layer_norm", x, (3,), weight=x[0], bias=x[1]),
        lambda: opcore.run("layer_norm", x, (2, 3), x, x),  # another constant, same first shape: the pattern says no
    ]
    for call in calls:
        call()
    slots = dict(dispatch._GUARDED)
    assert slots
    counted = [x, w, b, wide, tall, xn, wn, bn, *slots.values(), *dispatch._LAST.values()]

    def counts() -> list[int]:
        return [sys.getrefcount(v) for v in counted]

    before = counts()
    tracemalloc.start()
    try:
        for call in calls:
            call()
        start = tracemalloc.take_snapshot()
        for _ in range(2000):
            for call in calls:
                call()
        grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(start, "filename"))
    finally:
        tracemalloc.stop()
    assert counts() == before
    assert grown < 64 * 1024, f"{grown} bytes more after 30,000 calls"
    # a cached entry that raises, recovered (the reference's relu takes over, with one warning)
    flaky.after = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2000):
            torch.testing.assert_close(opcore.run("relu", x), torch.relu(x))
            numpy.testing.assert_allclose(opcore.run("relu", xn), numpy.maximum(xn, 0))
        opcore.run("relu", tall)  # _LAST holds tall's slot again, as when counted (relu(x) promoted x's)
    assert counts() == before


def test_a_failing_entry_is_recovered_exactly_as_in_python() -> None:
    """The same error, note and chained context on both paths when a pinned kernel raises; the same
    result and warning when it falls back."""
    compiled_only()
    flaky = Flaky(lambda: ValueError("boom"), after=1)
    opcore.register_plugin(make_plugin("torchy", {"relu": flaky}))
    x = torch.ones(2, 3)

    def pinned() -> tuple[Any, ...]:
        flaky.calls = 0
        opcore.run("relu", x, backend="torchy")  # the first call: cached, guarded
        with pytest.raises(ValueError, match="boom") as caught:
            opcore.run("relu", x, backend="torchy")
        error = caught.value
        return type(error), str(error), error.__notes__, error.__context__, error.__cause__

    answers = on_both_paths(pinned)
    assert answers["python"] == answers["compiled"]
    assert "no fallback because of pinned to 'torchy'" in answers["compiled"][2][0]

    def falls_back() -> tuple[Any, ...]:
        flaky.calls = 0
        kernel_walk._warned.clear()  # the warning is given once per process: each path gets its own
        opcore.run("relu", x)
        with pytest.warns(opcore.FallbackWarning) as caught:
            result = opcore.run("relu", -x)
        return result.tolist(), [str(w.message) for w in caught]

    python = on_both_paths(falls_back)
    assert python["python"] == python["compiled"]


def test_an_error_raised_while_recovering_chains_to_the_kernels_error() -> None:
    """run()'s recovery runs inside ``except Exception as error``: an error raised there has the
    kernel's error as its __context__. The compiled path sets the same exception as being handled."""
    compiled_only()
    opcore.register_plugin(make_plugin("torchy", {"relu": Flaky(lambda: ValueError("boom"), after=1)}))
    x = torch.ones(2, 3)
    opcore.run("relu", x, backend="torchy")
    slot_key = next(k for k in dispatch._GUARDED if k[0] == "relu")
    inline = dispatch._GUARDED[slot_key][5]

    def refuse(raw: tuple[Any, ...], error: Exception) -> Any:
        raise LookupError("recovery failed")

    dispatch._RECOVER[inline] = refuse
    with pytest.raises(LookupError) as caught:
        opcore.run("relu", x, backend="torchy")
    assert isinstance(caught.value.__context__, ValueError) and str(caught.value.__context__) == "boom"
    assert sys.exc_info() == (None, None, None)  # the handled exception is restored afterwards


def test_a_base_exception_from_the_kernel_is_not_recovered() -> None:
    compiled_only()
    opcore.register_plugin(make_plugin("torchy", {"relu": Flaky(KeyboardInterrupt, after=1)}))
    x = torch.ones(2, 3)
    opcore.run("relu", x)
    with pytest.raises(KeyboardInterrupt):
        opcore.run("relu", x)


def test_many_threads_while_another_clears_the_caches() -> None:
    """9 threads calling the guarded path while a tenth clears the caches and another policy is set in
    some threads (in the others the default context's first level, two shapes alternating: each call
    promotes): every answer right, no crash (the slot is held while its guard and entry run)."""
    compiled_only()
    opcore.register_plugin(make_plugin("torchy", {"linear": torch.nn.functional.linear}))
    x, w, b = torch.randn(2, 3), torch.randn(4, 3), torch.randn(4)
    tall = torch.randn(5, 3)
    want = torch.nn.functional.linear(x, w, b)
    want_tall = torch.nn.functional.linear(tall, w, b)
    stop = threading.Event()
    errors: list[BaseException] = []

    def caller(i: int) -> None:
        try:
            if i % 3 == 0:  # no policy: _LAST, the shapes alternating
                while not stop.is_set():
                    torch.testing.assert_close(opcore.run("linear", x, w, b), want)
                    torch.testing.assert_close(opcore.run("linear", tall, w, b=b), want_tall)
                return
            with opcore.prefer("reference", "torchy") if i % 2 else opcore.prefer("torchy"):
                while not stop.is_set():
                    torch.testing.assert_close(opcore.run("linear", x, w, b), want)
                    torch.testing.assert_close(opcore.run("linear", x, w, b=b), want)
        except BaseException as error:  # reported below
            errors.append(error)

    def clearer() -> None:
        while not stop.is_set():
            dispatch.clear_caches()
            stop.wait(0.002)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(9)] + [threading.Thread(target=clearer)]
    for t in threads:
        t.start()
    stop.wait(1.5)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


@pytest.mark.usefixtures("run_path")
def test_the_default_context_keeps_the_last_confirmed_signature_per_op_and_arity() -> None:
    """dispatch._LAST: the slot last confirmed for (op, number of arguments), tried without a shape; a call
    of another shape takes its own _GUARDED slot and replaces it; a policy or a named backend never uses it."""
    opcore.register_plugin(make_plugin("torchy", {"relu": torch.relu}))
    small, tall = torch.randn(2, 3), torch.randn(5, 3)
    for _ in range(3):  # alternating: every call right, each promoting its own slot
        torch.testing.assert_close(opcore.run("relu", small), torch.relu(small))
        assert dispatch._LAST["relu"][1] is dispatch._GUARDED[("relu", None, None, 1, small.shape)]
        torch.testing.assert_close(opcore.run("relu", tall), torch.relu(tall))
        assert dispatch._LAST["relu"][1] is dispatch._GUARDED[("relu", None, None, 1, tall.shape)]
    torch.testing.assert_close(opcore.run("relu", small.T), torch.relu(small.T))  # the guards say no: run()'s key
    dispatch.clear_caches()
    opcore.run("relu", small, backend="torchy")
    with opcore.prefer("torchy"):
        opcore.run("relu", tall)
    assert "relu" not in dispatch._LAST and len(dispatch._GUARDED) == 2


def test_a_resolved_op_goes_straight_to_its_entry() -> None:
    """ResolvedOp's compiled base: a call is its entry's call (arguments and keywords as given), no
    reference kept; the pure-Python base (a __call__ slot) answers the same."""
    compiled_only()
    from opcore import _fastrun, resolved  # type: ignore[attr-defined,unused-ignore]

    x = torch.randn(2, 3)
    relu = opcore.resolve("relu", x)
    assert isinstance(relu, _fastrun.ResolvedBase)
    torch.testing.assert_close(relu(x), torch.relu(x))

    def entry(*args: Any, **kwargs: Any) -> Any:
        return args, kwargs

    relu._entry = entry
    before = sys.getrefcount(entry), sys.getrefcount(x)
    for _ in range(1000):
        assert relu(x, y=1) == ((x,), {"y": 1})
    assert (sys.getrefcount(entry), sys.getrefcount(x)) == before
    python = resolved._CallSlot.__new__(resolved._CallSlot)
    python._entry = entry
    assert python(x, y=1) == relu(x, y=1)
    empty = resolved.ResolvedOp.__new__(resolved.ResolvedOp)
    with pytest.raises(TypeError, match="opcore.resolve"):
        empty(x)


@pytest.mark.usefixtures("run_path")
def test_constants_between_tensors_are_guarded_by_their_pattern() -> None:
    """layer_norm(x, (8,), w, b): a _GUARDED slot of the call's pattern (tensors, and each constant's type
    and value), its tensors confirmed by the guard; another constant, type or tensor takes run()'s key."""
    opcore.register_plugin(make_plugin("torchy", {"layer_norm": F.layer_norm}))
    x, w, b = torch.randn(2, 8), torch.randn(8), torch.randn(8)
    torch.testing.assert_close(opcore.run("layer_norm", x, (8,), w, b), F.layer_norm(x, (8,), w, b))
    key = ("layer_norm", None, None, 4, x.shape)
    if key not in dispatch._GUARDED:
        pytest.skip(f"torch {torch.__version__} has no torch._C._dynamo.guards.TensorGuards")
    slot = dispatch._GUARDED[key]
    assert slot[1] is dispatch._PATTERN and slot[2][1] == (tuple, (8,))
    guarded = (*slot[:4], lambda *raw: "guarded", slot[5])
    dispatch._GUARDED[key] = dispatch._LAST["layer_norm"][4] = guarded
    assert opcore.run("layer_norm", torch.zeros(2, 8), (8,), w, b) == "guarded"  # other data
    assert opcore.run("layer_norm", x, (8,), weight=w, bias=b) == "guarded"  # keywords moved first
    others = [
        (x, [8], w, b),  # a list, not a tuple
        (x, (8,), w.double(), b),  # another dtype
        (x, (8,), w, torch.ones(16)[::2]),  # other strides
        (x, (8,), torch.nn.Parameter(w), b),  # a subclass
        (x.reshape(2, 2, 4), (2, 4), w.reshape(2, 4), b.reshape(2, 4)),  # another constant and shapes
    ]
    for args in others:
        try:
            result = opcore.run("layer_norm", *args)
        except opcore.OpcoreError:
            continue  # float64 with float32: refused, as by the Python key
        assert not isinstance(result, str), args


def _called(call: Callable[..., Any], *args: Any) -> tuple[Any, list[str]]:
    """call(*args)'s result and the names of the Python functions it called (sys.setprofile)."""
    names: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        result = call(*args)
    finally:
        sys.setprofile(None)
    return result, names


def _armed_relu(flaky: Flaky, pin: bool = False) -> tuple[Any, Any]:
    opcore.register_plugin(make_plugin("torchy", {"relu": flaky}))
    x = torch.randn(2, 3)
    relu = opcore.resolve("relu", x, backend="torchy" if pin else None)
    if "G" not in relu._entry.__code__.co_freevars:
        pytest.skip(f"torch {torch.__version__} has no torch._C._dynamo.guards.TensorGuards")
    assert not relu._armed  # the examples' signature is checked by the first call
    torch.testing.assert_close(relu(x), torch.relu(x))
    assert relu._armed
    return relu, x


def test_an_armed_resolved_op_calls_guard_and_kernel_itself() -> None:
    """Once the examples' signature was checked, the compiled base asks the guard and calls the kernel
    without the entry's frame; any other signature, a keyword or another number of arguments goes to the
    entry, which answers as before; a new entry disarms."""
    compiled_only()
    assert opcore.ResolvedOp.__flags__ & (1 << 11)  # Py_TPFLAGS_HAVE_VECTORCALL, on Python 3.11 too
    flaky = Flaky()
    relu, x = _armed_relu(flaky)
    other = torch.randn(2, 3)
    result, names = _called(relu, other)
    torch.testing.assert_close(result, torch.relu(other))
    assert names == ["__call__"], names  # the kernel alone: no entry, no dispatch
    for args in [(x[:1],), (x.T,), (x.double(),)]:
        result, names = _called(relu, *args)
        torch.testing.assert_close(result, torch.relu(*args))
        assert "call" in names, names  # the entry took it
    with pytest.raises(TypeError):
        relu(x, x)
    with pytest.raises(TypeError):
        relu(x=x)
    relu._entry = lambda *args: "entry"
    assert not relu._armed and relu(x) == "entry"


def test_an_armed_kernels_error_is_recovered_as_the_entry_recovers_it() -> None:
    """A kernel raising on the armed path: the same error, notes and context as through the entry when
    pinned; the same result and fallback warning unpinned; a BaseException left alone; nothing leaked."""
    compiled_only()

    def pinned(armed: bool) -> tuple[Any, ...]:
        opcore.unregister_plugin("torchy") if "torchy" in {r.name for r in opcore.backends()} else None
        flaky = Flaky(lambda: ValueError("boom"), after=1)
        relu, x = _armed_relu(flaky, pin=True)
        if not armed:
            relu._disarm()
        with pytest.raises(ValueError, match="boom") as caught:
            relu(x)
        error = caught.value
        assert sys.exc_info() == (None, None, None)
        return type(error), str(error), getattr(error, "__notes__", None), error.__context__, error.__cause__

    assert pinned(True) == pinned(False)
    opcore.unregister_plugin("torchy")
    flaky = Flaky(lambda: RuntimeError("flaky"), after=1)
    relu, x = _armed_relu(flaky)
    with pytest.warns(opcore.FallbackWarning):
        torch.testing.assert_close(relu(-x), torch.relu(-x))  # the reference's relu takes over
    before = sys.getrefcount(x), sys.getrefcount(relu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(1000):
            torch.testing.assert_close(relu(x), torch.relu(x))
    assert (sys.getrefcount(x), sys.getrefcount(relu)) == before
    opcore.unregister_plugin("torchy")
    relu, x = _armed_relu(Flaky(KeyboardInterrupt, after=1))
    with pytest.raises(KeyboardInterrupt):
        relu(x)


def test_only_plain_resolved_ops_are_armed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Watched constants (each call compares their version counters first) and check mode keep every
    call on the entry; the rest of the arguments follow the free ones (softmax's dim) or the kernel is
    prepared; arming checks what it is given."""
    compiled_only()
    opcore.register_plugin(make_plugin("torchy", {"softmax": torch.softmax, "relu": torch.relu}))
    x = torch.randn(2, 8)
    softmax = opcore.resolve("softmax", x, -1)
    softmax(x)
    if "G" not in softmax._entry.__code__.co_freevars:
        pytest.skip(f"torch {torch.__version__} has no torch._C._dynamo.guards.TensorGuards")
    assert softmax._armed
    result, names = _called(softmax, -x)
    torch.testing.assert_close(result, torch.softmax(-x, -1))
    assert names == [], names  # torch's softmax with dim -1 appended, from C

    def prepare(args: tuple[Any, ...], constants: frozenset[str]) -> Any:
        packed = args[1].T.contiguous()  # a copy of its own: the entry watches w's version counter
        return lambda x: x @ packed

    def opcore_backend() -> BackendSpec:
        return BackendSpec(name="packer", version="0", priority=500, device_types=(DeviceType.CPU,))

    def opcore_register_kernels(registrar: opcore.Registrar) -> None:
        def linear(x: Any, w: Any, b: Any) -> Any:
            return F.linear(x, w, b)

        registrar.add_kernel("linear", linear, dtypes=["float32"], array_kind="torch", prepare=prepare)

    hooks = {f.__name__: opcore.hookimpl(f) for f in (opcore_backend, opcore_register_kernels)}
    opcore.register_plugin(types.SimpleNamespace(__name__="packer", **hooks))
    w = torch.randn(8, 8)
    prepared = opcore.resolve("linear", x, w, constants=("w",))
    torch.testing.assert_close(prepared(x), x @ w.T)
    assert prepared.backend == "packer" and prepared.watched and not prepared._armed
    monkeypatch.setenv("OPCORE_CHECK", "1")
    opcore.reload_plugins()
    checked = opcore.resolve("relu", x)
    torch.testing.assert_close(checked(x), torch.relu(x))
    assert not checked._armed
    armable: Any = softmax  # _arm: the compiled base's only
    with pytest.raises(ValueError, match="at most 8"):
        armable._arm(torch.relu, torch.relu, (1,) * 8, torch.relu, 1)
    with pytest.raises(TypeError, match="callable"):
        armable._arm(None, torch.relu, (), torch.relu, 1)
    with pytest.raises(TypeError, match="subclass of ResolvedBase"):
        sys.modules["opcore._fastrun"].inherit_vectorcall(int)
