"""`ledgermem proof LOGDIR --seq N [--size M]`: a C2SP tlog-proof that record N is in the log.

The proof is `c2sp.org/tlog-proof@v1`, `index N`, the RFC 9162 inclusion proof (one base64
hash per line), an empty line, then the signed checkpoint verbatim. A proof must carry a signed
note, so size M must be that of a checkpoint the log holds: the `checkpoint` file (the default)
or one embedded in a `segment.open` (multiples of the segment size).

`ledgermem proof --verify FILE --record LINE --vkey V` checks such a proof offline against the
record's line (as `ledgermem replay` prints it): exit 0 VALID, 1 FAIL, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eventstore.checkpoint import CheckpointError, parse_checkpoint
from eventstore.errors import CorruptLog, InvalidInput, InvalidProof
from eventstore.linecheck import LineError
from eventstore.merkle import inclusion_proof, verify_inclusion

from .bundle import SubtreeRoots, checkpoint_of_size, header_key, newest_checkpoint
from .cli_verify_bundle import read_vkey
from .options import open_reader
from .tlog_proof import format_tlog_proof, verify_tlog_proof


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
    parser.add_argument("--vkey", metavar="VKEY", help="with --verify: the log's vkey (or @FILE)")


def run(args: argparse.Namespace) -> int:
    if args.verify is not None:
        return _verify(args)
    if args.logdir is None or args.seq is None:
        raise InvalidInput("give LOGDIR and --seq N, or --verify FILE --record FILE --vkey V")
    reader = open_reader(args.logdir)
    key = header_key(reader)
    if args.size is None:
        text, source = newest_checkpoint(reader)
    else:
        text, source = checkpoint_of_size(reader, args.size)
    try:
        checkpoint = parse_checkpoint(text, key)
    except CheckpointError as exc:
        raise CorruptLog(
            f"the log's {source} is not signed by the key segment 0 names ({exc}): "
            f"run ledgermem verify {args.logdir}"
        ) from None
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
