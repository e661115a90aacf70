"""The subscriber cursor, without sockets: under any interleaving of publishes, overflows and log
reads, a subscriber gets exactly the matching records after its cursor, in seq order, once."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore.filters import MATCH_ALL, RecordFilter
from streams.fanout.cursor import DONE, WAIT, CaughtUp, Cursor, ReadLog, Send


@dataclass(frozen=True)
class Item:
    seq: int
    tenant: str
    session: str
    section: str
    type: str
    line: bytes


def make_log(specs: list[tuple[str, str, int]]) -> list[Item]:
    return [
        Item(seq, "t", session, "sec", type_, b"x" * size)
        for seq, (session, type_, size) in enumerate(specs)
    ]


def answer(log: list[Item], read: ReadLog, where: RecordFilter, scan: int | None = None):
    """What the hub's log read returns: matching records in (after, until), within the bounds."""
    items, size, reached = [], 0, read.after
    for item in log[read.after + 1 : read.until]:
        reached = item.seq
        if where.matches(item):
            items.append(item)
            size += len(item.line)
            if len(items) >= read.limit or size >= read.max_bytes:
                break
        if scan is not None and reached - read.after >= scan:
            break
    return items, reached


def expected(log: list[Item], after: int, where: RecordFilter, stop: int | None = None):
    return [
        i.seq for i in log if i.seq > after and where.matches(i) and (stop is None or i.seq <= stop)
    ]


class Driver:
    """A hub in miniature: publishes records of `log` to one cursor and answers its reads."""

    def __init__(self, log: list[Item], published: int, cursor: Cursor) -> None:
        self.log, self.published, self.cursor = log, published, cursor
        self.delivered: list[int] = []
        self.sources: list[str] = []
        self.caught_up: list[int] = []
        self.pending: ReadLog | None = None
        self.last_answer: tuple | None = None
        self.done = False

    @property
    def head(self) -> int:
        return self.published - 1

    def publish(self, k: int) -> None:
        batch = self.log[self.published : self.published + k]
        self.published += len(batch)
        if batch:
            self.cursor.offer(batch)

    def step(self) -> object:
        action = self.cursor.next_action(self.head)
        if type(action) is Send:
            assert action.items, "a Send is never empty"
            for item in action.items:
                assert not self.delivered or item.seq > self.delivered[-1], "out of order"
                self.delivered.append(item.seq)
            self.sources.append(action.source)
        elif type(action) is ReadLog:
            assert action.after == self.cursor.position
            assert action.until <= self.published, "a read may only ask for published records"
            self.pending = action
        elif type(action) is CaughtUp:
            assert action.seq <= self.head
            self.caught_up.append(action.seq)
        elif action is DONE:
            self.done = True
        else:
            assert action is WAIT
        return action

    def complete(self, scan: int | None = None) -> None:
        if self.pending is not None:
            read, self.pending = self.pending, None
            items, reached = answer(self.log, read, self.cursor.filter, scan)
            self.last_answer = (read.after, items, reached)
            self.cursor.log_read(read.after, items, reached)

    def replay_stale(self) -> None:
        if self.last_answer is not None:
            self.cursor.log_read(*self.last_answer)

    def settle(self) -> None:
        """Publish everything, then run until the cursor waits with no read outstanding."""
        self.publish(len(self.log))
        for _ in range(10 * len(self.log) + 20):
            action = self.step()
            if self.pending is not None:
                self.complete()
            elif action is WAIT or action is DONE:
                return
        raise AssertionError("the cursor never settled")

    def check_bounds(self) -> None:
        c = self.cursor
        assert len(c._buffer) <= c.max_records
        assert len(c._buffer) <= 1 or c._buffered_bytes <= c.max_bytes
        assert len(c._outbox) <= c.max_records


