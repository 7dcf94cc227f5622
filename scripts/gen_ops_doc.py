"""Write docs/ops.md, the op reference, from the built-in op contracts.

The text is what ``opcore ops --markdown --builtin`` prints (the same function), so it does not
depend on which backends are installed. tests/test_cli_ops.py fails when docs/ops.md is stale.

    python scripts/gen_ops_doc.py            # rewrite docs/ops.md
    python scripts/gen_ops_doc.py --check    # exit status 1 when docs/ops.md is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from opcore.cli.ops_command import builtin_reference

TARGET = Path(__file__).resolve().parent.parent / "docs" / "ops.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    parser.add_argument("--output", type=Path, default=TARGET, help=f"where to write (default {TARGET})")
    args = parser.parse_args(argv)
    text = builtin_reference()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python scripts/gen_ops_doc.py", file=sys.stderr)
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
