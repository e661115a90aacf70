"""Inputs read before the walk: the vkey, the directory listing, segment 0's header, the
`checkpoint` file and pins. Bad input raises VerifyInputError (exit 2); a bad file is a FAIL,
carried on to the report."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from .. import jcs
from ..checkpoint import CheckpointError, VerifierKey, parse_checkpoint
from ..errors import BadKey, InvalidInput, InvalidPayload
from ..layout import CHECKPOINT, segment_name, segment_number
from ..record import MAX_LINE_BYTES, SEGMENT_OPEN, genesis
from .report import VerifyError

_CHECKPOINT_MAX_BYTES = 1 << 20


class VerifyInputError(InvalidInput):
    """Bad verifier input (no such directory, bad vkey, a pin not signed by the log key): exit 2."""


def parse_vkey(vkey: VerifierKey | str) -> VerifierKey:
    if isinstance(vkey, VerifierKey):
        return vkey
    try:
        return VerifierKey.parse(vkey)
    except BadKey as exc:
        raise VerifyInputError(f"{exc}: pass the line `ledgermem vkey` prints") from None


@dataclass
class DirectoryScan:
    numbers: list[int]
    warnings: list[str]


def scan_directory(log_dir: Path) -> DirectoryScan:
    numbers: list[int] = []
    warnings: list[str] = []
    for entry in sorted(os.scandir(log_dir), key=lambda e: e.name):
        name = entry.name
        if name.endswith(".tmp"):
            warnings.append(
                f"ignored temporary file {name}: left by an interrupted checkpoint refresh or "
                "redaction rewrite; the writer removes it when it opens the log"
            )
            continue
        number = segment_number(name)
        if number is not None and entry.is_file():
            numbers.append(number)
        elif name.startswith("seg-"):
            warnings.append(
                f"ignored {name}: not a segment file name (seg-<12 digits>.jsonl, a regular file)"
            )
    numbers.sort()
    return DirectoryScan(numbers, warnings)


@dataclass
class Header:
    origin: str | None = None
    seg_bits: int | None = None
    vkey: VerifierKey | None = None
    error: VerifyError | None = None
    # True when line 1 chains from the genesis of the origin it names: a log of that origin,
    # whatever else the walk finds (a header whose origin alone was edited does not chain).
    own_genesis: bool = False


def read_header(log_dir: Path) -> Header:
    """seg_bits, origin and vkey from segment 0's first line; the walk re-checks that line."""
    name = segment_name(0)
    try:
        with open(log_dir / name, "rb") as f:
            raw = f.readline(MAX_LINE_BYTES + 1)
    except FileNotFoundError:
        return Header(error=VerifyError(name, None, 0, "segment.missing", f"{name} is missing"))
    except OSError as exc:
        raise VerifyInputError(f"cannot read {log_dir / name}: {exc}") from None
    fail = VerifyError(
        name, 1, 0, "segment.open", "line 1 of segment 0 is not a segment.open header"
    )
    try:
        obj = jcs.loads_strict(raw.rstrip(b"\n"))
    except InvalidPayload:
        return Header(error=fail)
    if not isinstance(obj, dict):
        return Header(error=fail)
    payload = obj.get("payload")
    if not isinstance(payload, dict) or obj.get("type") != SEGMENT_OPEN:
        return Header(error=fail)
    header = Header()
    if type(payload.get("origin")) is str:
        header.origin = payload["origin"]
        header.own_genesis = obj.get("prev") == genesis(header.origin).hex()
    bits = payload.get("seg_bits")
    if type(bits) is int and 2 <= bits <= 40:
        header.seg_bits = bits
    else:
        header.error = VerifyError(
            name, 1, 0, "segment.open.seg_bits", f"seg_bits {bits!r} is not an integer 2..40"
        )
    if type(payload.get("vkey")) is str:
        with contextlib.suppress(BadKey):  # the walk reports a bad header vkey
            header.vkey = VerifierKey.parse(payload["vkey"])
    return header


@dataclass
class HeldCheckpoint:
    """The `checkpoint` file or a pin: its size and root once parsed, or why it failed."""

    source: str
    size: int = 0
    root: bytes = b""
    ok: bool = False
    present: bool = True
    check: str = ""
    message: str = ""
    path: str | None = None


def read_checkpoint_file(log_dir: Path, key: VerifierKey) -> HeldCheckpoint:
    held = HeldCheckpoint("checkpoint")
    try:
        with open(log_dir / CHECKPOINT, "rb") as f:
            data = f.read(_CHECKPOINT_MAX_BYTES + 1)
    except FileNotFoundError:
        held.present = False
        return held
    except OSError as exc:
        raise VerifyInputError(f"cannot read {log_dir / CHECKPOINT}: {exc}") from None
    if len(data) > _CHECKPOINT_MAX_BYTES:
        held.check, held.message = "checkpoint.format", "the checkpoint file is larger than 1 MiB"
        return held
    try:
        cp = parse_checkpoint(data.decode("utf-8"), key)
    except UnicodeDecodeError:
        held.check, held.message = "checkpoint.format", "the checkpoint file is not UTF-8"
        return held
    except CheckpointError as exc:
        held.check, held.message = exc.check, f"checkpoint file: {exc}"
        return held
    held.size, held.root, held.ok = cp.size, cp.root, True
    return held


def read_pin(path: Path, key: VerifierKey) -> HeldCheckpoint:
    try:
        text = path.read_bytes().decode("utf-8")
        cp = parse_checkpoint(text, key)
    except (OSError, UnicodeDecodeError) as exc:
        raise VerifyInputError(f"cannot read pin {path}: {exc}") from None
    except CheckpointError as exc:
        raise VerifyInputError(
            f"pin {path} is not a checkpoint signed by the log key for origin {key.origin!r}: {exc}"
        ) from None
    return HeldCheckpoint("pin", cp.size, cp.root, ok=True, path=str(path))
