"""The ``py.typed`` promise: every package that ships the marker is one mypy checks (``make test``
runs mypy with the ``[tool.mypy]`` configuration), and its distribution ships the marker.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")

ROOT = Path(__file__).resolve().parents[2]
_SKIPPED = {"build", "dist", "node_modules", "__pycache__"}


def _markers() -> list[Path]:
    """Every py.typed of this checkout (virtual environments and build outputs pruned, not walked)."""
    found = []
    for folder, subfolders, names in os.walk(ROOT):
        subfolders[:] = [d for d in subfolders if d not in _SKIPPED and not d.startswith(".")]
        if "py.typed" in names:
            found.append(Path(folder) / "py.typed")
    return sorted(found)


def test_every_typed_package_is_type_checked() -> None:
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    markers = _markers()
    assert {p.parent.name for p in markers} >= {"opcore", "opcore_cpu", "opcore_onnxruntime", "opcore_openvino"}
    unchecked = [
        str(p.relative_to(ROOT))
        for p in markers
        if not any(p.parent.relative_to(ROOT).is_relative_to(folder) for folder in files)
    ]
    assert not unchecked, (
        f"packages marked py.typed that mypy does not check (add them to [tool.mypy] files): {unchecked}"
    )


def test_every_typed_package_ships_its_marker() -> None:
    for marker in _markers():
        package = marker.parent
        pyproject = package.parent / "pyproject.toml"
        assert pyproject.is_file(), f"{package} has no distribution beside it"
        data = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]
        assert "py.typed" in data.get(package.name, []), f"{pyproject} does not ship {package.name}/py.typed"
