"""The ``reasonstate`` command.

::

    reasonstate --version
    reasonstate demo [DEMO OPTIONS]           # the scripted agent job (its own --help)
    reasonstate prr --template NAME|FILE [--tokenizer NAME] [--json]
    reasonstate emulate VENDOR [--port N] [--host H] [--script FILE] [--dialect D] [--tokenizer NAME]
        [--secret TEXT] [--api-key KEY]
    reasonstate inspect FILE|URL#SESSION_ID [--events N]    # the four layers of a snapshot, or a JSONL trace
    reasonstate report FILE|URL#SESSION_ID [--prices FILE] [--model NAME]   # cost and cache per turn
    reasonstate report FILE|URL#SESSION_ID --html OUT    # the same as one HTML page with SVG charts
    reasonstate diff A.json B.json [--api API]   # where and why request body B stops extending A
    reasonstate store migrate URL            # create or upgrade a session store's schema; print its version
    reasonstate store list URL [--json]      # the stored sessions: id, version, last activity, expiry

``URL`` is a session store's (:func:`reasonstate.store.open_store`: ``sqlite:///sessions.db``,
``sqlite:////abs/path.db``, ``postgresql://...[?schema=S]``, ``redis://...[?prefix=P]``); ``inspect`` and
``report`` read the session after the first ``#`` as its snapshot (``store.export``). Only ``store
migrate`` writes to a store: the other commands never create a file, a table or a key in one
(``report --html OUT`` writes OUT only).

Exit status: what the subcommand returns; 2 for a usage error (unknown command or flag), 0 for ``--help``
and ``--version``. Subcommands import their modules only when run, so ``--help`` is fast and needs no
optional dependency.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from reasonstate.adapters import APIS

if TYPE_CHECKING:
    from reasonstate.recordings import Recording
    from reasonstate.store import SessionInfo, Store

__all__ = ["build_parser", "main", "version"]

_VENDORS = ("anthropic", "responses", "chat", "gemini", "completions")
_DIALECTS = ("openai", "deepseek", "vllm", "sglang", "openrouter")


def version() -> str:
    """The installed distribution's version (``reasonstate.__version__``)."""
    from reasonstate import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``reasonstate``. ``demo`` and ``prr`` appear in its help only: :func:`main`
    hands everything after their name to ``reasonstate.demo.main`` / ``reasonstate.tokens.matrix.main``,
    which parse their own flags."""
    parser = argparse.ArgumentParser(
        prog="reasonstate",
        description="Reasoning-state continuity for multi-turn agents: demo, PRR drift matrix, emulators, "
        "recordings and session stores.",
    )
    parser.add_argument("--version", action="version", version=f"reasonstate {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    commands.add_parser(
        "demo",
        help="run the scripted agent job on the local emulators (reasonstate demo --help for its options)",
        add_help=False,
    )

    commands.add_parser(
        "prr",
        help="PRR drift matrix of a chat template (string and token level, and the bridge)",
        add_help=False,
    )

    emulate = commands.add_parser(
        "emulate",
        help="run one strict vendor API emulator as a standalone server until interrupted",
        description=(
            "Serve one emulator on HOST:PORT until SIGINT/SIGTERM (exit 0). Prints the base URL and the "
            "environment variables that point the vendor SDK at it. Without --script a default responder "
            "answers (see reasonstate.testing.standalone)."
        ),
    )
    emulate.set_defaults(usage=emulate)
    emulate.add_argument("vendor", choices=_VENDORS, help="which API to emulate")
    emulate.add_argument("--port", type=int, default=0, help="port to listen on (default 0: a free port)")
    emulate.add_argument("--host", default="127.0.0.1", help="IPv4 address to listen on (default 127.0.0.1)")
    emulate.add_argument("--script", default=None, metavar="FILE", help="a JSON script of model actions")
    emulate.add_argument(
        "--dialect", choices=_DIALECTS, default="openai", help="chat only: the dialect (default openai)"
    )
    emulate.add_argument(
        "--tokenizer",
        default=None,
        help="completions only: qwen3.6, qwen3.5 or deepseek-v4, to accept and serve text",
    )
    emulate.add_argument(
        "--secret",
        default=None,
        help="signing secret (default: a fixed, documented one: a restarted one verifies what it signed)",
    )
    emulate.add_argument(
        "--api-key", default=None, help="the one API key to accept (default: test-key and emulator-key)"
    )
    inspect = commands.add_parser(
        "inspect",
        help="print the four layers of a session snapshot (or what a JSONL trace holds)",
        description="Print the trace, history, continuation and execution layers of FILE: a snapshot "
        "(session.snapshot().model_dump_json()), a JSONL trace (JSONLExporter) or a session in a store, "
        "URL#SESSION_ID (sqlite:///sessions.db#conv-42, postgresql://...#ID, redis://...#ID). Opaque "
        "payloads are shown as kind, size and digest only.",
    )
    inspect.set_defaults(usage=inspect)
    inspect.add_argument(
        "file", help="a snapshot JSON file, a JSONL trace, or a stored session URL#SESSION_ID"
    )
    inspect.add_argument("--events", type=int, default=12, help="how many of the newest events to show")
    report = commands.add_parser(
        "report",
        help="print cost and cache per turn of a session snapshot or JSONL trace",
        description="Tokens, cache reads and writes, and USD per turn of FILE (a snapshot, a JSONL trace or "
        "a stored session URL#SESSION_ID), at the packaged price table or --prices FILE (the same JSON "
        "shape: reasonstate/cache/pricing.json).",
    )
    report.set_defaults(usage=report)
    report.add_argument(
        "file", help="a snapshot JSON file, a JSONL trace, or a stored session URL#SESSION_ID"
    )
    report.add_argument("--prices", default=None, metavar="FILE", help="a price table JSON file")
    report.add_argument(
        "--model", default=None, help="trace only: the model of requests that do not name one"
    )
    report.add_argument(
        "--html",
        default=None,
        metavar="OUT",
        help="write one self-contained HTML page (inline SVG charts: tokens per request, cache breaks, "
        "cost per turn) to OUT instead of printing the table",
    )
    store = commands.add_parser(
        "store",
        help="a session store: create or upgrade its schema, list its sessions",
        description="Work on a session store named by URL: sqlite:///relative.db, sqlite:////abs/path.db, "
        "postgresql://user@host:5432/db[?schema=NAME], redis://host:6379/0[?prefix=P] (rediss:// for TLS).",
    )
    store.set_defaults(usage=store)
    store_commands = store.add_subparsers(dest="store_command", metavar="STORE_COMMAND", required=True)
    migrate = store_commands.add_parser(
        "migrate",
        help="create the store's schema or bring it to this reasonstate's version; print the version",
        description="Create the tables (or keys) of a session store, or upgrade an older schema in place, "
        "and print the schema version. Safe to run again, and from several processes at once.",
    )
    migrate.set_defaults(usage=migrate)
    migrate.add_argument("url", help="the store's URL")
    listing = store_commands.add_parser(
        "list",
        help="list the stored sessions with their version and last activity",
        description="The stored sessions, most recently active first: id, version (entries written), last "
        "activity and expiry (UTC). Expired sessions are not shown.",
    )
    listing.set_defaults(usage=listing)
    listing.add_argument("url", help="the store's URL")
    listing.add_argument("--json", action="store_true", help="print a JSON array instead of a table")

    diff = commands.add_parser(
        "diff",
        help="explain where and why one recorded request body stops extending another",
        description="Compare two request bodies as the vendor's prefix cache reads them: the first "
        "differing prefix unit, the JSON path inside it and the cause (system_changed, tools_reordered, "
        "reasoning_dropped, timestamp_in_prefix, ...: docs/howto/guard.md).",
    )
    diff.set_defaults(usage=diff)
    diff.add_argument("first", help="the earlier request body (JSON)")
    diff.add_argument("second", help="the later request body (JSON)")
    diff.add_argument(
        "--api",
        choices=APIS,
        default=None,
        help="the vendor API (default: told from the bodies' shape)",
    )
    diff.add_argument("--model", default=None, help="generate_content only: the model (it is in the URL)")
    return parser


def _diff(args: argparse.Namespace) -> int:
    from reasonstate.recordings import RecordingError, diff_text

    try:
        print(diff_text(args.first, args.second, api=args.api, model=args.model))
    except RecordingError as exc:
        print(f"reasonstate diff: {exc}", file=sys.stderr)
        return 1
    return 0


#: a store URL's scheme, as ``inspect`` and ``report`` tell a URL from a file name
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _shown(url: str) -> str:
    """``url`` without its password (in the address, or a ``password=`` query parameter), for what the
    command prints."""
    head, hash_, fragment = url.partition("#")
    parts = urlsplit(head)
    try:
        password = parts.password
    except ValueError:
        return url
    if password is not None:
        host = parts.netloc.rsplit("@", 1)[1]
        parts = parts._replace(netloc=f"{parts.username or ''}:***@{host}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    in_query = any(k == "password" for k, _ in query)
    if password is None and not in_query:
        return url  # as given (urlunsplit would rewrite sqlite:////abs/path)
    if in_query:
        parts = parts._replace(
            query=urlencode([(k, "***" if k == "password" else v) for k, v in query], safe="*:")
        )
    return urlunsplit(parts) + hash_ + fragment


def _open(url: str, command: str) -> Store:
    """The store at ``url`` (``store migrate`` only: created or upgraded; otherwise opened as it is, and a
    SQLite file that does not exist is an error rather than a new empty file)."""
    from reasonstate.errors import StoreError
    from reasonstate.store import open_store, parse_store_url

    parsed = parse_store_url(url)
    if command == "migrate":
        return open_store(url)
    if parsed.scheme == "sqlite" and not parsed.memory and not Path(parsed.target).is_file():
        raise StoreError(
            f"no SQLite store at {parsed.target!r} (`reasonstate store migrate {url}` creates one)"
        )
    return open_store(url, migrate=False)


def _store(args: argparse.Namespace) -> int:
    from reasonstate.errors import ReasonStateError

    command = args.store_command
    try:
        with _open(args.url, command) as store:
            if command == "migrate":
                print(f"{_shown(args.url)}: schema version {store.migrate()}")
                return 0
            sessions = store.sessions()
    except ReasonStateError as exc:
        print(f"reasonstate store {command}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([attrs.asdict(s) for s in sessions], indent=2))
        return 0
    print(_sessions_table(_shown(args.url), sessions))
    return 0


def _utc(at: float | None) -> str:
    if at is None:
        return "never"
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _sessions_table(where: str, sessions: Sequence[SessionInfo]) -> str:
    if not sessions:
        return f"{where}: no sessions"
    rows = [("SESSION", "VERSION", "LAST ACTIVITY (UTC)", "CREATED (UTC)", "EXPIRES (UTC)")]
    rows += [
        (s.session_id, str(s.version), _utc(s.updated), _utc(s.created), _utc(s.expires)) for s in sessions
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"{where}: {len(sessions)} session{'s' if len(sessions) != 1 else ''}"]
    for r in rows:
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


def _recording(target: str) -> Recording:
    """The recording ``inspect`` / ``report`` read: a file, or ``URL#SESSION_ID``'s exported snapshot."""
    from reasonstate.recordings import RecordingError, load, of_snapshot

    if not _URL.match(target):
        return load(target)
    url, _, session_id = target.partition("#")
    if not session_id:
        raise RecordingError(
            f"name the session: {_shown(url)}#SESSION_ID (`reasonstate store list {_shown(url)}` lists them)"
        )
    with _open(url, "read") as store:
        snapshot = store.export(session_id)
    return of_snapshot(snapshot, f"{_shown(url)}#{session_id}")


