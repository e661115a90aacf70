"""Shared pieces of the crash tests: one signing key, file snapshots, reading and verifying logs."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from eventstore import layout
from eventstore.checkpoint import SigningKey
from eventstore.reader import LogReader
from eventstore.record import Record

ORIGIN = "test.local/crash"
SEED = bytes(range(1, 33))
KEY = SigningKey.from_seed(ORIGIN, SEED)  # one key for every test: no key generation per case
HELPERS = Path(__file__).parent
CRASH_WRITER = HELPERS / "crash_writer.py"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_bytes(root: Path, *, skip_lock: bool = True) -> dict[str, bytes]:
    """Every file under `root`, by relative path. LOCK is left out by default: each open
    rewrites the holder's pid into it, and no reader or verifier looks at it."""
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if skip_lock and rel == layout.LOCK:
                continue
            files[rel] = path.read_bytes()
    return files


def write_files(root: Path, files: dict[str, bytes]) -> None:
    """Replace the directory `root` by exactly `files` (a crash image), fsync-free and fast."""
    shutil.rmtree(root, ignore_errors=True)
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def files_containing(root: Path, needle: bytes) -> list[str]:
    """The files anywhere under `root` whose bytes contain `needle`."""
    found = []
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = Path(dirpath) / name
            if needle in path.read_bytes():
                found.append(str(path.relative_to(root)))
    return found


def records(log_dir: Path) -> list[Record]:
    return list(LogReader(log_dir).records())


def records_by_seq(log_dir: Path) -> dict[int, Record]:
    found = {}
    for record in records(log_dir):
        assert record.seq not in found, f"seq {record.seq} appears twice"
        found[record.seq] = record
    return found


def quarantine(log_dir: Path) -> dict[str, bytes]:
    qdir = log_dir / layout.QUARANTINE
    if not qdir.exists():
        return {}
    return {p.name: p.read_bytes() for p in qdir.iterdir()}


def verify(log_dir: Path, vkey=KEY.vkey):
    from eventstore.verify import verify_log  # imported late: the verifier lands separately

    return verify_log(log_dir, vkey=vkey)


def verdict_of(report) -> str:
    verdict = report.verdict
    return getattr(verdict, "value", verdict)


def assert_valid_local(log_dir: Path, vkey=KEY.vkey):
    """Verify `log_dir` with the log's key and require VALID-LOCAL; return the report."""
    report = verify(log_dir, vkey)
    assert verdict_of(report) == "VALID-LOCAL", (log_dir, report.error)
    return report
