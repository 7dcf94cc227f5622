"""The examples of README.md and docs/**/*.md as tests (sybil; the root conftest.py collects them).

* A ```python block runs as written, in one namespace per page: a block may use what an earlier
  block of the same page defined, nothing else. Each page runs in a fresh temporary folder, with
  no OPCORE_* variable set and the cache folder (tuning file, plugins.json) in it.
* A shell block runs its `opcore` commands (`python -m opcore.cli`, in a child process):
  - in a ```bash, ```sh or ```shell block, each line that starts with `opcore `, which must exit 0;
  - in a block (any info string) whose lines start with `$ opcore `, each such command with the
    output shown below it, which must exit 0 and print what is shown, compared line by line in
    order (the shown lines must appear in the output in that order; more lines may be printed;
    a line `...` stands for any lines, `...` in a line for any text). Measured values are not
    compared: numbers (with their units), ratios (`2.1x slower`, `fastest`) and paths match any
    of their kind. Everything else, split into the columns a run of two spaces separates, must be
    equal. `<!-- output: labels -->` before a block compares only each line's first column (its
    label) and indentation: for output whose values depend on the machine (`opcore doctor`'s ISA,
    CPU); `<!-- output: any order -->` drops the order (rows sorted by a measurement); both may
    be given, `<!-- output: labels, any order -->`.
* `<!-- skip: next "reason" -->` skips the next block with that reason, and
  `<!-- skip: next if(not cuda, reason="needs a CUDA GPU") -->` where no GPU is visible (`cuda`
  is true where torch sees one). A skip without a reason is an error.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sybil import Document, Example, Region, Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser
from sybil.parsers.markdown.lexers import RawFencedCodeBlockLexer

ROOT = Path(__file__).resolve().parent.parent
# every page, found by glob: a new page is covered without a change here
PATTERNS = ["README.md", "docs/*.md", "docs/**/*.md"]
SHELL_LANGUAGES = {"bash", "sh", "shell"}
COMMAND_TIMEOUT_S = 300

# a measured value: a number (a version, a time with its unit, a ratio), a path, a timing verdict
_MEASURED = re.compile(
    r"(?<![\w/])(?:/[^\s,;)]+"  # a path
    r"|\d[\d.]*x (?:slower|faster)|fastest"  # a ratio to the fastest
    r"|[-+]?\d[\d.,_]*(?:e[-+]?\d+)?(?:[-+]\w+)?(?:\s?(?:µs|us|ns|ms|s|x|%|B|KB|MB|GB|KiB|MiB|GiB|tok/s))?)(?![\w])"
)
_COLUMNS = re.compile(r"\s{2,}")


def _normalise(cell: str) -> str:
    return _MEASURED.sub("#", cell.strip())


def _columns(line: str) -> tuple[int, list[str]]:
    text = line.rstrip()
    indent = len(text) - len(text.lstrip())
    return indent, [_normalise(cell) for cell in _COLUMNS.split(text.strip())]


def _label(line: str) -> tuple[int, str]:
    """A line's indentation and first column (its first word where it has no columns)."""
    indent, cells = _columns(line)
    return indent, cells[0] if len(cells) > 1 else cells[0].split(" ")[0]


def line_matches(shown: str, printed: str, labels_only: bool) -> bool:
    """Whether a printed line is the shown one, measured values aside ("..." in a shown line stands
    for any text); labels_only: the same indentation and label."""
    if labels_only:
        return _label(shown) == _label(printed)
    pattern = ".*".join(re.escape(" | ".join(_columns(part)[1])) for part in shown.strip().split("..."))
    return re.fullmatch(pattern, " | ".join(_columns(printed)[1])) is not None


def output_mismatch(shown: list[str], printed: list[str], labels_only: bool, any_order: bool = False) -> str | None:
    """None when every shown line is printed, in order (any_order: anywhere; a line "..." stands for
    any lines); else the first shown line that is not."""
    position = 0
    for line in shown:
        if not line.strip() or line.strip() == "...":
            continue
        start = 0 if any_order else position
        for index in range(start, len(printed)):
            if line_matches(line, printed[index], labels_only):
                position = index + 1
                break
        else:
            return f"shown line not printed{'' if any_order else ' (in this order)'}: {line!r}"
    return None


@dataclass(frozen=True)
class Command:
    """One `opcore` command of a shell block; shown None: its output is not checked."""

    line: str
    shown: list[str] | None
    labels_only: bool = False
    any_order: bool = False


