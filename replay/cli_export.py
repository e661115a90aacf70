"""`ledgermem export LOGDIR --session S [--tenant T] [--force] OUT`: a session as a self-verifying bundle.

The bundle holds the current incarnation of the session (everything from its last
`session.created` on), each record's exact line, an inclusion proof for each against the log's
newest signed checkpoint, and that checkpoint. Proofs need a signed note, so a session whose
last record the checkpoint does not cover yet is refused, unless `--covered-only` exports the
records it does cover. The bundle is checked before it is written, and written atomically.
"""

from __future__ import annotations

import argparse
import os
import sys

from eventstore.atomic import write_atomically
from eventstore.checkpoint import CheckpointError, parse_checkpoint
from eventstore.errors import CorruptLog, InvalidInput
from eventstore.identifiers import CONTROL_TENANT, check_identifier
from eventstore.wording import count

from .bundle import (
    build_bundle,
    header_key,
    newest_checkpoint,
    session_lines,
    verify_bundle,
)
from .options import open_reader, progress


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("logdir", metavar="LOGDIR", help="the directory holding seg-*.jsonl")
    parser.add_argument("--session", required=True, metavar="S", help="the session to export")
    parser.add_argument(
        "--tenant",
        metavar="T",
        help="the session's tenant (default: the only tenant holding a session of that id)",
    )
    parser.add_argument("out", metavar="OUT", help="the bundle file to write, or - for stdout")
    parser.add_argument(
        "--covered-only",
        action="store_true",
        help="when the newest checkpoint does not cover the session's last records yet, export "
        "the records it covers instead of refusing",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace OUT when it exists (else: refused)"
    )


def run(args: argparse.Namespace) -> int:
    session = check_identifier("session", args.session)
    if args.out != "-" and os.path.lexists(args.out) and not args.force:
        raise InvalidInput(f"{args.out} exists: pass --force to replace it, or choose another OUT")
    if args.tenant is not None and check_identifier("tenant", args.tenant) == CONTROL_TENANT:
        raise InvalidInput("tenant '_log' holds the log's control records, not sessions")
    reader = open_reader(args.logdir)
    key = header_key(reader)
    text, source = newest_checkpoint(reader)
    try:
        checkpoint = parse_checkpoint(text, key)
    except CheckpointError as exc:
        raise CorruptLog(
            f"the log's {source} is not a checkpoint signed by the key segment 0 names ({exc}): "
            f"run ledgermem verify {args.logdir}"
        ) from None
    with progress(reader.head() + 1, "export: scanning the log") as advance:
        found = session_lines(reader, session, args.tenant, advance)
    tenant = _pick_tenant(found, session, args.tenant, args.logdir)
    lines = found[tenant]
    last = lines[-1][0]
    if last >= checkpoint.size:
        if not args.covered_only:
            raise InvalidInput(
                f"session {tenant}/{session} ends at seq {last}, but the newest checkpoint "
                f"({source}) covers seqs below {checkpoint.size} only: wait for the writer's "
                "next checkpoint (within a second while it runs), or pass --covered-only"
            )
        lines = [(seq, line) for seq, line in lines if seq < checkpoint.size]
        if not lines:
            raise InvalidInput(
                f"no record of session {tenant}/{session} is covered by the newest checkpoint "
                f"(size {checkpoint.size}): wait for the writer's next checkpoint"
            )
        print(
            f"ledgermem export: --covered-only: exporting up to seq {lines[-1][0]}; the session "
            f"goes on to seq {last}, beyond the checkpoint of size {checkpoint.size}",
            file=sys.stderr,
        )
    bundle = build_bundle(reader, tenant, session, lines, checkpoint)
    failure = verify_bundle(bundle, key, vkey_source="bundle").error
    if failure is not None:
        raise CorruptLog(
            f"the bundle built from {args.logdir} does not verify (seq {failure.seq}: "
            f"[{failure.check}] {failure.message}): nothing was written; "
            f"run ledgermem verify {args.logdir}"
        )
    data = bundle.to_bytes()
    if args.out == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        write_atomically(args.out, data)
    print(
        f"ledgermem export: {count(len(bundle.records), 'record')} of {tenant}/{session} "
        f"(seq {lines[0][0]}..{lines[-1][0]}) with inclusion proofs against the checkpoint of "
        f"size {checkpoint.size} ({source}) -> {args.out}",
        file=sys.stderr,
    )
    return 0


def _pick_tenant(found: dict[str, list], session: str, tenant: str | None, log_dir: str) -> str:
    if tenant is not None:
        if tenant not in found:
            raise InvalidInput(f"no session {session!r} of tenant {tenant!r} in {log_dir}")
        return tenant
    if not found:
        raise InvalidInput(f"no session {session!r} in {log_dir}")
    if len(found) > 1:
        raise InvalidInput(
            f"session {session!r} exists for tenants {', '.join(sorted(found))}: pass --tenant"
        )
    return next(iter(found))