filters = st.sampled_from(
    [
        MATCH_ALL,
        RecordFilter.of(session="a"),
        RecordFilter.of(session=["a", "b"], type="x"),
        RecordFilter.of(type="y"),
        RecordFilter.of(session="zzz"),
    ]
)


def run_ops(driver: Driver, rng: random.Random, steps: int, weights: list[int], check) -> None:
    """A random interleaving: publishes of random sizes, steps, log reads (some cut short by a
    scan limit) completing late, and stale answers replayed."""
    for _ in range(steps):
        op = rng.choices(("publish", "step", "complete", "stale"), weights)[0]
        if op == "publish":
            driver.publish(rng.choice((1, 1, 2, 3, 7)))
        elif op == "step":
            driver.step()
        elif op == "complete":
            driver.complete(scan=rng.choice((None, None, 1, 2, 3)))
        else:
            driver.replay_stale()
        check()


@settings(max_examples=500, deadline=None)
@given(
    n=st.integers(0, 80),
    data=st.data(),
    where=filters,
    max_records=st.integers(1, 12),
    max_bytes=st.integers(1, 40),
    batch=st.one_of(st.none(), st.integers(1, 5)),
    seed=st.integers(0, 2**32),
    steps=st.integers(0, 400),
    weights=st.lists(st.integers(1, 10), min_size=4, max_size=4),
)
def test_every_interleaving_delivers_exactly_the_matching_records_in_order(
    n, data, where, max_records, max_bytes, batch, seed, steps, weights
):
    rng = random.Random(seed)
    log = make_log([(rng.choice("abc"), rng.choice("xy"), rng.randint(1, 12)) for _ in range(n)])
    published = data.draw(st.integers(0, n), label="published at subscribe")
    after = data.draw(st.one_of(st.just(-1), st.integers(-1, n + 2)), label="after")
    stop = data.draw(st.one_of(st.none(), st.integers(-1, n + 2)), label="stop_after")
    cursor = Cursor(
        after,
        published - 1,
        where,
        max_records=max_records,
        max_bytes=max_bytes,
        batch=batch,
        stop_after=stop,
    )
    driver = Driver(log, published, cursor)
    want = expected(log, after, where, stop)

    def check() -> None:
        driver.check_bounds()
        assert driver.delivered == want[: len(driver.delivered)], "a gap or a duplicate"
        for seq in driver.caught_up:  # caught up at seq: everything up to it was delivered
            upto = [s for s in want if s <= seq]
            assert driver.delivered[: len(upto)] == upto

    run_ops(driver, rng, steps, weights, check)
    driver.settle()
    check()
    assert driver.delivered == want
    if stop is not None and stop < n:
        assert driver.done


def test_catch_up_hands_over_to_live_without_gap_or_overlap():
    log = make_log([("a", "x", 1)] * 20)
    cursor = Cursor(-1, 9, max_records=100)  # subscribed when the head was 9
    assert cursor.next_action(9) == ReadLog(-1, 10, 100, 1 << 20)
    cursor.offer(log[10:15])  # published while the log read runs
    cursor.log_read(-1, log[:10], 9)
    first = cursor.next_action(14)
    assert first == Send(log[:10], "log")
    assert cursor.next_action(14) == CaughtUp(9)
    assert cursor.next_action(14) == Send(log[10:15], "live")
    assert cursor.next_action(14) is WAIT
    assert cursor.live and cursor.position == 14


def test_a_subscriber_that_falls_behind_reads_the_log_then_returns_to_live():
    log = make_log([("a", "x", 1)] * 40)
    cursor = Cursor(4, 4, max_records=3)
    assert cursor.next_action(4) == CaughtUp(4)
    cursor.offer(log[5:25])  # more than the buffer holds: it is dropped, not grown
    assert cursor.buffered == 0 and cursor.overflows == 1 and not cursor.live
    read = cursor.next_action(24)
    assert read == ReadLog(4, 25, 3, 1 << 20)  # from the position up to the head of this moment
    cursor.offer(log[25:27])  # buffered again while reading
    for expected_batch in (log[5:8], log[8:11]):
        cursor.log_read(read.after, *answer(log, read, MATCH_ALL))
        assert cursor.next_action(26) == Send(expected_batch, "log")
        read = cursor.next_action(26)
    while type(read) is ReadLog:
        cursor.log_read(read.after, *answer(log, read, MATCH_ALL))
        assert type(cursor.next_action(26)) is Send
        read = cursor.next_action(26)
    assert read == CaughtUp(24)
    assert cursor.next_action(26) == Send(log[25:27], "live")
    assert cursor.position == 26


