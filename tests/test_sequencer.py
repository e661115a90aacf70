"""The sequencer decides every byte with no I/O; any sink stores the same bytes.

Most tests here feed the Sequencer entries and check its lines against the spec (docs/format.md
sections 3 to 6) as bytes alone. One writes its output through a tiny local loop into a
directory and has the offline verifier judge it; the golden tests run the same inputs through
the sequencer, LogWriter with the file sink, and LogWriter with the in-memory sink.
"""

from __future__ import annotations

import base64
import hashlib

import orjson
import pytest

from eventstore import layout
from eventstore.checkpoint import SigningKey, parse_checkpoint
from eventstore.entry import Entry
from eventstore.memory_sink import MemorySink
from eventstore.merkle import CompactRange, root
from eventstore.record import genesis, payload_digest, record_hash
from eventstore.sequencer import AppendLines, Sequencer, SequencerState, StartSegment
from eventstore.verify import INTACT_UNANCHORED, VALID_LOCAL, verify_log
from eventstore.writer import Durability, LogWriter
from tests.helpers.reproducible import FIXED_NS, CountingSalts


@pytest.fixture(scope="module")
def key():
    return SigningKey.generate("test.local/sequencer")


def _sequencer(key, seg_bits: int) -> Sequencer:
    state = SequencerState.empty(key.origin, seg_bits)
    return Sequencer(key, state, clock=lambda: FIXED_NS, salts=CountingSalts())


def _entries(count: int, start: int = 0) -> list[Entry]:
    return [
        Entry("acme", f"s-{n % 3}", "messages", "item.added", {"n": n, "text": f"note {n}"})
        for n in range(start, start + count)
    ]


def _run(key, seg_bits: int, batches: list[int]) -> tuple[list[object], list[bytes]]:
    """The header, then one `assign` per batch size: (operations, every line in order)."""
    sequencer = _sequencer(key, seg_bits)
    ops: list[object] = [sequencer.header(sequencer.now())]
    done = 0
    for size in batches:
        more, _ = sequencer.assign(_entries(size, done), sequencer.now())
        ops.extend(more)
        done += size
    return ops, _lines_of(ops)


def _lines_of(ops: list[object]) -> list[bytes]:
    lines: list[bytes] = []
    for op in ops:
        if isinstance(op, StartSegment):
            lines.append(op.line)
        else:
            assert isinstance(op, AppendLines)
            lines.extend(op.lines)
    return lines


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962's Merkle Tree Hash, written from the RFC's definition."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def test_each_record_chains_to_the_one_before_and_its_hashes_follow_the_spec(key):
    _, lines = _run(key, 3, [1, 5, 2, 9, 1])
    prev = genesis(key.origin)
    for seq, line in enumerate(lines):
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        obj = orjson.loads(line)
        assert obj["seq"] == seq
        assert obj["ts"] == FIXED_NS // 1000
        assert obj["prev"] == prev.hex()
        salt = bytes.fromhex(obj["salt"])
        pd = payload_digest(salt, orjson.dumps(obj["payload"], option=orjson.OPT_SORT_KEYS))
        assert obj["pd"] == pd.hex()
        fields = (obj["tenant"], obj["session"], obj["section"], obj["type"])
        h = record_hash(prev, seq, obj["ts"], *fields, pd)
        assert obj["h"] == h.hex()
        prev = h


@pytest.mark.parametrize("seg_bits", [2, 3])
def test_seal_and_open_sit_at_the_last_and_first_seq_of_every_segment(key, seg_bits):
    size = 1 << seg_bits
    ops, lines = _run(key, seg_bits, [1, 2, 7, 1, 13, 3])
    assert len(lines) > 4 * size
    for seq, line in enumerate(lines):
        obj = orjson.loads(line)
        control = obj["tenant"] == "_log"
        assert (control and obj["type"] == "segment.open") == (seq % size == 0), seq
        assert (control and obj["type"] == "segment.seal") == (seq % size == size - 1), seq
    starts = [op for op in ops if isinstance(op, StartSegment)]
    assert [op.number for op in starts] == list(range(len(starts)))
    assert [op.record.seq for op in starts] == [n * size for n in range(len(starts))]


