"""`ledgermem proof LOGDIR --seq N [--size M]`: a C2SP tlog-proof that record N is in the log.

The proof is `c2sp.org/tlog-proof@v1`, `index N`, the RFC 9162 inclusion proof (one base64
hash per line), an empty line, then the signed checkpoint verbatim. A proof must carry a signed
note, so size M must be that of a checkpoint the log holds: the `checkpoint` file (the default)
or one embedded in a `segment.open` (multiples of the segment size).

`ledgermem proof --verify FILE --record LINE --vkey V` checks such a proof offline against the
record's line (as `ledgermem replay` prints it): exit 0 VALID, 1 FAIL, 2 bad input.

`ledgermem proof LOGDIR --consistency OLD NEW` proves that the tree of OLD records is a prefix of
the signed tree of NEW (`head`: the newest checkpoint), as the body of a C2SP tlog-witness
add-checkpoint request: `old OLD`, the hashes, an empty line, the checkpoint of size NEW.
`ledgermem proof --verify-consistency FILE --old-checkpoint FILE --vkey V` checks one offline
against the older checkpoint its holder kept.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eventstore.checkpoint import Checkpoint, CheckpointError, parse_checkpoint
from eventstore.errors import CorruptLog, InvalidInput, InvalidProof
from eventstore.linecheck import LineError
from eventstore.log_proofs import SubtreeRoots, checkpoint_of_size, header_key, newest_checkpoint
from eventstore.merkle import (
    consistency_proof,
    inclusion_proof,
    verify_consistency,
    verify_inclusion,
)
from eventstore.reader import LogReader
from eventstore.tlog_proof import (
    format_consistency,
    format_tlog_proof,
    verify_consistency_text,
    verify_tlog_proof,
)

from .cli_verify_bundle import read_vkey
from .options import open_reader


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "logdir", nargs="?", metavar="LOGDIR", help="the directory holding seg-*.jsonl"
    )
    parser.add_argument("--seq", type=int, metavar="N", help="the record to prove")
    parser.add_argument(
        "--size",
        type=int,
        metavar="M",
        help="prove against the signed checkpoint of M records (default: the newest)",
    )
    parser.add_argument(
        "--verify", metavar="FILE", help="check the tlog-proof in FILE offline instead"
    )
    parser.add_argument(
        "--record", metavar="FILE", help="with --verify: the record's line (- for stdin)"
    )
    parser.add_argument(
        "--vkey",
        metavar="VKEY",
        help="with --verify/--verify-consistency: the log's vkey (or @FILE)",
    )
    parser.add_argument(
        "--consistency",
        nargs=2,
        metavar=("OLD", "NEW"),
        help="prove the tree of OLD records a prefix of the signed tree of NEW (or head)",
    )
    parser.add_argument(
        "--verify-consistency", metavar="FILE", help="check a consistency proof offline instead"
    )
    parser.add_argument(
        "--old-checkpoint",
        metavar="FILE",
        help="with --verify-consistency: the older signed checkpoint you hold",
    )


def run(args: argparse.Namespace) -> int:
    if args.verify is not None:
        return _verify(args)
    if args.verify_consistency is not None:
        return _verify_consistency(args)
    if args.logdir is not None and args.consistency is not None:
        return _consistency(args)
    if args.logdir is None or args.seq is None:
        raise InvalidInput(
            "give LOGDIR and --seq N (or --consistency OLD NEW), or --verify FILE --record FILE "
            "--vkey V, or --verify-consistency FILE --old-checkpoint FILE --vkey V"
        )
    reader = open_reader(args.logdir)
    checkpoint, source = _signed(reader, args.size, args.logdir)
    seq = args.seq
    if not 0 <= seq < checkpoint.size:
        raise InvalidInput(
            f"seq {seq} is not covered by the checkpoint of size {checkpoint.size} ({source}): "
            "a proof needs a signed checkpoint that covers the record"
        )
    hashes = inclusion_proof(seq, checkpoint.size, SubtreeRoots(reader))
    leaf = reader.leaf_hashes(seq, seq + 1)[0]
    try:  # never print a proof that does not verify
        verify_inclusion(seq, checkpoint.size, leaf, hashes, checkpoint.root)
    except InvalidProof as exc:
        raise CorruptLog(
            f"the files do not match the {source} ({exc}): run ledgermem verify {args.logdir}"
        ) from None
    sys.stdout.write(format_tlog_proof(seq, hashes, checkpoint.text))
    return 0


def _signed(reader: LogReader, size: int | None, logdir: str) -> tuple[Checkpoint, str]:
    """The newest signed checkpoint, or the one of `size`, checked with the log's own key, and
    where it came from."""
    key = header_key(reader)
    if size is None:
        text, source = newest_checkpoint(reader)
    else:
        text, source = checkpoint_of_size(reader, size)
    try:
        return parse_checkpoint(text, key), source
    except CheckpointError as exc:
        raise CorruptLog(
            f"the log's {source} is not signed by the key segment 0 names ({exc}): "
            f"run ledgermem verify {logdir}"
        ) from None


def _size(text: str, what: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise InvalidInput(f"{what} {text!r} is not a record count (a non-negative integer)")
    return int(text)


def _consistency(args: argparse.Namespace) -> int:
    old_text, new_text = args.consistency
    old = _size(old_text, "OLD")
    new = None if new_text == "head" else _size(new_text, "NEW")
    reader = open_reader(args.logdir)
    checkpoint, _ = _signed(reader, new, args.logdir)
    if old > checkpoint.size:
        raise InvalidInput(f"OLD {old} is larger than the signed tree of {checkpoint.size} records")
    roots = SubtreeRoots(reader)
    hashes = consistency_proof(old, checkpoint.size, roots)
    try:  # never print a proof that does not verify
        verify_consistency(
            old, checkpoint.size, roots(0, old) if old else b"", checkpoint.root, hashes
        )
    except InvalidProof as exc:
        raise CorruptLog(
            f"the files do not match the checkpoint ({exc}): run ledgermem verify {args.logdir}"
        ) from None
    sys.stdout.write(format_consistency(old, hashes, checkpoint.text))
    return 0


def _verify_consistency(args: argparse.Namespace) -> int:
    if args.old_checkpoint is None or args.vkey is None:
        raise InvalidInput(
            "--verify-consistency needs --old-checkpoint FILE (the checkpoint you hold) and --vkey V"
        )
    vkey = read_vkey(args.vkey)
    text = _read(args.verify_consistency, "proof").decode("utf-8", "replace")
    old_text = _read(args.old_checkpoint, "old checkpoint").decode("utf-8", "replace")
    try:
        old, new = verify_consistency_text(text, old_text, vkey)
    except (CheckpointError, InvalidProof) as exc:
        print(f"FAIL  [proof.consistency] {exc}")
        return 1
    print(
        f"VALID  the tree of {new.size} records of {new.origin} extends the tree of {old.size} "
        "records you hold; its key signed both"
    )
    return 0


def _verify(args: argparse.Namespace) -> int:
    if args.record is None or args.vkey is None:
        raise InvalidInput("--verify needs --record FILE (the record's line) and --vkey V")
    vkey = read_vkey(args.vkey)
    text = _read(args.verify, "proof").decode("utf-8", "replace")
    line = _read(args.record, "record").removesuffix(b"\n")
    if b"\n" in line:
        raise InvalidInput(f"{args.record} holds more than one line: give the one record's line")
    try:
        proof, checkpoint = verify_tlog_proof(text, line, vkey)
    except (CheckpointError, LineError, InvalidProof) as exc:
        check = getattr(exc, "check", "proof.inclusion")
        print(f"FAIL  [{check}] {exc}")
        return 1
    print(
        f"VALID  the record is seq {proof.index} of {checkpoint.origin}, in the tree of "
        f"{checkpoint.size} records its key signed"
    )
    return 0


def _read(name: str, what: str) -> bytes:
    if name == "-":
        return sys.stdin.buffer.read()
    try:
        return Path(name).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read the {what} file {name}: {exc.strerror or exc}") from None
