"""``opcore doctor``'s arguments and handler (the record is in doctor.py, the text in doctor_text.py)."""

from __future__ import annotations

import argparse
from typing import Any

from opcore.cli.render import Style, dumps_json

__all__ = ["add_parser", "run_doctor"]

EXAMPLES = """\
examples:
  opcore doctor                  what was discovered, loaded, failed and why
  opcore doctor --verbose        with the tracebacks of plugins that failed
  opcore doctor --json           the stable form for scripts (schema in docs/cli.md)
  opcore doctor --quick          skip the backends' describe() (no runtime imports)
  opcore doctor --deep           import torch first: live torch values (threads, devices, TF32);
                                 import every 'module:qualname' kernel and check its arity

exit status: 0 fine, 1 a plugin failed to load, the OPCORE_* settings are invalid, or calls will
fail (OPCORE_BACKENDS names a backend that is not loaded, no backend is loaded, a kernel is broken)"""


def add_parser(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "doctor",
        parents=[parent],
        help="what opcore discovered, what failed and why (exit status 1 when a plugin failed or calls will fail)",
        description="Show opcore's version, Python, platform and CPU features; every discovered plugin "
        "(loaded, unavailable, failed, disabled) with its distribution, entry point and status; runtime "
        "library versions; the OPCORE_* settings in effect; and hints.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output (schema 1, docs/cli.md)")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the tracebacks of failed plugins")
    parser.add_argument(
        "--quick", action="store_true", help="do not call the backends' describe() (which may import torch etc.)"
    )
    parser.add_argument(
        "--deep",
        action="store_true",
        help="import torch first, so the torch backends report live values, and import every kernel given as "
        "'module:qualname' to check it exists and takes its op's arguments (~1-2 s more)",
    )
    parser.set_defaults(handler=run_doctor)


def _import_torch() -> None:
    """--deep: the torch backends report live values (threads, devices, TF32) once torch is loaded."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        try:
            import torch  # noqa: F401
        except Exception:  # a broken torch is the cpu/cuda backends' to report
            pass


def run_doctor(args: argparse.Namespace, style: Style) -> int:
    from opcore.cli.doctor import collect, to_json
    from opcore.cli.doctor_text import render_text

    if args.deep:
        _import_torch()
    report = collect(describe=not args.quick, deep=args.deep)
    if args.json:
        print(dumps_json(to_json(report)))
    else:
        print(render_text(report, style, verbose=args.verbose))
    return report.exit_status
