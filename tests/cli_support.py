"""Running the ``opcore`` command as a subprocess for the CLI tests.

``run_cli(..., fixtures=True)`` puts tests/fixture_plugins on PYTHONPATH, which makes the
fixture plugins' entry points visible (a good one, broken ones, an unavailable one, a duplicate).
Every OPCORE_* variable and colour setting of the calling environment is dropped first, so a
developer's shell does not change the results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixture_plugins"

# The fixture plugins that fail to load, and why (tests/fixture_plugins/*).
FAILING = {
    "fixture_importerror": "import failed: ImportError: libwidget.so.3",
    "fixture_badapi": "built for opcore plugin API 999",
    "fixture_hookraises": "RuntimeError: device table corrupted",
    "fixture_unknownop": "kernel for unknown op 'rleu'",
    "fixture_twin": "claimed by 2 distributions",
    "fixture_twin [opcore-fixture-zz-duplicate]": "claimed by 2 distributions",
}


@dataclass(frozen=True)
class Result:
    status: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def environment(fixtures: bool = False, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPCORE_")}
    for name in ("NO_COLOR", "FORCE_COLOR", "PYTHONWARNINGS"):
        env.pop(name, None)
    if fixtures:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FIXTURES), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def run_cli(
    *args: str, fixtures: bool = False, timeout: float = 120, env: Mapping[str, str] | None = None, **extra: str
) -> Result:
    """``python -m opcore.cli ARGS`` with a clean environment (plus the variables of ``env`` and ``extra``).

    A mapping goes in ``env`` rather than ``**mapping``, so a type checker knows none of its keys
    lands on ``fixtures`` or ``timeout``.
    """
    done = subprocess.run(
        [sys.executable, "-m", "opcore.cli", *args],
        capture_output=True,
        text=True,
        env={**environment(fixtures), **(env or {}), **extra},
        timeout=timeout,
        cwd=REPO,
        check=False,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def assert_one_line_error(result: Result, *fragments: str) -> None:
    """Exit status 2, nothing on stdout, one ``opcore...: error:`` line on stderr, no traceback."""
    assert result.status == 2, (result.status, result.out, result.err)
    assert result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("opcore") and ": error: " in lines[0], lines[0]
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
