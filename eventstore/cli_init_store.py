"""`ledgermem init-store URL --partitions P --data DIR`: create a shared store (idempotent).

URL names the engine: postgresql://... (eventstore/pg/) or redis://... (eventstore/redis/).
Creates the tables (or Redis keys), records the origin and each partition's vkey, and creates in DIR what the
replicas of the store share by copying `DIR/keys/`: the signing key (if DIR has none) and
`replica.secret`, the secret replicas sign forwarded requests with (docs/scale-out.md). Running
it again changes nothing; with another P it is refused. Every failure is one line and exit 2.
"""

from __future__ import annotations

import argparse
import secrets
import sys

from .atomic import create_atomically
from .cli_keys import DEFAULT_DATA
from .errors import LedgerError
from .layout import DataDir
from .shared import StoreError, StoreInfo, one_line
from .stores import open_engine
from .wording import count

REPLICA_SECRET = "replica.secret"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="URL", help="the store: postgresql://... or redis://...")
    parser.add_argument(
        "--partitions", type=int, required=True, metavar="P", help="number of partitions"
    )
    parser.add_argument(
        "--data",
        default=DEFAULT_DATA,
        help="data directory holding (or receiving) the signing key (default %(default)s)",
    )
    parser.add_argument(
        "--seg-bits", type=int, default=16, metavar="N", help="2**N records per segment"
    )
    parser.add_argument("--origin", metavar="O", help="the store's origin (new stores only)")


def run(args: argparse.Namespace) -> int:
    try:
        info = _init(args)
    except LedgerError as exc:
        print(f"ledgermem init-store: {exc}", file=sys.stderr)
        return 2
    print(f"store {info.origin}: {count(info.partitions, 'partition')}, seg_bits {info.seg_bits}")
    for n, vkey in enumerate(info.vkeys):
        print(f"p{n} {vkey}")
    return 0


def _init(args: argparse.Namespace) -> StoreInfo:
    engine = open_engine(args.url)
    try:
        info = engine.init_store(
            args.partitions, args.data, seg_bits=args.seg_bits, origin=args.origin
        )
        ensure_replica_secret(DataDir(args.data))
    except OSError as exc:
        raise StoreError(f"{args.data}: {one_line(exc)}") from None
    return info


def ensure_replica_secret(data: DataDir) -> bool:
    """Create `keys/replica.secret` (64 hex digits, mode 0600, no newline) unless it exists;
    True when it was created. Atomic: two init-stores at once leave one secret."""
    path = data.keys / REPLICA_SECRET
    if path.exists():
        return False
    try:
        create_atomically(path, secrets.token_hex(32).encode())
    except FileExistsError:
        return False
    return True
