"""Memory.open_on: a memory over a writer someone else opened, reading the log from one
directory and keeping its caches in another (what a partition leader does with its PgSink and
its mirror; here a file writer stands in for the sink, the code path after the writer is one)."""

from __future__ import annotations

import pytest

from eventstore.checkpoint import SigningKey
from eventstore.errors import InvalidInput
from eventstore.writer import LogWriter
from sections.runtime.memory import Memory


def test_open_on_loads_like_open_and_keeps_its_caches_apart(tmp_path):
    key = SigningKey.generate("test.local/open-on")
    log_dir, caches = tmp_path / "log", tmp_path / "caches"
    with Memory.open_on(LogWriter.open(log_dir, key, seg_bits=4), log_dir, caches) as memory:
        session = memory.session("s")
        for n in range(40):
            session.add("findings", f"finding {n}")
        live = memory.state_hash()
    assert list((caches / "snapshots").glob("snap-*.json"))  # its snapshot, beside no log
    assert not (caches / "log").exists()
    again = Memory.open_on(LogWriter.open(log_dir, key, seg_bits=4), log_dir, caches)
    with again:
        assert again.state_hash() == live
        assert again.rebuild(use_snapshots=False).state_hash() == live
        assert again.search_index_source == "snapshot"


def test_a_refused_option_closes_the_writer_it_was_given(tmp_path):
    key = SigningKey.generate("test.local/open-on")
    writer = LogWriter.open(tmp_path / "log", key)
    with pytest.raises(InvalidInput):
        Memory.open_on(writer, tmp_path / "log", tmp_path / "caches", dedup_window_us=-1)
    assert writer.closed
