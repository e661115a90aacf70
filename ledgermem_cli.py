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
    "serve": (
        "streams.server.cli_serve",
        "run the HTTP service (REST, SSE, WebSocket, JSONL, long-poll)",
    ),
    "verify": (
        "eventstore.cli_verify",
        "verify a log directory offline (docs/format.md section 10)",
    ),
    "vkey": ("eventstore.cli_keys", "print the log's verifier key"),
    "demo": ("eventstore.cli_demo", "write, read back and verify a small log in a data directory"),
    "replay": (
        "replay.cli_replay",
        "write a log's records as JSONL (the file lines), filtered; --follow tails",
    ),
    "state": (
        "replay.cli_state",
        "the memory projection at a seq or time, as JSON (--context: as assembled)",
    ),
    "diff": ("replay.cli_diff", "what changed in memory between two points, with the reasons"),
    "export": (
        "replay.cli_export",
        "export a session as a self-verifying bundle with inclusion proofs",
    ),
    "verify-bundle": (
        "replay.cli_verify_bundle",
        "verify an exported bundle alone, without the log",
    ),
    "import": ("replay.cli_import", "import a bundle into another data directory as a new session"),
    "proof": ("replay.cli_proof", "print a C2SP tlog-proof of a record's inclusion"),
    "checkpoint": ("replay.cli_checkpoint", "print the newest signed checkpoint"),
    "tail": (
        "replay.cli_tail",
        "follow a running server's JSONL stream, resuming after disconnects",
    ),
    "redact": ("replay.cli_redact", "erase payloads by seq, offline (docs/format.md section 9)"),
    "erase": ("replay.cli_erase", "erase a session (or items) from a data directory, offline"),
    "init-store": (
        "eventstore.cli_init_store",
        "create a shared store (PostgreSQL or Redis) of P partitions (idempotent)",
    ),
    "export-log": (
        "eventstore.cli_export_log",
        "write a store partition's rows as a log directory for `verify`, incrementally",
    ),
    "backup": (
        "replay.cli_backup",
        "a consistent copy of a data directory, while the service runs",
    ),
    "mcp": (
        "streams.mcp.cli_mcp",
        "serve the memory as MCP tools over stdio or HTTP (needs the `mcp` extra)",
    ),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ledgermem")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser(selected: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ledgermem", description="Memory for AI agents on a signed, hash-chained log."
    )
    parser.add_argument("--version", action="version", version=f"ledgermem {_version()}")
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
    from eventstore.errors import LedgerError
    from eventstore.layout import resolve_log_dir

    if getattr(args, "logdir", None) is not None:
        # Every offline command's LOGDIR also takes a data directory, resolved here only.
        args.logdir = str(resolve_log_dir(args.logdir))

    try:
        return int(module.run(args) or 0)
    except LedgerError as exc:  # every command's refusals: one line, non-zero exit
        print(f"ledgermem {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
