"""The benchmark scripts under bench/ imported as modules, for the tests of their pure parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str) -> Any:
    """bench/<name>.py as the module ``bench_<name>`` (registered in sys.modules: dataclasses look
    their module up)."""
    path = BENCH / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_main(bench: Any, argv: list[str], monkeypatch: Any) -> int:
    """``bench.main(argv)`` for a bench that sets torch's threads and OPCORE_RUNTIME_THREADS itself:
    both given back after it (the variable through ``monkeypatch``)."""
    import torch

    monkeypatch.setenv("OPCORE_RUNTIME_THREADS", "1")  # the bench sets it: given back after the test
    threads = torch.get_num_threads()
    try:
        return int(bench.main(argv))
    finally:
        torch.set_num_threads(threads)
