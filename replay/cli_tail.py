"""`ledgermem tail URL`: follow a running server's JSONL stream, resuming after disconnects.

Records go to stdout, each line's exact bytes and a newline, or with `--mirror DIR` into a log
directory laid out like the server's, which `ledgermem verify` checks (replay/mirror.py). The
cursor is the seq of the last record taken: every reconnect asks for `after=<that seq>`, so a
server restart or a broken connection neither repeats nor skips a record (docs/wire.md, the cursor).

One thread reads the stream and queues complete lines; the main thread writes them out, fetches
checkpoints for a mirror, and stops on a target seq or a signal. Only the standard library's
http.client talks to the server: the replay package never loads the web stack.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import queue
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from urllib.parse import urlencode, urlsplit

from eventstore.errors import InvalidInput, LedgerError
from eventstore.wording import count

from .mirror import Mirror, MirrorError
from .options import add_filters

FILTERS = ("tenant", "session", "section", "type")
FATAL_STATUSES = {400, 401, 403, 404, 405, 410, 422}  # retrying would get the same answer
MIN_BACKOFF = 0.1
SETTLE_SECONDS = 1.5  # at exit, how long a mirror waits for a checkpoint covering all it holds
_END = object()  # queued by the stream when a follow=0 response reached the head


class TailError(LedgerError):
    """The stream cannot be followed: a refusal by the server, or records that do not continue."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url", metavar="URL", help="the server's base URL, e.g. http://127.0.0.1:8000"
    )
    parser.add_argument(
        "--after", type=int, metavar="N", help="start after seq N (default -1: from the start)"
    )
    add_filters(parser)
    parser.add_argument(
        "--token", help="API token, sent as Authorization: Bearer (default: $LEDGERMEM_TOKEN)"
    )
    parser.add_argument(
        "--mirror",
        metavar="DIR",
        help="write the records into a log directory laid out like the server's, with its "
        "signed checkpoints (no filters; continues a mirror written before)",
    )
    parser.add_argument(
        "--apply-redactions",
        action="store_true",
        help="with --mirror: remove the payloads that later redaction records name, as the "
        "server did (default: the mirror keeps them, and verify reports the redaction pending)",
    )
    parser.add_argument(
        "--exit-at-head",
        action="store_true",
        help="exit once the server's head at start is written",
    )
    parser.add_argument(
        "--to",
        "--to-seq",
        dest="to_seq",
        type=int,
        metavar="N",
        help="exit once the record with seq N is written",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=5.0,
        metavar="S",
        help="with --mirror: fetch the server's checkpoint every S seconds (default 5)",
    )
    parser.add_argument(
        "--max-backoff",
        type=float,
        default=5.0,
        metavar="S",
        help="longest wait between reconnection attempts (default 5)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="reconnect when the stream is silent this long (default 60)",
    )
    parser.add_argument("--quiet", action="store_true", help="no disconnect notices on stderr")


# ---- the server ----------------------------------------------------------------------------


