"""The event store: a signed, hash-chained log of records (docs/format.md), its single writer,
its readers, the offline verifier, and the storage behind the writer (docs/api.md).

The names below are the package's public face; import them from here. Importing `eventstore`
imports none of its modules: each name is imported the first time it is used (the module
`__getattr__` below, as websockets' `__init__` does), so `ledgermem verify` and the other
commands load only what they run. The `TYPE_CHECKING` block lists the same names as plain
imports, for type checkers and editors; tests/test_public_api_eventstore_replay.py keeps the three lists in step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_names

__all__ = [
    # writing
    "LogWriter",
    "open_log",
    "Entry",
    "Pending",
    "Durability",
    "DEFAULT_SEG_BITS",
    "MAX_PAYLOAD_BYTES",
    # reading
    "LogReader",
    "Record",
    "RecordFilter",
    "MATCH_ALL",
    # keys, data directories and checkpoints
    "SigningKey",
    "VerifierKey",
    "KeyInfo",
    "load_or_create_key",
    "DataDir",
    "Checkpoint",
    "CheckpointError",
    "parse_checkpoint",
    "partition_of",
    # offline verification
    "verify_log",
    "Report",
    "VerifyError",
    "VerifyInputError",
    # durability sinks
    "DurabilitySink",
    "Batch",
    "CommitResult",
    "COMMITTED",
    "Committed",
    "Refused",
    "Unknown",
    "SignedCheckpoint",
    "FileSink",
    "MemorySink",
    "PgSink",
    "RedisSink",
    # errors
    "LedgerError",
    "InvalidInput",
    "InvalidIdentifier",
    "InvalidPayload",
    "StalePosition",
    "LockHeld",
    "CorruptLog",
    "WriterClosed",
    "CommitRefused",
    "CommitUnknown",
    "BrokenChain",
    "BadKey",
    "InvalidProof",
]

if TYPE_CHECKING:
    from .checkpoint import (
        Checkpoint,
        CheckpointError,
        SigningKey,
        VerifierKey,
        parse_checkpoint,
    )
    from .entry import MAX_PAYLOAD_BYTES, Entry
    from .errors import (
        BadKey,
        CorruptLog,
        InvalidIdentifier,
        InvalidInput,
        InvalidPayload,
        InvalidProof,
        LedgerError,
        LockHeld,
        StalePosition,
        WriterClosed,
    )
    from .file_sink import Durability, FileSink
    from .filters import MATCH_ALL, RecordFilter
    from .layout import DataDir
    from .memory_sink import MemorySink
    from .partitions import partition_of
    from .pending import Pending
    from .pg.sink import PgSink
    from .reader import LogReader
    from .record import Record
    from .redis.sink import RedisSink
    from .sink import (
        COMMITTED,
        Batch,
        BrokenChain,
        CommitRefused,
        CommitResult,
        Committed,
        CommitUnknown,
        DurabilitySink,
        Refused,
        SignedCheckpoint,
        Unknown,
    )
    from .store import KeyInfo, load_or_create_key, open_log
    from .verify import Report, VerifyError, VerifyInputError, verify_log
    from .writer import DEFAULT_SEG_BITS, LogWriter

# Each public name and the module it comes from.
_MODULE_OF = {
    "Checkpoint": ".checkpoint",
    "CheckpointError": ".checkpoint",
    "SigningKey": ".checkpoint",
    "VerifierKey": ".checkpoint",
    "parse_checkpoint": ".checkpoint",
    "MAX_PAYLOAD_BYTES": ".entry",
    "Entry": ".entry",
    "BadKey": ".errors",
    "CorruptLog": ".errors",
    "InvalidIdentifier": ".errors",
    "InvalidInput": ".errors",
    "InvalidPayload": ".errors",
    "InvalidProof": ".errors",
    "LedgerError": ".errors",
    "LockHeld": ".errors",
    "StalePosition": ".errors",
    "WriterClosed": ".errors",
    "Durability": ".file_sink",
    "FileSink": ".file_sink",
    "MATCH_ALL": ".filters",
    "RecordFilter": ".filters",
    "DataDir": ".layout",
    "MemorySink": ".memory_sink",
    "partition_of": ".partitions",
    "Pending": ".pending",
    "PgSink": ".pg.sink",
    "RedisSink": ".redis.sink",
    "LogReader": ".reader",
    "Record": ".record",
    "COMMITTED": ".sink",
    "Batch": ".sink",
    "BrokenChain": ".sink",
    "CommitRefused": ".sink",
    "CommitResult": ".sink",
    "Committed": ".sink",
    "CommitUnknown": ".sink",
    "DurabilitySink": ".sink",
    "Refused": ".sink",
    "SignedCheckpoint": ".sink",
    "Unknown": ".sink",
    "KeyInfo": ".store",
    "load_or_create_key": ".store",
    "open_log": ".store",
    "Report": ".verify",
    "VerifyError": ".verify",
    "VerifyInputError": ".verify",
    "verify_log": ".verify",
    "DEFAULT_SEG_BITS": ".writer",
    "LogWriter": ".writer",
}

__getattr__, __dir__ = lazy_names(__name__, _MODULE_OF, globals())