@pytest.mark.parametrize("seg_bits", [2, 3])
def test_embedded_checkpoint_signs_exactly_the_records_before_the_open(key, seg_bits):
    ops, lines = _run(key, seg_bits, [3, 11, 6])
    leaves = [bytes.fromhex(orjson.loads(line)["h"]) for line in lines]
    starts = [op for op in ops if isinstance(op, StartSegment)][1:]
    assert starts
    for op in starts:
        seq = op.record.seq
        payload = orjson.loads(op.line)["payload"]
        assert payload["checkpoint"] == op.checkpoint
        checkpoint = parse_checkpoint(op.checkpoint, key.vkey)
        assert checkpoint.size == seq
        assert checkpoint.root == _mth(leaves[:seq])


@pytest.mark.parametrize("seg_bits", [2, 3])
def test_open_names_the_sealed_segments_root_and_the_seal_the_log_root(key, seg_bits):
    size = 1 << seg_bits
    _, lines = _run(key, seg_bits, [9, 4, 8])
    leaves = [bytes.fromhex(orjson.loads(line)["h"]) for line in lines]
    for seq, line in enumerate(lines):
        payload = orjson.loads(line)["payload"]
        if seq % size == 0 and seq > 0:
            sealed = leaves[seq - size : seq]
            assert base64.b64decode(payload["prev_segment_root"]) == _mth(sealed)
        if seq % size == size - 1:
            assert base64.b64decode(payload["root"]) == _mth(leaves[:seq])


def test_lines_written_by_a_plain_loop_pass_the_offline_verifier(tmp_path, key):
    """The sequencer's output is a whole valid log: only storing it is left to a sink."""
    sequencer = _sequencer(key, 2)
    ops: list[object] = [sequencer.header(sequencer.now())]
    for size in (1, 4, 2, 6):
        ops.extend(sequencer.assign(_entries(size), sequencer.now())[0])
    ops.extend(sequencer.assign([Entry.control("log.close", {})], sequencer.now())[0])
    segment = None
    for op in ops:  # the whole of a "sink": one file per segment, lines appended in order
        if isinstance(op, StartSegment):
            segment = tmp_path / layout.segment_name(op.number)
            segment.write_bytes(op.line)
            if op.checkpoint is not None:
                (tmp_path / layout.CHECKPOINT).write_text(op.checkpoint)
        else:
            with open(segment, "ab") as f:
                f.write(b"".join(op.lines))
    report = verify_log(tmp_path, str(key.vkey))
    assert report.error is None
    assert report.verdict in (VALID_LOCAL, INTACT_UNANCHORED)
    assert report.records == sequencer.size == len(_lines_of(ops))


def test_a_sequencer_restored_from_a_state_continues_the_same_chain(key):
    _, lines = _run(key, 2, [5, 6])
    salts = CountingSalts()
    first = Sequencer(key, SequencerState.empty(key.origin, 2), clock=lambda: FIXED_NS, salts=salts)
    first.header(first.now())
    first.assign(_entries(5), first.now())
    second = Sequencer(key, first.state(), clock=lambda: FIXED_NS, salts=salts)
    ops, _ = second.assign(_entries(6, 5), second.now())
    assert b"".join(_lines_of(ops)) == b"".join(lines[first.size :])


# ---- the golden tests: one sequence of bytes whatever the sink --------------------------------

BATCHES = [1, 3, 1, 7, 2, 9, 1]  # crosses several segment boundaries at seg_bits 2 and 3


def _through_writer(writer: LogWriter) -> None:
    done = 0
    for size in BATCHES:
        writer.append_batch(_entries(size, done))
        done += size
    writer.close()


def _golden(key, seg_bits: int) -> bytes:
    """The bytes of BATCHES through the sequencer alone, ending as LogWriter.close() does."""
    sequencer = _sequencer(key, seg_bits)
    ops: list[object] = [sequencer.header(sequencer.now())]
    done = 0
    for size in BATCHES:
        ops.extend(sequencer.assign(_entries(size, done), sequencer.now())[0])
        done += size
    ops.extend(sequencer.assign([Entry.control("log.close", {})], sequencer.now())[0])
    return b"".join(_lines_of(ops))


@pytest.mark.parametrize("seg_bits", [2, 3])
def test_golden_the_file_sink_stores_exactly_the_sequencers_bytes(tmp_path, key, seg_bits):
    writer = LogWriter.open(
        tmp_path / "log",
        key,
        seg_bits=seg_bits,
        durability=Durability.UNSAFE_NO_FSYNC,
        clock=lambda: FIXED_NS,
        salts=CountingSalts(),
    )
    _through_writer(writer)
    files = layout.list_segments(tmp_path / "log")
    stored = b"".join(path.read_bytes() for _, path in files)
    assert stored == _golden(key, seg_bits)


