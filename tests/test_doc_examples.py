"""The docs' example checker (tests/doc_examples.py): what a shown output must match, and the skips."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_examples import ROOT, ReasonedSkipParser, ShellBlockParser, line_matches, output_mismatch
from sybil import Document

BENCH_ROW = "  cpu          cpu/aten     20.8 µs  20.8 µs .. 25.4 µs  20.5 µs  1.33 ms     2.73x slower"


def test_measured_values_match_any_of_their_kind() -> None:
    printed = "  cpu          cpu/aten     1.2 ms   1.1 ms .. 1.3 ms    1.0 ms   250 µs      fastest"
    assert line_matches(BENCH_ROW, printed, labels_only=False)
    assert line_matches("opcore    0.1.0  /work/main/opcore", "opcore    0.2.1  /tmp/x/opcore", labels_only=False)


def test_a_different_label_or_kernel_name_fails() -> None:
    assert not line_matches(BENCH_ROW.replace("cpu/aten    ", "cpu/aten (prepared)"), BENCH_ROW, labels_only=False)
    assert not line_matches(BENCH_ROW, BENCH_ROW.replace("  cpu ", "  gpu "), labels_only=False)


def test_labels_only_compares_the_first_column_and_indentation() -> None:
    assert line_matches("isa       avx2 fma avx512f", "isa       avx2 fma · missing: avx512f", labels_only=True)
    assert not line_matches("  isa  avx2", "isa  avx2", labels_only=True)
    assert not line_matches("isa  avx2", "cpu  avx2", labels_only=True)


def test_shown_lines_in_order_with_ellipses() -> None:
    printed = ["head", "a  1 ms", "b  2 ms", "c  3 ms", "tail"]
    assert output_mismatch(["head", "...", "c  9 ms"], printed, labels_only=False) is None
    assert output_mismatch(["head", "c ..."], printed, labels_only=False) is None
    assert output_mismatch(["c  3 ms", "a  1 ms"], printed, labels_only=False) is not None
    assert output_mismatch(["c  3 ms", "a  1 ms"], printed, labels_only=False, any_order=True) is None
    assert "'d  4 ms'" in str(output_mismatch(["d  4 ms"], printed, labels_only=False))


def _document(tmp_path: Path, text: str) -> Document:
    page = tmp_path / "page.md"
    page.write_text(text)
    return Document(text, str(page))


def test_a_skip_without_a_reason_is_an_error(tmp_path: Path) -> None:
    document = _document(tmp_path, "<!-- skip: next -->\n```python\n1 / 0\n```\n")
    with pytest.raises(ValueError, match="without a reason"):
        list(ReasonedSkipParser()(document))
    reasoned = _document(tmp_path, '<!-- skip: next "needs a GPU" -->\n```python\n1 / 0\n```\n')
    assert len(list(ReasonedSkipParser()(reasoned))) == 1


def test_shell_blocks_yield_their_opcore_commands(tmp_path: Path) -> None:
    text = (
        "```bash\npip install opcore\nopcore doctor   # a comment\n```\n\n"
        "<!-- output: labels, any order -->\n```text\n$ opcore ops\nrelu  x\n$ ls\n```\n\n"
        "```\nopcore explain relu\n```\n"
    )
    regions = list(ShellBlockParser()(_document(tmp_path, text)))
    commands = [command for region in regions for command in region.parsed]
    assert [c.line for c in commands] == ["opcore doctor   # a comment", "opcore ops"]
    assert commands[0].shown is None
    assert commands[1].shown == ["relu  x"] and commands[1].labels_only and commands[1].any_order


def test_every_page_is_covered() -> None:
    from doc_examples import PATTERNS

    pages = {p for pattern in PATTERNS for p in ROOT.glob(pattern)}
    assert ROOT / "README.md" in pages and ROOT / "docs" / "backends" / "cuda.md" in pages
