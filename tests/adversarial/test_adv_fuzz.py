"""Fuzzed calls over every op and backend (issues 14, 29): only results or OpcoreErrors, no crash, no hang.

The properties and their hypothesis strategies are in fuzz_properties.py, run here in a child pytest
so that a crash (SIGFPE, an OOM kill) fails this test instead of ending the test run. A failing call
is shrunk by hypothesis and printed (`Draw 1 (call): opcore.run(...)`); the calls the hand-written fuzzer
found are replayed first as `@example`s. HYPOTHESIS_PROFILE=soak runs many more (docs/testing.md);
OPCORE_FUZZ_EXAMPLES sets the examples per property.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_fuzzed_calls_return_or_raise_opcore_errors_and_never_crash_or_hang() -> None:
    properties = Path(__file__).with_name("fuzz_properties.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", str(properties)],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    print(done.stdout[-2000:])
    shrunk = [line for line in done.stdout.splitlines() if "Draw 1 (call)" in line or line.startswith("FAILED")]
    assert done.returncode == 0, (
        "\n".join(shrunk)
        + "\n"
        + (f"the fuzzer failed (exit {done.returncode}):\n{done.stdout[-8000:]}{done.stderr[-3000:]}")
    )