def test_the_buffer_is_bounded_by_bytes_but_always_takes_one_record():
    log = make_log([("a", "x", 100)] * 3)
    cursor = Cursor(-1, -1, max_records=10, max_bytes=50)
    cursor.offer(log[:1])
    assert cursor.buffered == 1  # a record bigger than the bound still gets through, alone
    cursor.offer(log[1:2])
    assert cursor.buffered == 0 and cursor.overflows == 1


def test_records_that_do_not_match_are_never_buffered_and_still_advance_the_position():
    log = make_log([("b", "x", 1)] * 10 + [("a", "x", 1)])
    cursor = Cursor(-1, -1, RecordFilter.of(session="a"), max_records=1)
    assert cursor.next_action(-1) == CaughtUp(-1)
    cursor.offer(log[:10])
    assert cursor.buffered == 0 and cursor.overflows == 0
    assert cursor.next_action(9) is WAIT and cursor.position == 9
    cursor.offer(log[10:])
    assert cursor.next_action(10) == Send([log[10]], "live")


def test_a_cursor_beyond_the_head_skips_records_up_to_it():
    log = make_log([("a", "x", 1)] * 10)
    cursor = Cursor(7, 2)
    assert cursor.next_action(2) == CaughtUp(2)
    cursor.offer(log[3:10])
    assert cursor.next_action(9) == Send(log[8:10], "live")


def test_stop_after_ends_at_the_head_of_the_request():
    log = make_log([("a", "x", 1)] * 10)
    cursor = Cursor(-1, 5, stop_after=5)
    read = cursor.next_action(5)
    assert read == ReadLog(-1, 6, 1024, 1 << 20)
    cursor.offer(log[6:10])  # later records are not part of this subscription
    cursor.log_read(-1, *answer(log, read, MATCH_ALL))
    assert cursor.next_action(9) == Send(log[:6], "log")
    assert cursor.next_action(9) is DONE


def test_a_stale_log_read_is_ignored():
    log = make_log([("a", "x", 1)] * 10)
    cursor = Cursor(-1, 9)
    read = cursor.next_action(9)
    items, reached = answer(log, read, MATCH_ALL)
    cursor.log_read(read.after, items, reached)
    cursor.log_read(read.after, items, reached)  # the same answer again: not a second delivery
    assert cursor.next_action(9) == Send(log, "log")
    assert cursor.next_action(9) == CaughtUp(9)
    assert cursor.next_action(9) is WAIT


def test_a_forced_overflow_rereads_the_gap_from_the_log():
    log = make_log([("a", "x", 1)] * 10)
    cursor = Cursor(4, 4)
    cursor.next_action(4)
    cursor.offer(log[5:7])
    cursor.overflow()
    assert cursor.next_action(9) == ReadLog(4, 10, 1024, 1 << 20)


def test_a_batch_bounds_each_delivery():
    log = make_log([("a", "x", 1)] * 10)
    cursor = Cursor(-1, -1, batch=4)
    cursor.next_action(-1)
    cursor.offer(log)
    assert [len(cursor.next_action(9).items) for _ in range(3)] == [4, 4, 2]


@pytest.mark.parametrize("bad", [-2, -5])
def test_a_cursor_below_minus_one_is_refused(bad):
    with pytest.raises(ValueError):
        Cursor(bad, 0)
