"""A real install: wheels of every distribution in this repository, a fresh virtual environment,
``pip install "opcore[onnxruntime,openvino]"`` from those wheels as a user would, then the doctor
lists exactly the installed backends as loaded; the example vendor plugin, once installed, appears
and wins dispatch for its ops, and disappears again when uninstalled.

Slow (a minute or two with a warm pip cache): it builds wheels and a virtual environment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"  # pins torch==2.13.0: pip takes the local CPU build, never a CUDA one
EXTRAS = ("onnxruntime", "openvino")
# every distribution: the core, then each folder with its own pyproject.toml
_FOLDERS = (*ROOT.glob("opcore_*/pyproject.toml"), *ROOT.glob("plugins/*/pyproject.toml"))
DISTRIBUTIONS = [ROOT, *sorted(p.parent for p in _FOLDERS)]
# *.so: the compiled fast path an editable install built in place (the wheel builds its own)
_IGNORED = shutil.ignore_patterns(
    "__pycache__", "*.egg-info", "build", "dist", ".venv", ".pytest_cache", "tests", "*.so"
)


def _environment() -> dict[str, str]:
    """The caller's environment without what would leak this checkout into the fresh one."""
    drop = ("OPCORE_", "PYTEST_", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _run(*command: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=timeout,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def _source_copy(distribution: Path, into: Path) -> Path:
    """The distribution's files in a scratch folder, so that building leaves nothing in the checkout."""
    target = into / (distribution.name if distribution != ROOT else "opcore")
    if distribution == ROOT:
        target.mkdir()
        for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
            if (ROOT / name).exists():
                shutil.copy2(ROOT / name, target / name)
        shutil.copytree(ROOT / "opcore", target / "opcore", ignore=_IGNORED)
    else:
        shutil.copytree(distribution, target, ignore=_IGNORED)
    return target


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One wheel per distribution, all in one --find-links folder."""
    sources, folder = tmp_path_factory.mktemp("sources"), tmp_path_factory.mktemp("wheels")
    for distribution in DISTRIBUTIONS:
        source = _source_copy(distribution, sources)
        # --no-build-isolation: setuptools from this environment, so that building needs no network
        _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", folder, source,
             cwd=sources)  # fmt: skip
    return folder


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, wheels: Path) -> Path:
    """A fresh virtual environment with ``opcore[onnxruntime,openvino]`` installed from the wheels."""
    where = tmp_path_factory.mktemp("venv") / "env"
    _run(sys.executable, "-m", "venv", where, cwd=where.parent)
    _pip(where, "install", "--find-links", wheels, "-c", CONSTRAINTS, f"opcore[{','.join(EXTRAS)}]==0.1.0")
    return where


def _pip(venv: Path, *args: str | Path) -> None:
    _run(venv / "bin" / "python", "-m", "pip", "-q", "--disable-pip-version-check", *args, cwd=venv.parent)


def _plugins(venv: Path) -> dict[str, dict]:
    """name -> the doctor's JSON record of each plugin (``opcore doctor --json``, schema 1)."""
    if (ROOT / "opcore" / "cli" / "__init__.py").exists():
        out = _run(venv / "bin" / "opcore", "doctor", "--json", cwd=venv.parent).stdout
        report = json.loads(out)
        assert report["schema"] == 1 and report["summary"]["exit_status"] == 0, report["summary"]
        assert report["opcore"]["path"].startswith(str(venv)), report["opcore"]["path"]  # not this checkout
        return {p["name"]: p for p in report["plugins"]}
    script = (
        "import json, opcore; print(json.dumps([{'name': r.name, 'status': r.status.value, "
        "'distribution': r.distribution} for r in opcore.backends()]))"
    )
    return {p["name"]: p for p in json.loads(_python(venv, script))}


def _python(venv: Path, script: str) -> str:
    return _run(venv / "bin" / "python", "-c", textwrap.dedent(script), cwd=venv.parent).stdout


def test_every_distribution_builds_a_wheel(wheels: Path) -> None:
    built = {path.name.split("-")[0] for path in wheels.glob("*.whl")}
    expected = {"opcore", "opcore_cpu", "opcore_onnxruntime", "opcore_openvino", "opcore_example_vendor"}
    assert built >= expected and len(built) == len(DISTRIBUTIONS), sorted(built)


def test_the_doctor_lists_exactly_the_installed_backends_as_loaded(venv: Path) -> None:
    plugins = _plugins(venv)
    assert sorted(plugins) == sorted(("reference", *EXTRAS))
    assert {name: p["status"] for name, p in plugins.items()} == dict.fromkeys(plugins, "loaded")
    assert plugins["onnxruntime"]["distribution"] == "opcore-onnxruntime"
    assert plugins["openvino"]["distribution"] == "opcore-openvino"


def test_the_wheel_has_the_compiled_fast_path_where_a_compiler_is(venv: Path) -> None:
    """setup.py's optional extension (opcore._fastrun, issue 15) is in the core's wheel when it was built
    with a C compiler at hand; the installed opcore.run is then the compiled callable."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler ('cc') here: the core's wheel is built without its optional extension")
    out = _python(venv, "from opcore import dispatch; print(dispatch.compiled(), dispatch.PURE_PYTHON_REASON)")
    assert out.split()[0] == "True", out


DISPATCH = """
    import json, numpy, opcore
    x = numpy.linspace(-3, 3, 12, dtype="float32").reshape(3, 4)
    try:
        swiglu = opcore.explain("example.swiglu", x, x).backend
    except opcore.UnknownOpError:
        swiglu = "unknown op"
    print(json.dumps({"swiglu": swiglu, "silu": opcore.explain("silu", x).backend,
                      "silu_transposed": opcore.explain("silu", x.T).backend}))
"""


def test_the_example_plugin_appears_wins_dispatch_and_disappears(venv: Path, wheels: Path) -> None:
    before = json.loads(_python(venv, DISPATCH))
    assert before["swiglu"] == "unknown op" and before["silu"] == "openvino"  # the highest priority installed

    _pip(venv, "install", "--no-index", "--find-links", wheels, "opcore-example-vendor==0.1.0")
    plugins = _plugins(venv)
    assert plugins["example"]["status"] == "loaded"
    assert (plugins["example"]["distribution"], plugins["example"]["distribution_version"]) == (
        "opcore-example-vendor",
        "0.1.0",
    )
    assert sorted(plugins) == sorted(("reference", "example", *EXTRAS))
    # its own op runs on it; its silu (250) outranks openvino (200) where its checker accepts
    after = json.loads(_python(venv, DISPATCH))
    assert after == {"swiglu": "example", "silu": "example", "silu_transposed": before["silu_transposed"]}

    # the conformance kit, from the installed wheels, in a folder that is not this checkout
    _pip(venv, "install", "-c", CONSTRAINTS, "pytest")
    kit = _run(venv / "bin" / "python", "-m", "pytest", "--pyargs", "opcore.testing", "--opcore-backend", "example",
               "-q", "-p", "no:cacheprovider", cwd=venv.parent)  # fmt: skip
    coverage = r"^example +ops 3/\d+ covered · samples \d+ passed, 0 failed"  # swiglu, silu, clamp
    assert re.search(coverage, kit.stdout, re.M), kit.stdout[-3000:]

    _pip(venv, "uninstall", "-y", "opcore-example-vendor")
    assert sorted(_plugins(venv)) == sorted(("reference", *EXTRAS))
    assert json.loads(_python(venv, DISPATCH)) == before
