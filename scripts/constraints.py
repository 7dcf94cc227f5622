"""The pins behind ``make``: refresh constraints.txt, or write the oldest-runtimes constraints.

``python scripts/constraints.py refresh`` prints constraints.txt for the environment it runs in
(``make constraints`` runs it in a scratch venv resolved afresh); ``python scripts/constraints.py
oldest`` prints the constraints of ``make test-oldest``: torch at its pin and each runtime at the
floor its plugin's pyproject.toml declares.

>>> oldest_constraints()[-1]                                                    # doctest: +SKIP
'openvino==2025.4'
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the Makefile installs tomli first (the same parser, before it joined the stdlib)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
# the runtimes whose oldest declared versions make test-oldest installs, and where they are declared
RUNTIME_FLOORS = {
    "onnxruntime": ROOT / "plugins" / "onnxruntime" / "pyproject.toml",
    "onnx": ROOT / "plugins" / "onnxruntime" / "pyproject.toml",
    "openvino": ROOT / "plugins" / "openvino" / "pyproject.toml",
}
HEADER = """\
# Every install in this repository goes through this file: the CPU build of torch lies on
# the build machines' disk; a looser pin makes pip fetch a multi-GB CUDA build.
# Every other package is pinned to the version `make test` passed with; `make constraints`
# resolves the newest versions again (torch stays at its pin) and rewrites this file.
"""


def torch_pin() -> str:
    """The torch line of constraints.txt ("torch==2.13.0")."""
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("torch=="):
            return line.strip()
    raise SystemExit(f"{CONSTRAINTS} has no torch== line: pin torch there first")


def floor(package: str, pyproject: Path) -> str:
    """The version after ``>=`` in ``package``'s requirement in ``pyproject``."""
    for requirement in tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]:
        match = re.fullmatch(rf"{re.escape(package)}\s*>=\s*([\w.]+)", requirement.strip())
        if match:
            return match.group(1)
    raise SystemExit(f"{pyproject} declares no {package}>=X")


def oldest_constraints() -> list[str]:
    lines = [torch_pin()]
    # onnx 1.15 and the runtimes of its time are built against numpy 1.x, which numpy 2 cannot load
    lines.append("numpy<2")
    lines += [f"{package}=={floor(package, pyproject)}" for package, pyproject in RUNTIME_FLOORS.items()]
    return lines


def refreshed_constraints() -> list[str]:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--exclude-editable"], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    pins = []
    for line in frozen:
        name = line.split("==")[0].lower()
        if "==" not in line or name in ("pip", "setuptools", "wheel"):
            continue
        pins.append(line.split("+")[0] if name == "torch" else line)  # 2.13.0+cpu: keep the public pin
    return [HEADER.rstrip("\n"), *sorted(pins, key=str.lower)]


def main(argv: list[str]) -> int:
    if argv == ["oldest"]:
        print("\n".join(oldest_constraints()))
    elif argv == ["refresh"]:
        print("\n".join(refreshed_constraints()))
    else:
        print("usage: python scripts/constraints.py refresh|oldest", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
