"""Replay makes only the items that survive (sections/model/projection.py, "items made only for the
survivors"), and the offline commands start from the data directory's snapshots without leaving
time-travel checkpoints behind (replay/options.py, `open_history`)."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import suppress

import orjson
from helpers.cli import ledgermem

from replay.options import open_history
from sections.errors import NotAdmitted
from sections.model.config import MemoryConfig, SectionConfig
from sections.model.item import Item
from sections.runtime.memory import Memory
from sections.runtime.snapshot import snapshot_paths

CONFIG = MemoryConfig(
    sections=(
        SectionConfig("notes", 30, "lru", "durable"),
        SectionConfig("findings", 40, "priority", "durable"),
        SectionConfig("facts", 30, "lfu", "commit"),
        SectionConfig("messages", None, "none", "durable"),
        SectionConfig("scratch", None, "none", "turn"),
    )
)


def _busy_log(data) -> None:
    """Items read, updated, committed, removed and evicted after they were added, in batches and
    alone, so that replay makes some items early, some at the end and drops the others."""
    with Memory.open(data, config=CONFIG, seg_bits=4, snapshot_every=1 << 40) as mem:
        s, t = mem.session("s"), mem.session("t", tenant="other")
        for n in range(40):
            note = s.add("notes", f"note {n} " + "x" * (n % 7), tags=["n"])
            with suppress(NotAdmitted):  # ranks below a full section's residents
                s.add("findings", f"finding {n}", priority=n % 5)
            fact = s.add_many("facts", [{"content": f"fact {n}"}, {"content": f"more {n}"}])[0]
            t.add("notes", f"other {n}")
            s.add_many(
                "messages",
                [{"content": f"q {n}", "role": "user"}, {"content": f"a {n}", "role": "assistant"}],
            )
            s.add("scratch", f"scratch {n}")
            if n % 3 == 0:
                s.get("notes")  # lru order moves
                s.get("facts", [fact.id])  # lfu count of an item still live
            if n % 4 == 1:
                s.update("notes", note.id, content=f"note {n}, revised", priority=2)
                s.commit("facts")
            if n % 5 == 2:
                s.remove("findings", s.get("findings")[0].id)
                s.end_turn()
            if n == 20:
                mem.snapshot()


def _items_of(state) -> list:
    return [
        (key, name, item)
        for key, session in sorted(state.sessions.items())
        for name, section in session.sections.items()
        for item in section.items.values()
    ]


def test_a_replay_makes_every_surviving_item_exactly_as_the_live_fold_did(tmp_path):
    _busy_log(tmp_path)
    with Memory.open(tmp_path, config=CONFIG) as mem:
        live = mem.read(_items_of)
        head = mem.writer.size - 1
        for use_snapshots in (False, True):
            rebuilt = mem.rebuild(head, use_snapshots=use_snapshots)
            items = _items_of(rebuilt)
            assert all(type(item) is Item for _, _, item in items)  # none left unmade
            assert items == live  # same items, same fields, same (seq, k) order
            assert rebuilt.state_hash() == mem.state_hash()
        for at in (5, 77, head // 2, head - 9):  # time travel: checkpoints along the way
            mem.history.checkpoints.every = 16
            assert mem.state_at(at).state_hash() == mem.rebuild(at).state_hash(), at


def test_the_offline_history_leaves_no_checkpoints_and_folds_once_for_two_points(tmp_path):
    _busy_log(tmp_path)
    history = open_history(str(tmp_path / "log"), use_snapshots=False)
    head = history.reader.head()
    a, b = head // 3, head - 5
    one_fold = history.states_at([a, b])
    assert history.checkpoints.size_bytes == 0
    alone = [history.state_at(a), history.state_at(b)]
    assert [s.state_hash() for s in one_fold] == [s.state_hash() for s in alone]
    assert [s.seq for s in one_fold] == [a, b]


def test_state_starts_from_a_snapshot_only_if_the_log_holds_its_hash(tmp_path, caplog):
    _busy_log(tmp_path)  # snapshots: one mid-way, one at close
    log_dir = tmp_path / "log"
    oldest = snapshot_paths(tmp_path / "snapshots")[-1]
    snap_seq = int(oldest.stem.removeprefix("snap-"))
    at = snap_seq + 7

    history = open_history(str(log_dir))
    started_after = []
    lines = history.reader.lines

    def spy(after=-1, until=None):
        started_after.append(after)
        return lines(after, until)

    history.reader.lines = spy  # type: ignore[method-assign]
    from_snapshot = history.state_at(at)
    assert started_after[-1] == snap_seq  # the fold (the first: `get` of the snapshot's seq)
    assert from_snapshot.state_hash() == open_history(str(log_dir), False).state_at(at).state_hash()

    # The same bytes with another h: the log's record at that seq does not have it.
    digest, body = oldest.read_bytes().split(b"\n", 1)
    data = orjson.loads(body)
    data["h"] = "0" * 64
    body = orjson.dumps(data)
    oldest.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    history = open_history(str(log_dir))
    with caplog.at_level(logging.WARNING, logger="ledgermem.snapshot"):
        refused = history.state_at(at)
    assert "has another hash" in caplog.text
    assert refused.state_hash() == from_snapshot.state_hash()

    with_cli = ledgermem("state", log_dir, "--at", at)
    without = ledgermem("state", log_dir, "--at", at, "--no-snapshots")
    assert with_cli.returncode == without.returncode == 0, with_cli.stderr + without.stderr
    assert json.loads(with_cli.stdout) == json.loads(without.stdout)
    diff = ledgermem("diff", log_dir, "--from", snap_seq - 3, "--to", at)
    assert diff.returncode == 0, diff.stderr
    assert json.loads(diff.stdout)["sessions"]


def test_a_snapshot_older_than_an_erase_is_no_starting_point(tmp_path):
    with Memory.open(tmp_path, snapshot_every=1 << 40) as mem:
        s = mem.session("s")
        secret = s.add("findings", "the password is hunter2")
        for n in range(10):
            s.add("messages", f"message {n}")
        old = mem.snapshot()
        kept = {p.name: p.read_bytes() for p in (tmp_path / "snapshots").iterdir()}
        for n in range(5):
            s.add("messages", f"later {n}")
        at = mem.writer.size - 1
        s.erase([secret.id], reason="gdpr")
    # A crash between the erase's redaction and its purge of the snapshots leaves the old one.
    for name, data in kept.items():
        (tmp_path / "snapshots" / name).write_bytes(data)
    history = open_history(str(tmp_path / "log"))
    assert history.snapshot_floor > int(old.stem.removeprefix("snap-"))
    with_snapshots = ledgermem("state", tmp_path / "log", "--at", at)
    assert with_snapshots.returncode == 0, with_snapshots.stderr
    assert b"hunter2" not in with_snapshots.stdout
    without = ledgermem("state", tmp_path / "log", "--at", at, "--no-snapshots")
    assert json.loads(with_snapshots.stdout) == json.loads(without.stdout)
