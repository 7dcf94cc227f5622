"""The ``opcore`` command: ``doctor``, ``ops``, ``explain``, ``bench`` and ``tune`` (docs/cli.md).

Exit status: 0 fine; 1 the command found a problem (doctor: a plugin failed; explain: the call
cannot run; bench: no backend ran it; tune: nothing to measure); 2 bad arguments or input (one line on stderr);
3 an unexpected error inside opcore (``--debug`` shows its traceback); 130 interrupted.

>>> main(["doctor", "--json"])   # doctest: +SKIP
0
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from opcore._version import __version__
from opcore.errors import OpcoreError

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _common(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default=default if default is argparse.SUPPRESS else "auto",
        help="colour the output: auto (only on a terminal, and not with NO_COLOR set), always, never",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default if default is argparse.SUPPRESS else False,
        help="show the traceback of an unexpected error",
    )


def build_parser() -> argparse.ArgumentParser:
    from opcore.cli import bench_command, doctor_command, explain_command, ops_command, plan_command, tune_command

    parser = _Parser(
        prog="opcore",
        description="opcore: operator contracts, plugin backends and ranked fallback dispatch.",
        epilog="run `opcore COMMAND --help` for a command's options; docs/cli.md describes them all",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"opcore {__version__} (Python {sys.version.split()[0]}, {os.path.dirname(os.path.dirname(__file__))})",
    )
    _common(parser, None)
    # the same options after the command name (opcore doctor --color never); SUPPRESS keeps the top-level value
    parent = _Parser(add_help=False)
    _common(parent, argparse.SUPPRESS)
    subparsers = parser.add_subparsers(
        title="commands", dest="command", metavar="COMMAND", required=True, parser_class=_Parser
    )
    doctor_command.add_parser(subparsers, parent)
    ops_command.add_parser(subparsers, parent)
    explain_command.add_parser(subparsers, parent)
    bench_command.add_parser(subparsers, parent)
    tune_command.add_parser(subparsers, parent)
    plan_command.add_parser(subparsers, parent)
    return parser


def _error_text(error: BaseException) -> str:
    lines = str(error).strip().splitlines() or [type(error).__name__]
    return "\n".join([lines[0], *("  " + line.strip() for line in lines[1:])])


def _note_failed_plugins() -> None:
    """Outside the doctor, plugins that failed get one line on stderr (the doctor shows the details)."""
    from opcore.runtime import runtime

    rt = runtime()
    if not rt.loaded:
        return
    failed = [r.name for r in rt.loader.reports.values() if r.status.value == "failed"]
    if failed:
        noun = "plugin" if len(failed) == 1 else "plugins"
        print(f"opcore: note: {len(failed)} {noun} failed to load ({', '.join(failed)}); see `opcore doctor`",
              file=sys.stderr)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``opcore`` command with ``argv`` (default: sys.argv[1:]); returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version and usage errors end here
        return stop.code if isinstance(stop.code, int) else (EXIT_OK if stop.code is None else EXIT_USAGE)
    # the load report shows plugin failures; the logger's stderr lines would repeat them
    logging.getLogger("opcore").addHandler(logging.NullHandler())
    logging.getLogger("opcore").propagate = False
    from opcore.cli.render import style_for

    style = style_for(sys.stdout, args.color)
    try:
        status = args.handler(args, style)
        if args.command != "doctor":
            _note_failed_plugins()
        sys.stdout.flush()
        return status
    except OpcoreError as error:
        print(f"opcore: error: {_error_text(error)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("opcore: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (opcore ops | head): silence the flush at exit, as the Python docs advise
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as error:
        if args.debug:
            raise
        print(
            f"opcore: internal error: {type(error).__name__}: {_error_text(error)} "
            "(rerun with --debug for the traceback, and please report it)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
