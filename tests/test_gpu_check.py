"""scripts/gpu_check.sh where no GPU is visible: it stops at once, with why and what to do instead.

Its steps need the GPU image (docs/testing.md, "On a GPU machine"); ``--dry-run`` runs its installs,
which change the environment, so it is run by hand, not here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.sh"

pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash"),
    pytest.mark.skipif(
        shutil.which("nvidia-smi") is not None, reason="nvidia-smi is on the PATH: a GPU may be visible"
    ),
]


def gpu_check(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OUT": str(out)}
    command = ["bash", str(SCRIPT), *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, env=env, timeout=30)


def test_without_a_gpu_it_exits_2_at_once_and_says_what_to_do(tmp_path):
    done = gpu_check(out=tmp_path)
    assert done.returncode == 2
    assert "no GPU here (nvidia-smi is not on the PATH)" in done.stderr
    assert "--dry-run" in done.stderr and "On a GPU machine" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing installed, nothing written


def test_an_unknown_argument_is_a_usage_error(tmp_path):
    done = gpu_check("--gpu", out=tmp_path)
    assert done.returncode == 64
    assert "unknown argument '--gpu'; expected --dry-run or --help" in done.stderr


def test_help_names_the_dry_run(tmp_path):
    done = gpu_check("--help", out=tmp_path)
    assert done.returncode == 0
    assert "--dry-run" in done.stdout and "summary.txt" in done.stdout
