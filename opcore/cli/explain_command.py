"""``opcore explain OP --shapes ... [--dtype] [--attr] [--backend]``: which backend would run the call.

The walk is ``opcore.explain``'s (nothing is re-implemented here); this builds the inputs, applies
``--backend`` / ``--prefer`` / ``--strict`` the way a program would (call argument, context), and
renders the Explanation record as a table or JSON. Exit status 0 when the call would run, 1 when it
cannot (no kernel accepts it).
"""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

from opcore.cli.inputs import CallSpec, add_input_arguments, prepare_call
from opcore.cli.render import Style, dumps_json
from opcore.explanation import Explanation

__all__ = ["EXAMPLES", "add_parser", "explanation_json", "run_explain"]

EXAMPLES = """\
examples:
  opcore explain linear --shapes 32x4096,4096x4096 --dtype bfloat16
  opcore explain linear --shapes 2x8,8x8,8 --backend reference
  opcore explain softmax --shapes 4x16 --attr dim=-1 --json
  opcore explain embedding --shapes 4x8:int64,100x16
  OPCORE_BACKENDS=onnxruntime,cpu opcore explain relu --shapes 1024

precedence (highest first): --backend > --prefer / --strict > opcore.configure > OPCORE_* > priority
exit status: 0 the call would run, 1 it cannot run, 2 bad arguments or input"""


def add_parser(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "explain",
        parents=[parent],
        help="which backend would run an op for given shapes and dtype, and why not the others",
        description="Build example inputs, then show every candidate backend with its status and reason, "
        "and the one chosen (nothing runs).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(parser)
    parser.add_argument("--backend", help="pin the call to this backend, as backend= does")
    parser.add_argument("--prefer", metavar="A,B", help="try these backends first, as opcore.prefer(...) does")
    parser.add_argument("--strict", action="store_true", help="no silent fallback, as opcore.strict() does")
    parser.add_argument("--json", action="store_true", help="print the Explanation record as JSON")
    parser.set_defaults(handler=run_explain)


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in (text or "").split(",") if n.strip())


def policy(args: argparse.Namespace) -> contextlib.ExitStack:
    """The context --prefer and --strict stand for (entered by the caller)."""
    import opcore

    stack = contextlib.ExitStack()
    prefer = _names(getattr(args, "prefer", None))
    if prefer:
        stack.enter_context(opcore.prefer(*prefer))
    if getattr(args, "strict", False):
        stack.enter_context(opcore.strict())
    return stack


def explanation_json(explanation: Explanation, call: CallSpec | None = None) -> dict[str, Any]:
    """The Explanation record as JSON (documented in docs/cli.md)."""
    data: dict[str, Any] = {
        "schema": 1,
        "op": explanation.op,
        "signature": explanation.schema,
        "inputs": {name: text for name, text in explanation.inputs},
        "order": explanation.order,
        "strict": explanation.strict,
        "pin": explanation.pin,
        "candidates": [
            {
                "backend": c.backend,
                "label": c.label,
                "title": c.title,
                "status": c.status.value,
                "reason": c.reason,
                "priority": c.priority,
                "source": c.source,
                "measured": None
                if c.measured is None
                else {"median_us": c.measured.median_us, "iqr_us": c.measured.iqr_us, "rounds": c.measured.rounds},
            }
            for c in explanation.candidates
        ],
        "ranking": explanation.ranking,
        "chosen": explanation.chosen,
        "backend": explanation.backend,
        "error": explanation.error,
    }
    if call is not None:
        data["array_kind"] = call.array_kind
        data["device"] = str(call.device)
    return data


def run_explain(args: argparse.Namespace, style: Style) -> int:
    import opcore

    call, kwargs = prepare_call(args)
    with policy(args):
        explanation = opcore.explain(args.op, backend=args.backend, **kwargs)
    if args.json:
        print(dumps_json(explanation_json(explanation, call)))
    else:
        lines = str(explanation).splitlines()
        # colour only the verdict; the table is the record's own rendering
        for i, line in enumerate(lines):
            if line.startswith("-> "):
                lines[i] = style.good(line) if explanation.chosen else style.bad(line)
        print("\n".join(lines))
        print(style.dim(f"inputs: {call.array_kind} arrays on {call.device}, random values (seed 0)"))
    return 0 if explanation.chosen else 1
