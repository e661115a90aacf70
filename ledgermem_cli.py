"""The `ledgermem` command: a dispatcher that imports each subcommand only when it runs.

Offline commands (verify, replay, ...) must start fast and must not pull in the web stack, so
this table names modules as strings. Each module provides `add_arguments(parser)` and
`run(args) -> int`. This file sits above the four packages and imports none of them eagerly.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("streams.cli_serve", "run the HTTP service (REST, SSE, WebSocket, JSONL, long-poll)"),
    "verify": ("eventstore.cli_verify", "verify a log directory offline (log-format.md §10)"),
    "vkey": ("eventstore.cli_keys", "print the log's verifier key"),
    "demo": ("eventstore.cli_demo", "write, read back and verify a small log in a data directory"),
}


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledgermem", description="Memory for AI agents on a signed, hash-chained log."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == selected:
            importlib.import_module(module_name).add_arguments(command_parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    selected = next((a for a in argv if not a.startswith("-")), None)
    if selected not in COMMANDS:
        selected = None
    args = build_parser(selected).parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
