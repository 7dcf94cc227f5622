"""Make sure the ``example`` backend is loaded for these tests.

Installed (``pip install -e plugins/example``), opcore finds it through its entry point. Not
installed, it is registered in-process with its kit entry, before the test modules are collected
(they parametrize over the entry's samples), so the tests run from a plain checkout too
(``pythonpath = ["."]`` in pyproject.toml makes the package importable).
"""

from __future__ import annotations

import pytest
from opcore_example_vendor import plugin, testing

import opcore
import opcore.testing

_registered_here: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not any(r.name == "example" and r.distribution for r in opcore.backends()):
        opcore.register_plugin(plugin)
        for entry in testing.entries():
            opcore.testing.add_entry(entry, replace=True)
        _registered_here.append("example")


def pytest_unconfigure(config: pytest.Config) -> None:
    for name in _registered_here:
        opcore.unregister_plugin(name)
