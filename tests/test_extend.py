"""opcore.extend, the plugin API: every stated name resolves, the versions are what the docs say,
and the in-repo backends import opcore through it only (the AST twin of pyproject's import-linter
contract "the backends import opcore only through opcore.extend")."""

from __future__ import annotations

import ast
import doctest
import subprocess
import sys
from pathlib import Path

import pytest

from opcore import extend

ROOT = Path(__file__).resolve().parent.parent
# each backend's package folder (not its tests: they may reach into the core to check it)
BACKENDS = (
    ROOT / "opcore_cpu" / "opcore_cpu",
    ROOT / "opcore_cuda" / "opcore_cuda",
    ROOT / "plugins" / "onnxruntime" / "opcore_onnxruntime",
    ROOT / "plugins" / "openvino" / "opcore_openvino",
    ROOT / "plugins" / "example" / "opcore_example_vendor",
)


def opcore_imports(source: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """Every import of opcore (``opcore`` or ``opcore.*``, not ``opcore_*``) in ``source``, deferred
    and type-only ones included: (line, module, names imported from it; () for ``import m``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module == "opcore" or node.module.startswith("opcore."):
                found.append((node.lineno, node.module, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            found += [
                (node.lineno, alias.name, ())
                for alias in node.names
                if alias.name == "opcore" or alias.name.startswith("opcore.")
            ]
    return found


def backend_modules() -> list[Path]:
    return sorted(path for package in BACKENDS for path in package.rglob("*.py"))


def test_all_is_the_export_table_without_duplicates() -> None:
    assert len(extend.__all__) == len(set(extend.__all__))
    assert set(extend.__all__) == set(extend._EXPORTS)


@pytest.mark.parametrize("name", extend.__all__)
def test_every_stated_name_resolves(name: str) -> None:
    module, attribute = extend._EXPORTS[name]
    value = getattr(extend, name)
    assert value is not None
    source = sys.modules[module]
    assert value is (source if attribute is None else getattr(source, attribute))


def test_star_import_gives_every_stated_name() -> None:
    namespace: dict[str, object] = {}
    exec("from opcore.extend import *", namespace)
    assert set(extend.__all__) <= set(namespace)


def test_an_internal_name_is_refused_with_where_to_look() -> None:
    with pytest.raises(AttributeError, match=r"'Settings'.*opcore.extend.__all__.*internal"):
        extend.Settings  # noqa: B018 (opcore.settings.Settings: internal)


def test_the_versions_are_ints_of_their_packages() -> None:
    import opcore.backend
    import opcore.onemodel
    import opcore.torchkit

    versions = (extend.API_VERSION, extend.ONEMODEL_API_VERSION, extend.TORCHKIT_API_VERSION)
    assert all(type(version) is int and version >= 1 for version in versions)
    assert extend.API_VERSION == opcore.backend.API_VERSION == opcore.API_VERSION
    assert extend.ONEMODEL_API_VERSION == opcore.onemodel.API_VERSION
    assert extend.TORCHKIT_API_VERSION == opcore.torchkit.API_VERSION
    # a BackendSpec announces the backend API's version unless told otherwise
    spec = extend.BackendSpec(name="mine", version="1.0", priority=1, device_types=(extend.DeviceType.CPU,))
    assert spec.api_version == extend.API_VERSION


def test_the_docstring_examples_run() -> None:
    assert doctest.testmod(extend).failed == 0


def test_a_plugin_module_importing_the_registration_names_imports_no_runtime() -> None:
    # plugin.py modules import these when plugins load, for every user: no torch, no runtime, no kit
    code = (
        "import sys\n"
        "from opcore.extend import API_VERSION, BackendSpec, DeviceType, Registrar, hookimpl, register_torch_kernels\n"
        "heavy = ('torch', 'onnxruntime', 'openvino', 'opcore.testing', 'opcore.onemodel.op')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "[]"


def test_the_import_check_sees_every_kind_of_import() -> None:
    source = (
        "import opcore\nimport opcore_cpu.system\nfrom opcore.meta import FLOATING\nfrom opcore import run\n"
        "def f():\n    from opcore.extend import DType\n"
    )
    assert opcore_imports(source) == [
        (1, "opcore", ()),
        (3, "opcore.meta", ("FLOATING",)),
        (4, "opcore", ("run",)),
        (6, "opcore.extend", ("DType",)),
    ]


def test_the_backends_are_found() -> None:
    assert all(package.joinpath("__init__.py").is_file() for package in BACKENDS)
    assert len(backend_modules()) > 40


def test_backends_import_opcore_only_through_extend() -> None:
    reaching_past = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in backend_modules()
        for line, module, _ in opcore_imports(path.read_text())
        if module != "opcore.extend"
    ]
    assert reaching_past == [], "import these names from opcore.extend (the plugin API) instead"


def test_backends_import_only_stated_names() -> None:
    unstated = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in backend_modules()
        for line, module, names in opcore_imports(path.read_text())
        if module == "opcore.extend"
        for name in names
        if name not in extend.__all__
    ]
    assert unstated == []
