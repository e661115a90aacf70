"""`ledgermem erase --data DIR --session S --reason R [--item ID...]`: GDPR erasure, offline.

The same erase as the service's `POST /v1/sessions/{session}/erase`, run by `Memory` on the data
directory: an `items.erased` or `session.erased` record with a content-free restatement of every
record it removes, the redaction of those payloads (docs/format.md section 9, the checkpoint
re-signed with the directory's key), and the snapshots purged. Without `--item` every payload the
session ever wrote goes. It takes the writer lock, so it refuses while the service runs.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from eventstore.errors import LockHeld
from eventstore.wording import count
from sections.runtime.memory import Memory

from .cli_redact import open_data_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, metavar="DIR", help="the data directory")
    parser.add_argument("--session", required=True, metavar="S", help="the session to erase")
    parser.add_argument("--tenant", default="default", metavar="T", help="its tenant (default)")
    parser.add_argument(
        "--item",
        action="append",
        metavar="ID",
        help="erase only these items (repeatable); items added in the same record go too",
    )
    parser.add_argument("--reason", required=True, help="why (kept in the log: no personal data)")


def run(args: argparse.Namespace) -> int:
    data = open_data_dir(args.data)
    memory = _open_memory(data.root)
    try:
        session = memory.session(args.session, tenant=args.tenant, create=False)
        if args.item:
            erased = session.erase(args.item, reason=args.reason)
            what = f"items {', '.join(erased)} of session {args.session!r}"
        else:
            payload = session.erase_all(reason=args.reason).payload
            assert isinstance(payload, dict)  # a session.erased record's payload is an object
            n = len(payload["records"])
            what = f"session {args.session!r} (the payloads of {count(n, 'record')})"
    finally:
        memory.close()  # its snapshot is of the state after the erase
    shutil.rmtree(data.root / "index", ignore_errors=True)  # offsets of the old files
    print(f"erased {what} of tenant {args.tenant!r}")
    return 0


def _open_memory(root: Path) -> Memory:
    try:
        return Memory.open(root)
    except LockHeld as exc:
        raise LockHeld(f"{exc}; a running service erases through its API instead") from None
