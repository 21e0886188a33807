"""The ``reasonstate`` command: ``demo [--live]`` and ``prr --template FILE [--tokenizer NAME] [--json]``."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]

USAGE = "usage: reasonstate {demo [--live] | prr --template FILE [--tokenizer NAME] [--json]}"


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "demo":
        from reasonstate.demo import main as demo

        return demo(rest)
    if command == "prr":
        from reasonstate.tokens.matrix import main as prr

        return prr(rest)
    print(USAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
