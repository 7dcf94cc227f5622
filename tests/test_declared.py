"""opcore.declared: a kernel module's OPS tuple is its coverage claim, read without importing it;
``__all__`` claims nothing, and an OPS entry without a kernel fails at registration.
"""

from __future__ import annotations

import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from opcore.declared import declared_ops, family_kernels
from opcore.errors import PluginError
from opcore.opset import BUILTIN_CONTRACTS
from opcore.reference import plugin


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty package ``declkernels`` on sys.path; each test writes its family modules."""
    folder = tmp_path / "declkernels"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "declkernels", raising=False)  # another test's package of that name
    declared_ops.cache_clear()
    yield folder
    sys.modules.pop("declkernels", None)
    declared_ops.cache_clear()


def _write(package: Path, family: str, source: str) -> None:
    (package / f"{family}.py").write_text(textwrap.dedent(source))


def test_a_name_left_out_of_all_still_registers_its_kernel(package):
    # __all__ is the module's Python exports only: relu is not exported, yet it is a kernel
    _write(
        package,
        "elementwise",
        """
        import no_such_runtime  # never imported: the source is read
        from math import exp as exp
        from math import (
            sin,  # a comment inside the import
            cos as cos,
        )

        __all__ = ["helper"]
        OPS: tuple[str, ...] = ("relu", "exp", "sin", "cos", "neg", "abs")

        def relu(x): ...
        def helper(x): ...
        neg, abs = helper, helper
        """,
    )
    assert declared_ops("declkernels.elementwise") == ("relu", "exp", "sin", "cos", "neg", "abs")
    found = family_kernels("declkernels", BUILTIN_CONTRACTS)
    assert found["relu"] == "elementwise" and "helper" not in found
    assert "no_such_runtime" not in sys.modules


def test_an_ops_entry_without_a_kernel_is_an_error_at_registration(package):
    _write(package, "elementwise", 'OPS = ("relu", "gelu")\n\ndef relu(x): ...\n    gelu = relu  # not module level\n')
    with pytest.raises(PluginError, match=r"lists 'gelu' in OPS but defines no such kernel") as caught:
        family_kernels("declkernels", BUILTIN_CONTRACTS)
    assert "define gelu(...) at module level in declkernels.elementwise" in str(caught.value)


def test_an_ops_entry_of_another_family_is_an_error(package):
    _write(package, "elementwise", 'OPS = ("relu", "linear")\nrelu = None\nlinear = None\n')
    with pytest.raises(PluginError, match=r"declkernels.elementwise.OPS names 'linear', which is no op of the"):
        family_kernels("declkernels", BUILTIN_CONTRACTS)


def test_a_module_without_ops_is_an_error_and_a_missing_module_declares_nothing(package):
    _write(package, "elementwise", '__all__ = ["relu"]\n\ndef relu(x): ...\n')
    with pytest.raises(PluginError, match=r"has no literal OPS tuple"):
        declared_ops("declkernels.elementwise")
    assert declared_ops("declkernels.linear") == ()  # a family the backend does not serve
    assert declared_ops("no_such_package.elementwise") == ()


def test_a_module_made_in_memory_is_read_as_it_is(monkeypatch):
    module = types.ModuleType("declmemory.elementwise")
    exec("OPS = ('relu', 'exp')\ndef relu(x): ...\n", module.__dict__)
    monkeypatch.setitem(sys.modules, "declmemory.elementwise", module)
    declared_ops.cache_clear()
    with pytest.raises(PluginError, match=r"lists 'exp' in OPS"):
        declared_ops("declmemory.elementwise")
    declared_ops.cache_clear()


def test_the_reference_backend_declares_every_builtin_op_in_its_family_module():
    assert set(plugin.KERNELS) == {c.name for c in BUILTIN_CONTRACTS}
    assert all(plugin.KERNELS[c.name] == f"opcore.reference.{c.family}:{c.name}" for c in BUILTIN_CONTRACTS)
