"""Writing live records without waking the subscriber (docs/fanout.md, "Writing"): the hub's direct
writes and its subscribers' own deliveries together give every matching record once, in order,
whether the connection is ready or not; WebSocket frames encoded once are the frames `websockets`
builds; and over a real server a WebSocket without compression (pre-encoded frames, one write)
and one with permessage-deflate (the connection's encoder) get the segment file's exact bytes."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time

import pytest
from test_fanout_channels import (
    SPECIAL,
    add,
    head_of,
    matching,
    put_session,
    run,
    seq_of,
    server,  # noqa: F401  (the module's fixture: a real `ledgermem serve`)
    writer_client,
)
from test_hub import SESSIONS, entries, file_lines, log_dir, make_hub, writer  # noqa: F401
from websockets.asyncio.client import connect
from websockets.frames import Frame, Opcode

from eventstore.filters import MATCH_ALL, RecordFilter
from streams.fanout.hub import EncodedRecord, ws_text_frame


@pytest.mark.parametrize("size", [0, 1, 125, 126, 127, 65535, 65536, 70000])
def test_a_frame_encoded_once_is_the_frame_websockets_sends(size):
    payload = ("é" * size).encode()[:size]  # also a cut multi-byte character: bytes are bytes
    expected = Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])
    assert ws_text_frame(payload) == expected


class FakeWriter:
    """A connection that is sometimes ready; what it writes goes to the subscriber's list."""

    def __init__(self, got: list[bytes], rng: random.Random, ready: float) -> None:
        self.got, self.rng, self.chance, self.writes = got, rng, ready, 0

    def ready(self) -> bool:
        return self.rng.random() < self.chance

    def write(self, items: list[EncodedRecord]) -> None:
        self.writes += 1
        self.got.extend(item.line for item in items)


def test_direct_writes_and_wake_ups_together_deliver_each_record_once_in_order(writer, log_dir):  # noqa: F811
    rng = random.Random(15)
    writer.append_batch(entries(40, rng))

    async def subscriber(hub, seed: int, done: threading.Event):
        r = random.Random(seed)
        await asyncio.sleep(r.random() * 0.2)
        after = r.choice((-1, r.randint(-1, hub.head), hub.head))
        where = r.choice((MATCH_ALL, RecordFilter.of(session=r.choice(SESSIONS))))
        got: list[bytes] = []
        fake = FakeWriter(got, r, r.choice((0.0, 0.5, 1.0)))
        sub = hub.subscribe(after, where, "ws")
        sub.writer = fake
        while not (done.is_set() and sub.cursor.position >= writer.size - 1):
            delivery = await sub.next(timeout=0.1)
            got.extend(item.line for item in delivery.items)
            if r.random() < 0.2:
                await asyncio.sleep(0.005)  # busy elsewhere: publishes pile up (or overflow)
        sub.close()
        return after, where, got, fake

    async def main():
        hub = make_hub(writer, log_dir, subscriber_buffer=8)
        await hub.start()
        done = threading.Event()

        def write():
            w = random.Random(4)
            for _ in range(150):
                writer.append_batch(entries(w.randint(1, 6), w))
                # Paced over ~0.5 s: subscribers join within 0.2 s and must find live records
                # to be written to directly; unpaced, a fast writer is done before they join.
                time.sleep(0.003)
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        results = await asyncio.gather(*(subscriber(hub, seed, done) for seed in range(24)))
        thread.join()
        await hub.close()
        return results

    results = asyncio.run(main())
    lines = file_lines(log_dir)
    for after, where, got, _ in results:
        expected = [
            line
            for seq, line in lines
            if seq > after
            and (where is MATCH_ALL or where.matches(EncodedRecord.from_line(seq, line)))
        ]
        assert got == expected
    assert any(fake.writes for *_, fake in results if fake.chance == 1.0), "never written direct"
    assert not any(fake.writes for *_, fake in results if fake.chance == 0.0)


def test_a_subscriber_that_is_not_waiting_is_woken_not_written_to(writer, log_dir):  # noqa: F811
    async def main():
        hub = make_hub(writer, log_dir)
        await hub.start()
        got: list[bytes] = []
        sub = hub.subscribe(hub.head, MATCH_ALL, "ws")
        sub.writer = fake = FakeWriter(got, random.Random(1), 1.0)
        assert (await sub.next()).caught_up == hub.head  # the notice is the task's to send
        await writer.submit(entries(3, random.Random(2))).wait_async()
        # The writer calls its listeners before it wakes its callers: published by now, while
        # nobody waited in next().
        assert fake.writes == 0
        delivery = await sub.next()
        assert len(delivery.items) == 3
        waiting = asyncio.ensure_future(sub.next())
        await asyncio.sleep(0)  # it runs, finds nothing to do and waits
        await writer.submit(entries(2, random.Random(3))).wait_async()
        assert fake.writes == 1 and len(got) == 2 and not waiting.done()
        assert sub.delivered == hub.head
        sub.close()
        assert await waiting is None
        await hub.close()

    asyncio.run(main())


# ---- a real server ------------------------------------------------------------------------------


async def ws_lines(
    url: str, after: int, filters: dict, compression, count: int, live: asyncio.Event
) -> list[bytes]:
    """Every text frame, control messages included, until `count` records have come; `live` is
    set at the caught-up notice."""
    got: list[bytes] = []
    records = 0
    uri = "ws" + url.removeprefix("http") + "/v1/stream/ws"
    async with connect(uri, max_size=None, compression=compression) as ws:
        negotiated = ws.response.headers.get("Sec-WebSocket-Extensions")
        assert bool(negotiated) == (compression is not None)
        await ws.send(json.dumps({"after": after, "filter": filters}))
        async with asyncio.timeout(60):
            async for message in ws:
                assert isinstance(message, str), "records come as text frames"
                got.append(message.encode())
                if message.startswith('{"control"'):
                    live.set()
                    continue
                records += 1
                if records == count:
                    return got
    return got


@pytest.mark.parametrize("compression", [None, "deflate"])
def test_live_websockets_get_the_exact_bytes_with_and_without_compression(server, compression):  # noqa: F811
    """Without compression the frames go out as the hub encoded them, several per write; with
    permessage-deflate each goes through the connection's encoder. Both: the file's bytes."""
    session = f"writers/ws:{compression}"
    filters = {"session": [session]}
    contents = [SPECIAL, "x" * 200, "y" * 5000, {"n": 1.5}] * 15

    async def main():
        async with writer_client(server.url) as client:
            await put_session(client, session)
            start = await head_of(client)
            lives = [asyncio.Event() for _ in range(4)]
            streams = [
                asyncio.ensure_future(
                    ws_lines(server.url, start, filters, compression, len(contents), live)
                )
                for live in lives
            ]
            for live in lives:
                await asyncio.wait_for(live.wait(), 30)
            for content in contents:  # one at a time: a waiting subscriber is written to
                await add(client, session, "documents", content)
            return start, await asyncio.gather(*streams)

    start, got = run(main())
    expected = matching(server.data_dir, start, filters)
    assert len(expected) == len(contents)
    for messages in got:
        notice = json.loads(messages[0])  # the head at subscribing: the streams' own traces
        assert notice["control"] == "caught_up" and start <= notice["seq"] < seq_of(expected[0])
        assert messages[1:] == expected