def _view(args: argparse.Namespace) -> int:
    from reasonstate.cache.pricing import Pricing
    from reasonstate.errors import ReasonStateError
    from reasonstate.recordings import check_model_flag, inspect_text, report_html, report_text

    try:
        recording = _recording(args.file)
        if args.command == "inspect":
            print(inspect_text(recording, events=max(0, args.events)))
        else:
            pricing = Pricing.load(args.prices) if args.prices else None
            if args.model is not None:
                check_model_flag(recording, args.model)
            if args.html is None:
                print(report_text(recording, pricing, model=args.model))
            else:
                page = report_html(recording, pricing, model=args.model)
                try:
                    Path(args.html).write_text(page, encoding="utf-8")
                except OSError as exc:
                    print(f"reasonstate report: cannot write {args.html}: {exc}", file=sys.stderr)
                    return 1
                print(f"wrote {args.html} ({len(page.encode()):,} bytes)")
    except ReasonStateError as exc:  # RecordingError, InvalidOption, and a store's StoreError, SnapshotError
        print(f"reasonstate {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


def _emulate(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.usage
    if args.dialect != "openai" and args.vendor != "chat":
        parser.error("--dialect applies to 'emulate chat' only")
    if args.tokenizer is not None and args.vendor != "completions":
        parser.error("--tokenizer applies to 'emulate completions' only")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port must be between 0 and 65535, not {args.port}")
    from reasonstate.testing.standalone import ScriptFileError, serve

    try:
        return serve(
            args.vendor,
            port=args.port,
            host=args.host,
            script=args.script,
            dialect=args.dialect,
            tokenizer=args.tokenizer,
            secret=args.secret,
            api_key=args.api_key,
        )
    except ScriptFileError as exc:
        print(f"reasonstate emulate: bad script: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # port in use, address not available, unknown tokenizer
        print(f"reasonstate emulate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _code(command: Callable[[list[str]], int], argv: list[str]) -> int:
    """``command(argv)``, with an argparse ``SystemExit`` (its --help, a usage error) as the status."""
    try:
        return command(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)


#: the extra a subcommand needs when a module the vendor SDKs bring is missing (the demo drives all three)
_SDKS = frozenset({"anthropic", "openai", "google", "httpx2"})
_NEEDS = {"demo": "anthropic,openai,gemini"}


def _missing(command: str, exc: ModuleNotFoundError) -> int:
    """One line naming the ``pip install`` to run for a missing optional module (exit 1); a missing module
    no extra provides is a bug of ours and keeps its traceback."""
    from reasonstate._extras import hint

    top = (exc.name or "").split(".")[0]
    line = hint(exc, _NEEDS.get(command) if top in _SDKS else None)
    if line is None:
        raise exc
    print(f"reasonstate {command}: {line}", file=sys.stderr)
    return 1


def _run(args: argparse.Namespace) -> int:
    if args.command in ("inspect", "report"):
        return _view(args)
    if args.command == "diff":
        return _diff(args)
    if args.command == "store":
        return _store(args)
    return _emulate(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``reasonstate`` with ``argv`` (default ``sys.argv[1:]``) and return the exit status. A user's
    mistake never ends in a traceback: a usage error prints the subcommand's own usage (exit 2), a missing
    optional dependency the one ``pip install`` that provides it (exit 1)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    command = args_in[0] if args_in else ""
    try:
        # demo and prr parse their own flags (their --help included): everything after the name is theirs
        if command == "demo":
            from reasonstate.demo import main as demo

            return _code(demo, args_in[1:])
        if command == "prr":
            from reasonstate.tokens.matrix import main as prr

            return _code(prr, args_in[1:])
        parser = build_parser()
        try:
            args, extra = parser.parse_known_args(args_in)
            if extra:  # argparse reports these on the top-level parser: say it with the subcommand's usage
                usage: argparse.ArgumentParser = getattr(args, "usage", parser)
                usage.error(f"unrecognized arguments: {' '.join(extra)}")
        except SystemExit as exc:  # --help, --version (0) and usage errors (2) end here
            return exc.code if isinstance(exc.code, int) else 2
        try:
            return _run(args)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 2
    except ModuleNotFoundError as exc:
        return _missing(command, exc)


if __name__ == "__main__":
    raise SystemExit(main())
