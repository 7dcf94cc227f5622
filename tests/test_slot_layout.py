"""A guarded slot's layout is named on both sides: opcore._dispatchcaches' SLOT_* (Python: the slow path
builds slots, run_python reads them) and opcore/_fastrun.c's #defines (the compiled path reads them).
Read both ways: from the C source's text (also where the extension is not built) and from the built
module's SLOT_LAYOUT."""

from __future__ import annotations

import re
from pathlib import Path

import numpy
import pytest

import opcore
from opcore import _dispatchcaches as caches
from opcore import dispatch

SOURCE = Path(opcore.__file__).with_name("_fastrun.c")


def c_defines() -> dict[str, int]:
    """The integer #defines of _fastrun.c named SLOT_* or LAST_ROW_SIZE."""
    found = re.findall(r"^#define\s+((?:SLOT_\w+)|LAST_ROW_SIZE)\s+(\d+)\b", SOURCE.read_text(), re.MULTILINE)
    return {name: int(value) for name, value in found}


def test_python_names_every_field_once_and_in_range() -> None:
    fields = {k: v for k, v in caches.SLOT_LAYOUT.items() if k not in ("SLOT_SIZE", "LAST_ROW_SIZE")}
    assert sorted(fields.values()) == list(range(caches.SLOT_SIZE))
    for name, value in caches.SLOT_LAYOUT.items():
        assert getattr(caches, name) == value, name


@pytest.mark.skipif(not SOURCE.is_file(), reason="opcore/_fastrun.c is not installed beside opcore (a wheel)")
def test_the_c_source_defines_the_same_layout() -> None:
    assert c_defines() == caches.SLOT_LAYOUT
    text = SOURCE.read_text()
    # no slot field read by a bare index: each PyTuple_GET_ITEM(slot, ...) names its field
    assert re.findall(r"PyTuple_GET_ITEM\(slot, \d", text) == []


def test_the_built_module_reads_the_same_layout() -> None:
    fastrun = dispatch.compiled_part("FastRun")
    if fastrun is None:
        pytest.skip(f"the compiled fast path does not serve this process: {dispatch.PURE_PYTHON_REASON}")
    import opcore._fastrun as built  # type: ignore[import-not-found,unused-ignore]

    assert built.SLOT_LAYOUT == caches.SLOT_LAYOUT


def test_a_cached_torch_signature_fills_each_field() -> None:
    torch = pytest.importorskip("torch", reason="guarded slots are made for torch calls")
    dispatch.clear_caches()
    x = torch.ones(2, 3)
    opcore.run("softmax", x, -1, backend="reference")
    slots = [s for k, s in caches.GUARDED.items() if k[0] == "softmax"]
    if not slots:
        pytest.skip("no tensor guard here (neither opcore._torchguard nor torch's TensorGuards): no slot is made")
    (slot,) = slots
    assert len(slot) == caches.SLOT_SIZE
    assert slot[caches.SLOT_ARGUMENTS] == 2
    assert slot[caches.SLOT_PLAIN] is int and slot[caches.SLOT_VALUE] == -1
    assert slot[caches.SLOT_CHECK](x) and not slot[caches.SLOT_CHECK](torch.ones(3, 2))
    assert caches.RECOVER[slot[caches.SLOT_RECOVERY_KEY]] is not None
    numpy.testing.assert_allclose(slot[caches.SLOT_ENTRY](x, -1).numpy(), torch.softmax(x, -1).numpy(), rtol=1e-6)
    assert slot[caches.SLOT_BARE] is None or callable(slot[caches.SLOT_BARE][0])
    dispatch.clear_caches()
