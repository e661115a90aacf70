"""The fan-out hub: publishes each durable record once, to every subscriber (docs/fanout.md).

The writer calls the hub's listener on its own thread after each durable batch; the listener
hands the batch to the event loop with one `call_soon_threadsafe` and returns, so a writer never
waits for a subscriber. On the loop the hub wraps each record once in an `EncodedRecord`, whose
channel encodings are built at most once per record and shared by every subscriber, and offers
the batch to each subscriber's `Cursor` (streams/fanout/cursor.py). A `Subscription` drives its cursor:
it reads the log in a worker thread when the cursor asks, and hands the channel adapters
(streams/fanout/channels/) batches of encoded records. An adapter that can write to its connection
without waiting gives its subscription a `LiveWriter`: then a subscriber that sits waiting is not
woken at all; the hub writes what it got to its connection, in one callback right after the
publishes that are ready on the loop (so that when publishes arrive faster than they are written,
each subscriber still gets them coalesced into one write), as frames encoded once for everybody.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple, Protocol

import orjson

from eventstore.filters import MATCH_ALL, RecordFilter
from eventstore.record import Record
from streams.fanout.cursor import DONE, WAIT, CaughtUp, Cursor, ReadLog, Send
from streams.fanout.fanout_errors import CursorBeyondHead, HubClosed, TooManySubscribers

log = logging.getLogger("ledgermem.fanout")

READ_THREADS = 4
METRICS_SECONDS = 1.0  # how often subscribers' served counts and lag reach the metrics
SCAN_LIMIT = 16384  # lines examined per log read, so a selective filter still yields often
_PREV_KEY = b',"prev":'


def ws_text_frame(payload: bytes) -> bytes:
    """A final, unmasked WebSocket text frame carrying `payload` (RFC 6455 section 5.2), as a
    server sends it on a connection without extensions: the same bytes for every subscriber."""
    n = len(payload)
    if n < 126:
        return b"\x81%c%s" % (n, payload)
    if n < 1 << 16:
        return b"\x81\x7e%s%s" % (n.to_bytes(2, "big"), payload)
    return b"\x81\x7f%s%s" % (n.to_bytes(8, "big"), payload)


class EncodedRecord:
    """One record and its channel encodings, each built at most once and shared by everyone."""

    __slots__ = (
        "seq",
        "line",
        "tenant",
        "session",
        "section",
        "type",
        "_sse",
        "_typed",
        "_text",
        "_frame",
    )

    def __init__(
        self, seq: int, line: bytes, tenant: str, session: str, section: str, type_: str
    ) -> None:
        self.seq, self.line = seq, line
        self.tenant, self.session, self.section, self.type = tenant, session, section, type_
        self._sse: bytes | None = None
        self._typed: bytes | None = None
        self._text: str | None = None
        self._frame: bytes | None = None

    @classmethod
    def of(cls, record: Record) -> EncodedRecord:
        return cls(
            record.seq, record.line, record.tenant, record.session, record.section, record.type
        )

    @classmethod
    def from_line(cls, seq: int, line: bytes) -> EncodedRecord:
        # The identifiers come before "prev" and never need escaping: parse only that prefix.
        end = line.find(_PREV_KEY)
        head = orjson.loads(line[:end] + b"}" if end > 0 else line)
        return cls(seq, line, head["tenant"], head["session"], head["section"], head["type"])

    def sse(self) -> bytes:
        """The SSE event: `id: <seq>`, `data: <record>`."""
        if self._sse is None:
            self._sse = b"id: %d\ndata: %s\n\n" % (self.seq, self.line)
        return self._sse

    def sse_typed(self) -> bytes:
        """The SSE event with `event: <type>` (only for `typed=1` subscribers)."""
        if self._typed is None:
            self._typed = b"id: %d\nevent: %s\ndata: %s\n\n" % (
                self.seq,
                self.type.encode(),
                self.line,
            )
        return self._typed

    def text(self) -> str:
        """The WebSocket text frame: the record itself."""
        if self._text is None:
            self._text = self.line.decode("utf-8")
        return self._text

    def ws_frame(self) -> bytes:
        """The whole WebSocket text frame (header and record), for connections that write
        frames themselves (streams/web/library_overrides.py)."""
        if self._frame is None:
            self._frame = ws_text_frame(self.line)
        return self._frame

    def __repr__(self) -> str:
        return f"EncodedRecord(seq={self.seq})"


class Delivery(NamedTuple):
    items: list[EncodedRecord]
    source: str  # "log", "live", or "" for a control message / a timeout
    caught_up: int | None = None


class LiveWriter(Protocol):
    """Writes records into a subscriber's connection synchronously (a channel adapter's)."""

    def ready(self) -> bool:
        """True when a write now would go out without waiting (open, not paused)."""
        ...

    def write(self, items: list[EncodedRecord]) -> None: ...


class Published(Protocol):
    """What the hub publishes: a log's writer, or a replica's mirror of one (eventstore/mirror.py),
    which calls its listeners after each durable batch."""

    @property
    def size(self) -> int:
        """Records durable so far."""
        ...

    def add_listener(self, listener: Callable[[list[Record]], None]) -> None: ...

    def remove_listener(self, listener: Callable[[list[Record]], None]) -> None: ...


class LogLines(Protocol):
    """What the hub reads a falling-behind subscriber's records from (a `LogReader`)."""

    def lines(self, after: int = -1, until: int | None = None) -> Iterator[tuple[int, bytes]]: ...