class Endpoint:
    """The server's base URL and credentials; small GETs and the stream's connections."""

    def __init__(self, url: str, token: str | None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput(f"{url!r} is not an http:// or https:// URL of a server")
        self.url = url.rstrip("/")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.base = parts.path.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.https:
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=timeout, context=ssl.create_default_context()
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def path(self, route: str, query: list[tuple[str, str]] | None = None) -> str:
        return self.base + route + ("?" + urlencode(query) if query else "")

    def get(self, route: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """One small GET: (status, body). OSError and HTTPException when the server is away."""
        conn = self.connect(timeout)
        try:
            conn.request("GET", self.path(route), headers=self.headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def refusal(self, route: str, status: int, body: bytes) -> TailError:
        return TailError(f"{self.url}{route}: HTTP {status}: {_error_text(body)}")


def _error_text(body: bytes) -> str:
    try:
        error = json.loads(body)["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace").strip() or "(no body)"


def _seq_of(line: bytes) -> int:
    try:
        start = line.index(b'"seq":') + 6
        return int(line[start : line.index(b",", start)])
    except ValueError:
        try:
            return json.loads(line)["seq"]
        except (ValueError, KeyError, TypeError):
            raise TailError(f"the stream sent a line that is not a record: {line[:80]!r}") from None


# ---- the stream ----------------------------------------------------------------------------


class Stream(threading.Thread):
    """Reads the JSONL channel into `items` (lists of lines), reconnecting with the cursor.

    `after` is the seq of the last record queued. A line at or before it is dropped (never
    repeated); with `contiguous` (a mirror) a jump past after+1 stops the stream with an error
    instead of skipping. With `follow=False` each response ends at the server's head; once one
    ends cleanly while the server is ready (not a shutdown), `_END` is queued.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        after: int,
        filters: list[tuple[str, str]],
        *,
        follow: bool,
        contiguous: bool,
        idle_timeout: float,
        max_backoff: float,
        notice: Callable[[str], None],
    ) -> None:
        super().__init__(name="ledgermem-tail", daemon=True)
        self.endpoint = endpoint
        self.after = after
        self.filters = filters
        self.follow = follow
        self.contiguous = contiguous
        self.idle_timeout = idle_timeout
        self.max_backoff = max(max_backoff, MIN_BACKOFF)
        self.notice = notice
        self.items: queue.Queue = queue.Queue()
        self._stopping = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self._down: str | None = None  # why the stream is down, while it is
        self._connected = False  # the current attempt got a 200

    def stop(self) -> None:
        self._stopping.set()
        conn = self._conn
        if conn is not None and conn.sock is not None:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)  # wakes the blocked read

    def run(self) -> None:
        backoff = MIN_BACKOFF
        while not self._stopping.is_set():
            self._connected = False
            try:
                clean = self._read_once()
                if clean and not self.follow and self._server_ready():
                    self.items.put(_END)
                    return
                reason = "the server ended the stream"
            except LedgerError as exc:
                self.items.put(exc)
                return
            except (OSError, http.client.HTTPException) as exc:
                reason = f"{type(exc).__name__}: {exc}".rstrip(": ")
            except Exception as exc:  # a bug: report it rather than leave the main thread waiting
                self.items.put(exc)
                return
            if self._stopping.is_set():
                return
            if self._down is None:
                self.notice(f"disconnected ({reason}); resuming after seq {self.after}")
                self._down = reason
            if self._connected:
                backoff = MIN_BACKOFF
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, self.max_backoff)

    def _read_once(self) -> bool:
        """One request; True when the server ended the response cleanly."""
        query = [("after", str(self.after)), ("follow", "1" if self.follow else "0")]
        route = "/v1/stream/jsonl"
        conn = self.endpoint.connect(self.idle_timeout)
        self._conn = conn
        try:
            conn.request(
                "GET",
                self.endpoint.path(route, query + self.filters),
                headers={**self.endpoint.headers, "Accept": "application/x-ndjson"},
            )
            response = conn.getresponse()
            if response.status != 200:
                body = response.read(1 << 16)
                if response.status in FATAL_STATUSES:
                    raise self.endpoint.refusal(route, response.status, body)
                raise http.client.HTTPException(f"HTTP {response.status}: {_error_text(body)}")
            self._connected = True
            if self._down is not None:
                self.notice(f"resumed after seq {self.after}")
                self._down = None
            pieces: list[bytes] = []  # an unfinished line, in pieces: long lines stay linear
            while not self._stopping.is_set():
                chunk = response.read1(1 << 16)
                if not chunk:
                    return True
                if b"\n" not in chunk:
                    pieces.append(chunk)
                    continue
                pieces.append(chunk)
                *lines, rest = b"".join(pieces).split(b"\n")
                pieces = [rest] if rest else []
                self._deliver(lines)
            return False
        finally:
            self._conn = None
            conn.close()

    def _deliver(self, lines: list[bytes]) -> None:
        fresh: list[bytes] = []
        try:
            for line in lines:
                if not line:
                    continue
                seq = _seq_of(line)
                if seq <= self.after:
                    continue  # already taken: a resumed stream never repeats a record
                if self.contiguous and seq != self.after + 1:
                    raise TailError(
                        f"the stream jumped from seq {self.after} to seq {seq}, so nothing after "
                        f"seq {self.after} was written (a server with API tokens streams a "
                        "tenant's own records only, never the whole log a mirror needs)"
                    )
                fresh.append(line)
                self.after = seq
        finally:
            if fresh:  # the lines before a bad one are good: they are written first
                self.items.put(fresh)

    def _server_ready(self) -> bool:
        """Whether the server is up and not shutting down (a shutdown also ends streams)."""
        try:
            status, _ = self.endpoint.get("/readyz")
        except (OSError, http.client.HTTPException):
            return False
        return status == 200


# ---- where records go ----------------------------------------------------------------------


class StdoutSink:
    def __init__(self) -> None:
        self.out = sys.stdout.buffer

    def write(self, lines: list[bytes]) -> None:
        self.out.write(b"".join([line + b"\n" for line in lines]))
        self.out.flush()

    def tick(self) -> None:
        pass

    def finish(self) -> str:
        return ""

    def close(self) -> None:
        pass


class MirrorSink:
    """Appends to a Mirror, fsyncs each batch, and installs the server's checkpoints."""

    def __init__(
        self,
        mirror: Mirror,
        endpoint: Endpoint,
        apply_redactions: bool,
        checkpoint_every: float,
        notice: Callable[[str], None],
    ) -> None:
        self.mirror = mirror
        self.endpoint = endpoint
        self.apply_redactions = apply_redactions
        self.checkpoint_every = checkpoint_every
        self.notice = notice
        self.pending: str | None = None  # a checkpoint newer than the mirror: installed later
        self.next_fetch = 0.0
        self.written = 0
        self.redacted = 0

    def write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        redactions = self.mirror.append(lines)
        self.mirror.sync()
        self.written += len(lines)
        if self.apply_redactions:
            for record in redactions:
                self.redacted += self.mirror.apply_redaction(record)
        if self.pending is not None and self._offer(self.pending):
            self.pending = None

    def tick(self) -> None:
        if self.mirror.size == 0 or time.monotonic() < self.next_fetch:
            return
        self.next_fetch = time.monotonic() + self.checkpoint_every
        text = self._fetch()
        if text is None or self._offer(text):
            return
        if self.mirror.checkpoint_size_of(text) > self.mirror.size:
            self.pending = text  # installed once the mirror holds what it covers

    def finish(self) -> str:
        """Install the newest checkpoint the mirror can hold; wait briefly for one covering
        every record it holds (the server signs within a second of its last record)."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while self.mirror.size:
            text = self._fetch()
            if text is None:
                break
            size = self.mirror.checkpoint_size_of(text)
            self._offer(text)
            if size >= self.mirror.size or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return (
            f"mirror {self.mirror.path}: {count(self.mirror.size, 'record')}, checkpoint "
            f"{self.mirror.checkpoint_size}"
            + (f", {count(self.redacted, 'payload')} redacted" if self.redacted else "")
        )

    def close(self) -> None:
        self.mirror.close()

    def _offer(self, text: str) -> bool:
        return self.mirror.install_checkpoint(text)

    def _fetch(self) -> str | None:
        route = "/v1/log/checkpoint"
        try:
            status, body = self.endpoint.get(route)
        except (OSError, http.client.HTTPException):
            return None  # the server is away: the next tick tries again
        if status in FATAL_STATUSES - {404}:
            raise self.endpoint.refusal(route, status, body)
        if status != 200:
            return None
        text = body.decode("utf-8", "replace")
        try:
            self.mirror.checkpoint_size_of(text)
        except MirrorError as exc:
            self.notice(f"{self.endpoint.url}{route}: {exc}; not installed")
            return None
        return text


# ---- the command ---------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    endpoint = Endpoint(args.url, args.token or os.environ.get("LEDGERMEM_TOKEN"))
    filters = [(name, v) for name in FILTERS for v in (getattr(args, name) or [])]
    notice = (lambda _m: None) if args.quiet else _notice
    if args.mirror is not None:
        if filters:
            raise InvalidInput("--mirror copies the whole log: it takes no filters")
        if args.after is not None:
            raise InvalidInput("--mirror starts at the start, or where the mirror ends: no --after")
        mirror = Mirror.open(args.mirror)
        after = mirror.last_seq
        sink: StdoutSink | MirrorSink = MirrorSink(
            mirror, endpoint, args.apply_redactions, args.checkpoint_every, notice
        )
    else:
        if args.apply_redactions:
            raise InvalidInput("--apply-redactions needs --mirror")
        after = -1 if args.after is None else args.after
        sink = StdoutSink()
    try:
        target = args.to_seq
        if args.exit_at_head:
            head = _head(endpoint, args.max_backoff, notice)
            target = head if target is None else min(target, head)
        summary = _follow(endpoint, sink, after, filters, target, args, notice)
    finally:
        sink.close()
    if summary:
        print(f"ledgermem tail: {summary}", file=sys.stderr)
    return 0


def _follow(
    endpoint: Endpoint,
    sink: StdoutSink | MirrorSink,
    after: int,
    filters: list[tuple[str, str]],
    target: int | None,
    args: argparse.Namespace,
    notice: Callable[[str], None],
) -> str:
    if target is not None and after >= target:
        return sink.finish()
    # The records a stream leaves out (filters, or a token's tenant) never show their seqs, so
    # reaching the head is the server's to say: it ends each follow=0 response at its head.
    stream = Stream(
        endpoint,
        after,
        filters,
        follow=not args.exit_at_head,
        contiguous=isinstance(sink, MirrorSink),
        idle_timeout=args.idle_timeout,
        max_backoff=args.max_backoff,
        notice=notice,
    )
    stopping = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stopping.set())
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    stream.start()
    try:
        while not stopping.is_set():
            ended, lines, error = _take(stream.items, 0.25)
            reached = False
            if target is not None and lines:
                reached = _seq_of(lines[-1]) >= target
                lines = [line for line in lines if _seq_of(line) <= target]
            sink.write(lines)  # what came before an error is good: keep it
            if error is not None:
                raise error
            sink.tick()
            if reached or ended:
                break
        return sink.finish()
    finally:
        stream.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _take(items: queue.Queue, timeout: float) -> tuple[bool, list[bytes], BaseException | None]:
    """Everything queued now, waiting up to `timeout` for the first: (ended, lines, error)."""
    lines: list[bytes] = []
    try:
        item = items.get(timeout=timeout)
        while True:
            if item is _END:
                return True, lines, None
            if isinstance(item, BaseException):
                return False, lines, item
            lines.extend(item)
            item = items.get_nowait()
    except queue.Empty:
        return False, lines, None


def _head(endpoint: Endpoint, max_backoff: float, notice: Callable[[str], None]) -> int:
    """The server's head seq, waiting for the server if it is away."""
    route = "/v1/log/status"
    backoff, told = MIN_BACKOFF, False
    while True:
        try:
            status, body = endpoint.get(route)
            if status == 200:
                return json.loads(body)["head"]
            if status in FATAL_STATUSES:
                raise endpoint.refusal(route, status, body)
            reason = f"HTTP {status}"
        except (OSError, http.client.HTTPException) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        if not told:
            notice(f"{endpoint.url}{route}: {reason}; retrying")
            told = True
        time.sleep(backoff)
        backoff = min(backoff * 2, max(max_backoff, MIN_BACKOFF))


def _notice(message: str) -> None:
    print(f"ledgermem tail: {message}", file=sys.stderr, flush=True)
