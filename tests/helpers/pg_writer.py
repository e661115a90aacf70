"""A partition leader subprocess for the PostgreSQL kill -9 test (tests/test_pg_kill9.py).

    pg_writer.py URL DATA_DIR OWNER LEASE_SECONDS THREADS TAG

Waits until it can take partition 0's lease (the killed leader's lease must run out first),
opens the partition's writer (recovery, log.resume) with a heartbeat keeping the lease, prints
`ready <size> <last_resume as JSON>`, then appends from THREADS threads and one thread of
3-record batches until it is killed. After each append returns, that is once the rows are
committed, it prints `<seq> <id>`; a redactor erases some of thread 0's records and prints
`redacted <target seq> <redaction seq>` once redact() has returned. Each line is one os.write
of under PIPE_BUF bytes. An append that raises prints `refused <error type>` and ends its
appender. It exits by itself after a minute.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

import orjson

from eventstore.errors import LedgerError
from eventstore.layout import DataDir
from eventstore.pg import lease as leases
from eventstore.pg.engine import PgEngine
from eventstore.pg.leadership import open_partition_writer
from eventstore.pg.schema import connect, read_store
from eventstore.shared.keeper import LeaseKeeper
from eventstore.store import load_or_create_key
from eventstore.writer import LogWriter

LIFETIME = 60.0
REDACTABLE: collections.deque[int] = collections.deque()


def refused(exc: LedgerError) -> None:
    os.write(1, b"refused %s\n" % type(exc).__name__.encode())


def thread_appender(writer: LogWriter, tag: str, n: int) -> None:
    for i in range(10**9):
        ident = f"{tag}/thread-{n}/{i}"
        try:
            record = writer.append("acme", f"thread-{n}", "messages", "item.added", {"id": ident})
        except LedgerError as exc:
            return refused(exc)
        os.write(1, b"%d %s\n" % (record.seq, ident.encode()))
        if n == 0 and i % 5 == 0:
            REDACTABLE.append(record.seq)


def batch_appender(writer: LogWriter, tag: str) -> None:
    for i in range(0, 10**9, 3):
        idents = [f"{tag}/batch/{i + k}" for k in range(3)]
        try:
            records = writer.append_batch(
                [("acme", "batch", "findings", "item.added", {"id": x}) for x in idents]
            )
        except LedgerError as exc:
            return refused(exc)
        os.write(
            1,
            b"".join(
                b"%d %s\n" % (r.seq, x.encode()) for r, x in zip(records, idents, strict=True)
            ),
        )


def redactor(writer: LogWriter) -> None:
    while True:
        time.sleep(0.03)
        if writer.failure is not None:  # fenced while there was nothing to redact
            return refused(writer.failure)
        if not REDACTABLE:
            continue
        target = REDACTABLE.popleft()
        try:
            redaction = writer.redact([target], "erasure request")
        except LedgerError as exc:
            return refused(exc)
        os.write(1, b"redacted %d %d\n" % (target, redaction.seq))


def main() -> None:
    url, data, owner = sys.argv[1], sys.argv[2], sys.argv[3]
    seconds, threads, tag = float(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    threading.Timer(LIFETIME, os._exit, (3,)).start()
    with connect(url) as conn:
        info = read_store(conn)
        while (lease := leases.take(conn, 0, owner, seconds)) is None:
            time.sleep(0.02)
    key = load_or_create_key(DataDir(data), info.origin, create=False).key
    writer = open_partition_writer(url, info, key, 0, lease)
    LeaseKeeper(PgEngine(url).session, lease).start()
    os.write(1, b"ready %d %s\n" % (writer.size, orjson.dumps(writer.last_resume)))
    appenders = [
        threading.Thread(target=thread_appender, args=(writer, tag, n), daemon=True)
        for n in range(threads)
    ]
    appenders.append(threading.Thread(target=batch_appender, args=(writer, tag), daemon=True))
    appenders.append(threading.Thread(target=redactor, args=(writer,), daemon=True))
    for appender in appenders:
        appender.start()
    for appender in appenders:
        appender.join()
    os._exit(0)


if __name__ == "__main__":
    main()