@pytest.mark.parametrize("seg_bits", [2, 3])
def test_golden_the_memory_sink_stores_exactly_the_sequencers_bytes(key, seg_bits):
    sink = MemorySink()
    writer = LogWriter.create_on(
        sink, key, seg_bits=seg_bits, clock=lambda: FIXED_NS, salts=CountingSalts()
    )
    _through_writer(writer)
    assert b"".join(sink.lines) == _golden(key, seg_bits)
    assert sink.closed
    committed = [line for batch in sink.batches for line in batch.lines]
    assert len(committed) + len(sink.segment_starts) == len(sink.lines)


def test_golden_bytes_do_not_depend_on_the_salts_being_random(key):
    """The golden tests could not fail if the writer ignored the salts passed in."""
    with_fixed = _golden(key, 3)
    assert with_fixed == _golden(key, 3)
    sink = MemorySink()
    writer = LogWriter.create_on(sink, key, seg_bits=3, clock=lambda: FIXED_NS)
    _through_writer(writer)
    assert b"".join(sink.lines) != with_fixed
    assert len(sink.lines) == with_fixed.count(b"\n")


# ---- one Merkle range: the roots the format names ----------------------------------------------

BATCH_EVENT = ("acme", "s-1", "messages", "item.added")


def test_the_tail_of_a_compact_range_is_the_range_of_its_last_leaves():
    leaves = [hashlib.sha256(b"%d" % n).digest() for n in range(70)]
    for bits in (2, 3, 4):
        size_s = 1 << bits
        tree = CompactRange()
        for n, leaf in enumerate(leaves):
            tree.append(leaf)
            start = (n + 1 - 1) // size_s * size_s  # the segment the last leaf is in
            if (n + 1) % size_s:  # the segment is not full: its leaves are a tail of the range
                tail = tree.tail(start)
                assert tail.size == n + 1 - start
                assert tail.root() == root(leaves[start : n + 1])
    with pytest.raises(ValueError):
        tree.tail(3)  # not where one of its subtrees begins


def _sealed_state(key, seg_bits: int, segments: int):
    """A sequencer's lines up to the seal of segment `segments - 1`, and the state recovery
    builds when the crash came before the next segment.open (the last segment full)."""
    sequencer = Sequencer(
        key,
        SequencerState.empty(key.origin, seg_bits),
        clock=lambda: FIXED_NS,
        salts=CountingSalts(),
    )
    lines = [sequencer.header(sequencer.now()).line]
    size_s = 1 << seg_bits
    for op in sequencer.assign(
        [Entry(*BATCH_EVENT, {"n": n}) for n in range(segments * size_s)], sequencer.now()
    )[0]:
        lines += [op.line] if isinstance(op, StartSegment) else op.lines
    lines = lines[: segments * size_s]  # through the last seal: its open is lost
    assert b'"segment.seal"' in lines[-1]
    leaves = [bytes.fromhex(orjson.loads(line)["h"]) for line in lines]
    tree, segment_tree = CompactRange(), CompactRange()
    for leaf in leaves:
        tree.append(leaf)
    for leaf in leaves[-size_s:]:
        segment_tree.append(leaf)
    state = SequencerState(seg_bits, len(leaves), leaves[-1], segments - 1, tree, segment_tree)
    return state, leaves


@pytest.mark.parametrize("segments", [1, 2, 3, 4])
def test_resuming_after_a_full_sealed_segment_opens_the_next_with_its_root(key, segments):
    seg_bits = 2
    state, leaves = _sealed_state(key, seg_bits, segments)
    sequencer = Sequencer(key, state, clock=lambda: FIXED_NS, salts=CountingSalts())
    last = (segments - 1) << seg_bits
    assert sequencer.state().segment_tree.root() == root(leaves[last:])
    ops, _ = sequencer.resume(sequencer.now(), {"clean": False}, None)
    opened = orjson.loads(ops[0].line)["payload"]
    assert base64.b64decode(opened["prev_segment_root"]) == root(leaves[last:])
    assert parse_checkpoint(opened["checkpoint"], key.vkey).root == root(leaves)
    # From here on the segment tree is the tail of the log's range again.
    assert sequencer.state().segment_tree.size == 2  # the open and log.resume
