"""Fuzzed bad inputs over every op and backend (issue 14): 0 non-OpcoreError exceptions, 0 crashes,
0 calls over 2 s. OPCORE_FUZZ_SAMPLES (default 1) sets how many conformance samples per op are
mutated; docs/reliability.md reports a run with 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# every test here on both paths of opcore.run: pure Python and compiled (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("run_path")

SAMPLES = int(os.environ.get("OPCORE_FUZZ_SAMPLES", "1"))


def test_fuzzed_calls_raise_only_opcore_errors_and_never_crash_or_hang() -> None:
    script = Path(__file__).with_name("fuzz_calls.py")
    done = subprocess.run(
        [sys.executable, str(script), str(SAMPLES)], capture_output=True, text=True, timeout=1800, check=False
    )
    assert done.returncode == 0, f"the fuzzer died (exit {done.returncode}): {done.stderr[-3000:]}"
    report = json.loads(done.stdout.strip().splitlines()[-1])
    counts = report["counts"]
    print(f"\nfuzz: {json.dumps(counts)}")
    assert counts["tried"] > 1000
    assert counts["other_exceptions"] == 0 and counts["slow"] == 0, report["examples"]
