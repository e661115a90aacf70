"""A writer subprocess for the kill -9 tests: appends durably from threads and an asyncio task.

    crash_writer.py LOG_DIR SEED_HEX ORIGIN SEG_BITS THREADS TAG [FSIZE_LIMIT]

Opens the log (running recovery), prints `ready <size> <last_resume as JSON>`, then appends
from THREADS threads, one thread of 3-record batches and one asyncio task until it is killed.
After each append returns, that is once the record is durable, it prints one line
`<seq> <payload as JSON>`. A redactor thread erases records of thread 0 now and then, and
prints `redacted <target seq> <redaction seq>` once redact() has returned. Every line goes out in a single os.write of under PIPE_BUF bytes,
so lines from different threads never interleave and the test sees each one whole or not at
all. The payload holds a unique id, so the test can find the record again after recovery.
An append that raises prints `refused <error type>` and ends its appender.

With FSIZE_LIMIT, RLIMIT_FSIZE caps every file the process writes at that many bytes, so the
segment's writes fail for real (a short write, then EFBIG). Once every appender was refused the
writer is closed, `closed` is printed and the process exits.

It exits by itself after a minute, so a test that dies before killing it leaves no orphan.
"""

from __future__ import annotations

import asyncio
import collections
import os
import resource
import signal
import sys
import threading
import time

import orjson

from eventstore.checkpoint import SigningKey
from eventstore.errors import LedgerError
from eventstore.writer import LogWriter

LIFETIME = 60.0
TEXTS = ("short", "a longer note about the user's plans for the weekend " * 3, "Zoë 𝄞 ünïcødé")


def payload(tag: str, appender: str, i: int) -> dict:
    # Floats and a non-BMP character take the rfc8785 path; the length varies so lines differ.
    return {
        "id": f"{tag}/{appender}/{i}",
        "i": i,
        "ratio": i / 7,
        "text": TEXTS[i % 3] + "x" * (i * 37 % 400),
    }


def report(seq: int, body: dict) -> None:
    os.write(1, b"%d %s\n" % (seq, orjson.dumps(body)))


def refused(exc: LedgerError) -> None:
    os.write(1, b"refused %s\n" % type(exc).__name__.encode())


REDACTABLE: collections.deque[int] = collections.deque()
REDACT_EVERY = 0.02  # seconds


def thread_appender(writer: LogWriter, tag: str, n: int) -> None:
    for i in range(10**9):
        body = payload(tag, f"thread-{n}", i)
        try:
            record = writer.append("acme", f"thread-{n}", "messages", "item.added", body)
        except LedgerError as exc:
            return refused(exc)
        report(record.seq, body)
        if n == 0 and i % 5 == 0:
            REDACTABLE.append(record.seq)


def redactor(writer: LogWriter) -> None:
    while True:
        time.sleep(REDACT_EVERY)
        if not REDACTABLE:
            continue
        target = REDACTABLE.popleft()
        try:
            redaction = writer.redact([target], "erasure request", request=f"req-{target}")
        except LedgerError as exc:
            return refused(exc)
        os.write(1, b"redacted %d %d\n" % (target, redaction.seq))


def batch_appender(writer: LogWriter, tag: str) -> None:
    for i in range(0, 10**9, 3):
        bodies = [payload(tag, "batch", i + k) for k in range(3)]
        try:
            records = writer.append_batch(
                [("acme", "batch", "findings", "item.added", body) for body in bodies]
            )
        except LedgerError as exc:
            return refused(exc)
        for record, body in zip(records, bodies, strict=True):
            report(record.seq, body)


async def task_appender(writer: LogWriter, tag: str) -> None:
    for i in range(10**9):
        body = payload(tag, "task", i)
        try:
            entry = ("acme", "task", "messages", "item.added", body)
            (record,) = await writer.submit([entry]).wait_async()
        except LedgerError as exc:
            return refused(exc)
        report(record.seq, body)


def main() -> None:
    log_dir, seed_hex, origin = sys.argv[1], sys.argv[2], sys.argv[3]
    seg_bits, threads, tag = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    fsize_limit = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    threading.Timer(LIFETIME, os._exit, (3,)).start()
    key = SigningKey.from_seed(origin, bytes.fromhex(seed_hex))
    writer = LogWriter.open(log_dir, key, seg_bits=seg_bits)
    if fsize_limit:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize_limit, resource.RLIM_INFINITY))
    os.write(1, b"ready %d %s\n" % (writer.size, orjson.dumps(writer.last_resume)))
    appenders = [
        threading.Thread(target=thread_appender, args=(writer, tag, n), daemon=True)
        for n in range(threads)
    ]
    appenders.append(threading.Thread(target=batch_appender, args=(writer, tag), daemon=True))
    for appender in appenders:
        appender.start()
    threading.Thread(target=redactor, args=(writer,), daemon=True).start()
    asyncio.run(task_appender(writer, tag))
    for appender in appenders:
        appender.join()
    writer.close()
    os.write(1, b"closed\n")
    os._exit(0)


if __name__ == "__main__":
    main()
