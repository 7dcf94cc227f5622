"""``opcore plan PATH``: show a plan that ``Plan.save`` wrote (nothing is loaded or compiled).

>>> main(["plan", "llama.plan"])      # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from opcore.cli.render import Style

__all__ = ["add_parser", "run_plan"]

EXAMPLES = """\
examples:
  opcore plan llama.plan            the summary, the partitions, each node's backend and the rejected ones
  opcore plan llama.plan --json     the same record as JSON (plan.explain(format="json"), plus the fingerprint)"""


def add_parser(subparsers: Any, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "plan",
        parents=[parent],
        help="show a saved opcore.graph plan (a folder written by Plan.save)",
        description="Show a saved plan: what runs where, the partitions, the fingerprint it was saved with.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("path", help="the folder Plan.save wrote")
    parser.add_argument("--json", action="store_true", help="the record as JSON")
    parser.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace, style: Style) -> int:
    from opcore.graph.explain import describe, render
    from opcore.graph.files import SavedPlan

    saved = SavedPlan(args.path)
    if args.json:
        record = describe(saved)
        record["fingerprint"] = saved.fingerprint
        record["schema_version"] = saved.document["schema_version"]
        print(json.dumps(record, indent=2))
        return 0
    fingerprint = saved.fingerprint
    libraries = ", ".join(f"{k} {v}" for k, v in fingerprint.get("libraries", {}).items())
    print(style.head(f"{args.path}") + f": opcore plan, schema {saved.document['schema_version']}, saved "
          f"{saved.document.get('saved_at', '?')} with opcore {fingerprint.get('opcore')} ({libraries})")  # fmt: skip
    if fingerprint.get("cpu_isa"):
        print(f"  saved on: {fingerprint.get('machine')} {fingerprint['cpu_isa']}")
    print(render(saved))
    return 0
