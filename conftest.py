"""The examples of README.md and docs/**/*.md as tests: tests/doc_examples.py (pyproject's testpaths
name the pages, so the plain `python -m pytest` of `make test` runs them)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "tests"))

from doc_examples import docs_sybil

pytest_collect_file = docs_sybil().pytest()