class HubSettings(Protocol):
    """The settings the hub reads (streams/server/settings.py `Settings`)."""

    @property
    def subscriber_buffer(self) -> int: ...

    @property
    def subscriber_buffer_bytes(self) -> int: ...

    @property
    def max_subscribers_per_client(self) -> int: ...


class HubMetrics(Protocol):
    """Where the hub counts its subscribers and what they were sent (streams/server/metrics.py)."""

    def subscriber_added(self, channel: str) -> None: ...
    def subscriber_removed(self, channel: str) -> None: ...
    def served(self, channel: str, source: str, n: int) -> None: ...
    def lag(self, channel: str, records: int) -> None: ...


class _NullMetrics:
    def subscriber_added(self, channel: str) -> None: ...
    def subscriber_removed(self, channel: str) -> None: ...
    def served(self, channel: str, source: str, n: int) -> None: ...
    def lag(self, channel: str, records: int) -> None: ...


class Slot:
    """One of a client address's subscriber places; `release()` gives it back (idempotent)."""

    __slots__ = ("hub", "client", "released")

    def __init__(self, hub: Hub, client: str) -> None:
        self.hub, self.client, self.released = hub, client, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.hub._release(self.client)


class Subscription:
    """What a channel adapter pulls batches from: `async for delivery in subscription`, or
    `await next(timeout)`. Always `close()` it (it is also a context manager)."""

    def __init__(self, hub: Hub, cursor: Cursor, channel: str, slot: Slot | None) -> None:
        self.hub = hub
        self.cursor = cursor
        self.channel = channel
        self._slot = slot
        self._waiter: asyncio.Future[None] | None = None  # set while next() waits for an offer
        self._ended = False  # the hub closed
        self._closed = False
        # Counted here and handed to the metrics once a second (Hub._report): a Prometheus
        # labels() lookup per send cost about a tenth of the fan-out's CPU.
        self._served = {"log": 0, "live": 0}
        self._lag: int | None = None  # records behind the head at the latest send
        self.delivered = cursor.position  # the last seq handed out (the close trace names it)
        # Set by an adapter that can write to its connection without waiting. Used only while
        # the adapter's task waits in next() (`_waiter` set): it then holds no batch, so
        # whatever the hub writes goes after everything the task wrote, in seq order.
        self.writer: LiveWriter | None = None
        self._flush_due = False  # in the hub's list of subscribers to write to

    @property
    def closed(self) -> bool:
        return self._closed or self._ended

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _offer(self, items: Sequence[EncodedRecord]) -> None:
        if not self.cursor.offer(items):
            return
        if self.writer is not None and self._waiter is not None:
            if not self._flush_due:  # written by the hub's next flush, unless it cannot be
                self._flush_due = True
                self.hub._flush_soon(self)
            return
        self._wake()

    def _flush(self) -> None:
        """Write what the cursor holds straight to the connection if the adapter's task still
        waits (it holds no batch: this goes after all it wrote) and the connection takes it
        now; otherwise wake the task, which sends it, waiting for the connection if need be."""
        self._flush_due = False
        writer = self.writer
        if writer is not None and self._waiter is not None and not self.closed and writer.ready():
            send = self.cursor.take_live()
            if send is not None:
                self._handed(send)
                try:
                    writer.write(send.items)
                except Exception:  # the records are taken: end it; the client resumes
                    log.exception("writing live records to a %s subscriber", self.channel)
                    self._end()
                return
        self._wake()

    def _handed(self, send: Send) -> None:
        """Count a batch going out, by the adapter's task or by the hub's direct write."""
        self._served[send.source] += len(send.items)
        if send.items:
            self.delivered = send.items[-1].seq
        self._lag = max(0, self.hub.head - self.cursor.position)

    def _overflow(self) -> None:
        self.cursor.overflow()
        self._wake()

    def _end(self) -> None:
        self._ended = True
        self._wake()

    def _report(self, served: dict[tuple[str, str], int]) -> None:
        """Add the records sent since the last report to `served` (by channel and source), and
        hand the latest lag to the metrics."""
        for source, n in self._served.items():
            if n:
                key = (self.channel, source)
                served[key] = served.get(key, 0) + n
                self._served[source] = 0
        if self._lag is not None:
            self.hub.metrics.lag(self.channel, self._lag)
            self._lag = None

    async def next(self, timeout: float | None = None) -> Delivery | None:
        """The next batch (or a caught-up notice); an empty Delivery when `timeout` passes;
        None when the subscription is over (it reached its end, or the hub closed)."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        hub, cursor = self.hub, self.cursor
        while not self.closed:
            action = cursor.next_action(hub.head)
            if type(action) is Send:
                self._handed(action)
                return Delivery(action.items, action.source)
            if type(action) is ReadLog:
                await self._read(action)
                continue
            if type(action) is CaughtUp:
                return Delivery([], "", action.seq)
            if action is DONE:
                return None
            assert action is WAIT
            waiter = self._waiter = loop.create_future()
            if deadline is None:
                await waiter
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                return Delivery([], "")
            try:
                await asyncio.wait_for(waiter, remaining)
            except TimeoutError:
                return Delivery([], "")
        return None

    async def _read(self, action: ReadLog) -> None:
        items, reached = await self.hub._read(action, self.cursor.filter)
        if reached <= action.after and not self.closed:
            # The log holds fewer records than were published: it was changed underneath us.
            log.warning("log read after %d up to %d found nothing", action.after, action.until)
            await asyncio.sleep(0.05)
        self.cursor.log_read(action.after, items, reached)

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> Delivery:
        delivery = await self.next()
        if delivery is None:
            raise StopAsyncIteration
        return delivery

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wake()
        self.hub._remove(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Hub:
    """Publishes every durable record once; subscribers catch up from the log, then go live."""

    def __init__(
        self,
        writer: Published,
        reader: LogLines,
        settings: HubSettings,
        metrics: HubMetrics | None = None,
        *,
        refuse_beyond_head: bool = True,
    ) -> None:
        """`refuse_beyond_head`: a cursor past the log's last record is refused (`subscribe`);
        off for a hub that follows a mirror, which may lag the log a client saw elsewhere."""
        self.writer = writer
        self.refuse_beyond_head = refuse_beyond_head
        self.reader = reader
        self.settings = settings
        self.metrics: HubMetrics = metrics if metrics is not None else _NullMetrics()
        self.max_records = settings.subscriber_buffer
        self.max_bytes = settings.subscriber_buffer_bytes
        self.per_client = settings.max_subscribers_per_client
        self.head = -1
        self._subscriptions: dict[Subscription, None] = {}  # insertion-ordered set
        self._clients: dict[str, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._reporting: asyncio.TimerHandle | None = None
        self._flushes: list[Subscription] = []  # waiting subscribers that have records
        self._flushing: asyncio.Handle | None = None

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start publishing; call in the running loop before the first subscriber."""
        self._loop = asyncio.get_running_loop()
        self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix="ledgermem-fanout")
        self._reporting = self._loop.call_later(METRICS_SECONDS, self._report)
        self.writer.add_listener(self._on_durable)
        # After the listener is in place: a batch counted here may also reach the listener,
        # and _publish skips what is not beyond the head.
        self.head = self.writer.size - 1

    async def close(self) -> None:
        """End every subscription (their streams finish cleanly) and stop publishing."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError):
            self.writer.remove_listener(self._on_durable)
        for subscription in list(self._subscriptions):
            subscription._end()
        if self._reporting is not None:
            self._reporting.cancel()
        if self._pool is not None:
            # Reads already queued still run (each is bounded): cancelling their futures would
            # cancel the adapter tasks awaiting them instead of letting them end cleanly.
            self._pool.shutdown(wait=False)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def subscriptions(self) -> list[Subscription]:
        return list(self._subscriptions)

    # ---- publishing --------------------------------------------------------------------------

    def _on_durable(self, records: list[Record]) -> None:
        """The writer thread, after a durable batch: one hand-over to the loop, no waiting."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(self._publish, records)

    def _publish(self, records: list[Record]) -> None:
        head = self.head
        if records[-1].seq <= head or self._closed:
            return
        if records[0].seq <= head:
            records = [r for r in records if r.seq > head]
        gap = records[0].seq != head + 1
        self.head = records[-1].seq
        if not self._subscriptions:
            return
        if gap:  # never expected; the log has what was missed, so everyone reads it there
            log.error("published records jump from %d to %d", head, records[0].seq)
            for subscription in list(self._subscriptions):
                subscription._overflow()
        items = [EncodedRecord.of(record) for record in records]
        for subscription in list(self._subscriptions):
            subscription._offer(items)

    def _flush_soon(self, subscription: Subscription) -> None:
        self._flushes.append(subscription)
        if self._flushing is None:
            # call_soon runs after every callback already ready, publishes included: those
            # that queued up while the loop was busy reach each subscriber as one write.
            assert self._loop is not None, "a hub publishes only once started"
            self._flushing = self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flushing = None
        flushes, self._flushes = self._flushes, []
        for subscription in flushes:
            subscription._flush()

    def _report(self) -> None:
        served: dict[tuple[str, str], int] = {}
        for subscription in self._subscriptions:
            subscription._report(served)
        self._count(served)
        if not self._closed and self._loop is not None:
            self._reporting = self._loop.call_later(METRICS_SECONDS, self._report)

    def _count(self, served: dict[tuple[str, str], int]) -> None:
        for (channel, source), n in served.items():
            self.metrics.served(channel, source, n)

    # ---- subscribing -------------------------------------------------------------------------

    def reserve(self, client: str) -> Slot:
        """Take one of `client`'s subscriber places; `TooManySubscribers` when it holds them all,
        `HubClosed` once the hub is closed."""
        if self._closed:
            raise _closed()
        held = self._clients.get(client, 0)
        if held >= self.per_client:
            raise TooManySubscribers(
                f"{client} already holds {held} subscriptions, the most one client may "
                "(max_subscribers_per_client); close one first"
            )
        self._clients[client] = held + 1
        return Slot(self, client)

    def _release(self, client: str) -> None:
        held = self._clients.get(client, 0) - 1
        if held > 0:
            self._clients[client] = held
        else:
            self._clients.pop(client, None)

    def subscribe(
        self,
        after: int,
        where: RecordFilter = MATCH_ALL,
        channel: str = "sse",
        *,
        client: str | None = None,
        slot: Slot | None = None,
        batch: int | None = None,
        stop_after: int | None = None,
    ) -> Subscription:
        """A subscriber at cursor `after` (records with seq > after, matching `where`).

        `client` (an address) takes one of its places, or pass a `slot` already reserved.
        `batch` bounds one delivery; `stop_after` ends the subscription at that seq. Raises a
        `FanoutError` (streams/fanout/fanout_errors.py) when the subscriber is refused: a
        cursor past the log's last record among them (`CursorBeyondHead`).
        """
        if self.refuse_beyond_head:
            # The hub's head may trail the writer by one hand-over: a client that has just
            # been answered a record's seq may resume from it.
            head = max(self.head, self.writer.size - 1)
            if after > head:
                raise CursorBeyondHead(
                    f"after={after} is beyond the head of the log ({head}): no record has that "
                    f"seq yet (a log restored from an older backup?); resume from at most {head}"
                )
        cursor = Cursor(
            after,
            self.head,
            where,
            max_records=self.max_records,
            max_bytes=self.max_bytes,
            batch=batch,
            stop_after=stop_after,
        )
        if slot is None and client is not None:
            slot = self.reserve(client)
        elif self._closed:
            raise _closed()
        subscription = Subscription(self, cursor, channel, slot)
        self._subscriptions[subscription] = None
        self.metrics.subscriber_added(channel)
        return subscription

    def _remove(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            del self._subscriptions[subscription]
            served: dict[tuple[str, str], int] = {}
            subscription._report(served)
            self._count(served)
            self.metrics.subscriber_removed(subscription.channel)
        if subscription._slot is not None:
            subscription._slot.release()

    # ---- reading the log ---------------------------------------------------------------------

    async def _read(self, action: ReadLog, where: RecordFilter) -> tuple[list[EncodedRecord], int]:
        loop = asyncio.get_running_loop()
        if self._pool is None:
            raise RuntimeError("Hub.start() was not called")
        try:
            return await loop.run_in_executor(self._pool, self._read_log, action, where)
        except RuntimeError:  # the pool was shut down: the hub is closing
            return [], action.after

    def _read_log(self, action: ReadLog, where: RecordFilter) -> tuple[list[EncodedRecord], int]:
        """In a worker thread: matching records with after < seq < until, within the bounds."""
        items: list[EncodedRecord] = []
        size = 0
        reached = action.after
        scan_end = action.after + SCAN_LIMIT
        match_all = where is MATCH_ALL
        # Every pool thread shares the one reader: its seek index has a lock, and is built once.
        for seq, line in self.reader.lines(action.after, action.until):
            reached = seq
            item = EncodedRecord.from_line(seq, line)
            if match_all or where.matches(item):
                items.append(item)
                size += len(line)
                if len(items) >= action.limit or size >= action.max_bytes:
                    break
            if seq >= scan_end:
                break
        return items, reached


def _closed() -> HubClosed:
    return HubClosed("the service is shutting down; reconnect shortly")