def run_command(command: Command) -> None:
    argv = shlex.split(command.line, comments=True)
    assert argv and argv[0] == "opcore", command.line
    env = dict(os.environ)
    # the child imports what this process imports (a worktree's opcore before an installed one)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-m", "opcore.cli", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"`{command.line}` exited {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    if command.shown is not None:
        problem = output_mismatch(command.shown, done.stdout.splitlines(), command.labels_only, command.any_order)
        if problem:
            raise AssertionError(f"`{command.line}`: {problem}\nit printed:\n{done.stdout}")


def evaluate_commands(example: Example) -> None:
    for command in example.parsed:
        run_command(command)


def _session(source: str, flags: set[str]) -> list[Command]:
    """The `$ opcore ...` commands of a block, each with the lines shown below it."""
    commands: list[Command] = []
    current: str | None = None
    shown: list[str] = []
    for line in source.splitlines():
        if line.startswith("$ "):
            if current is not None:
                commands.append(Command(current, shown, "labels" in flags, "any order" in flags))
            current, shown = line[2:].strip(), []
        elif current is not None:
            shown.append(line)
    if current is not None:
        commands.append(Command(current, shown, "labels" in flags, "any order" in flags))
    return [c for c in commands if c.line.startswith("opcore ")]


class ShellBlockParser:
    """The `opcore` commands of the pages' shell blocks, as examples (see the module's docstring)."""

    def __init__(self) -> None:
        self.blocks = RawFencedCodeBlockLexer(
            info_pattern=re.compile(r"(?P<language>[^\n]*)$\n", re.MULTILINE),
            mapping={"language": "language", "source": "source"},
        )
        self.flags = re.compile(r"<!--\s*output:\s*([\w ,]+?)\s*-->\s*\n\s*$")

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in self.blocks(document):
            language = str(region.lexemes["language"]).strip()
            source = str(region.lexemes["source"])
            directive = self.flags.search(document.text[max(0, region.start - 200) : region.start])
            flags = {flag.strip() for flag in directive.group(1).split(",")} if directive else set()
            if flags - {"labels", "any order"}:
                raise ValueError(f"{document.path}: unknown output flags {sorted(flags)}: labels, any order")
            if any(line.startswith("$ opcore ") for line in source.splitlines()):
                commands = _session(source, flags)
            elif language in SHELL_LANGUAGES:
                commands = [Command(line.strip(), None) for line in source.splitlines() if line.startswith("opcore ")]
            else:
                continue
            if commands:
                yield Region(region.start, region.end, commands, evaluate_commands)


class ReasonedSkipParser(SkipParser):
    """sybil's skip directive, refusing a skip without a reason (a skipped block must say why)."""

    def __call__(self, document: Document) -> Iterable[Region]:
        for region in super().__call__(document):
            action, reason = region.parsed
            if action in ("start", "next") and not reason:
                raise ValueError(f"{document.path}: `skip: {action}` without a reason; write the reason after it")
            yield region


def _cuda_visible() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


_SAVED: list[tuple[str, dict[str, str], tempfile.TemporaryDirectory[str]]] = []


def _fresh_threads() -> int:
    """torch's thread count as a fresh process has it (what a page's `opcore` commands run with),
    read when the pages are collected, before any test could change it."""
    import torch

    return int(torch.get_num_threads())


_THREADS = _fresh_threads()
_THREADS_SAVED: list[int] = []


def setup_page(namespace: dict[str, Any]) -> None:
    """Each page: a fresh folder as the working directory, no OPCORE_* variable, a cache of its own."""
    folder = tempfile.TemporaryDirectory(prefix="opcore-docs-")
    _SAVED.append((os.getcwd(), dict(os.environ), folder))
    for name in [n for n in os.environ if n.startswith("OPCORE_")]:
        del os.environ[name]
    os.environ["XDG_CACHE_HOME"] = str(Path(folder.name) / "cache")
    os.chdir(folder.name)
    # a test before the page may have changed torch's threads (a bench, a Ray actor run in-process):
    # the page runs with a fresh process's, as its shell commands do (the tuning file records them)
    import torch

    _THREADS_SAVED.append(torch.get_num_threads())
    torch.set_num_threads(_THREADS)
    _reset_opcore()
    namespace["cuda"] = _cuda_visible()


def teardown_page(namespace: dict[str, Any]) -> None:
    cwd, environ, folder = _SAVED.pop()
    import torch

    torch.set_num_threads(_THREADS_SAVED.pop())
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    _reset_opcore()
    folder.cleanup()


def _reset_opcore() -> None:
    import opcore

    runtime = opcore.runtime.runtime()
    runtime.overrides.clear()
    runtime.in_process.clear()
    opcore.reload_plugins()


def docs_sybil() -> Sybil:
    return Sybil(
        parsers=[PythonCodeBlockParser(), ShellBlockParser(), ReasonedSkipParser()],
        patterns=PATTERNS,
        path=str(ROOT),
        setup=setup_page,
        teardown=teardown_page,
    )
