"""``opcore tune OP --shapes ... [--dtype] [--attr] [--rounds N] [--json]``: measure and rank by measurement.

The measuring is ``opcore.tune``'s (nothing is re-implemented here): every kernel that can run the
call is timed on example inputs, the times go into the tuning file (``opcore doctor`` shows where),
and later calls of that signature bucket, in any process with the same fingerprint, run on the
fastest. Exit status 0 when something was measured, 1 when nothing could run the call.
"""

from __future__ import annotations

import argparse
from typing import Any

from opcore.cli.inputs import CallSpec, add_input_arguments, prepare_call
from opcore.cli.render import Style, dumps_json

__all__ = ["EXAMPLES", "add_parser", "run_tune", "tune_json"]

EXAMPLES = """\
examples:
  opcore tune gelu --shapes 256x4096 --attr approximate=tanh
  opcore tune linear --shapes 32x4096,4096x4096 --dtype bfloat16
  opcore tune softmax --shapes 64x1024 --attr dim=-1 --torch --json
  OPCORE_TUNE_FILE=/tmp/tuning.json opcore tune relu --shapes 1024x1024

the file: $OPCORE_TUNE_FILE, else $XDG_CACHE_HOME/opcore/tuning.json (~/.cache/opcore/tuning.json)
exit status: 0 measured, 1 nothing can run the call, 2 bad arguments or input"""


def add_parser(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "tune",
        parents=[parent],
        help="measure every kernel that can run an op for given shapes, and rank by the times from now on",
        description="Build example inputs, time every kernel that accepts them (or declines on speed alone), "
        "save the medians in the tuning file, and print them with the kernel that runs the call from now on.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(parser)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per kernel (default 15)")
    parser.add_argument("--json", action="store_true", help="print the measurement as JSON")
    parser.set_defaults(handler=run_tune)


def tune_json(result: Any, call: CallSpec | None = None) -> dict[str, Any]:
    """The TuneResult as JSON (documented in docs/cli.md)."""
    entry = result.entry
    data: dict[str, Any] = {
        "schema": 1,
        "op": result.op,
        "key": entry.key,
        "example": entry.example,
        "measurements": [
            {"kernel": m.kernel, "median_us": m.median_us, "iqr_us": m.iqr_us, "min_us": m.min_us, "rounds": m.rounds}
            for m in entry.measurements
        ],
        "failed": dict(entry.failed),
        "static": result.static,
        "winner": result.winner,
        "path": result.path,
    }
    if call is not None:
        data["array_kind"] = call.array_kind
        data["device"] = str(call.device)
    return data


def run_tune(args: argparse.Namespace, style: Style) -> int:
    import opcore
    from opcore.errors import NoKernelError

    call, kwargs = prepare_call(args)
    try:
        result = opcore.tune(args.op, rounds=args.rounds, **kwargs)
    except NoKernelError as error:
        print(style.bad(f"-> nothing to measure: {str(error).splitlines()[0]}"))
        return 1
    if args.json:
        print(dumps_json(tune_json(result, call)))
        return 0
    lines = str(result).splitlines()
    lines[-1] = style.good(lines[-1])
    print("\n".join(lines))
    print(style.dim(f"inputs: {call.array_kind} arrays on {call.device}, random values (seed 0)"))
    return 0
