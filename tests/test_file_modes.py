"""Issue 13 item 6: everything ledgermem writes is readable by its owner only.

Files are 0600 and directories 0700 (eventstore/filemodes.py) under a permissive umask too; the
key is written all or nothing; a data directory written with open modes (as earlier versions
did) still opens, keeping the modes its old files have.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import httpx
import pytest
from helpers.cli import ledgermem
from server import Server

from eventstore import layout
from eventstore.atomic import temporary_path, write_atomically
from eventstore.checkpoint import SigningKey
from eventstore.filemodes import DIR_MODE, FILE_MODE
from eventstore.store import open_log
from eventstore.writer import Durability, LogWriter
from replay.mirror import Mirror
from sections.runtime.memory import Memory


@pytest.fixture(autouse=True)
def permissive_umask():
    """The common default: without the project's own modes, files would come out 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def modes_under(root: Path) -> dict[str, int]:
    found = {".": mode(root)}
    for where, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(where, name)
            found[str(path.relative_to(root))] = mode(path)
    return found


def assert_private(root: Path) -> dict[str, int]:
    found = modes_under(root)
    wrong = {
        name: oct(m)
        for name, m in found.items()
        if m != (DIR_MODE if (root / name).is_dir() else FILE_MODE)
    }
    assert not wrong, f"not 0600 files in 0700 directories under {root}: {wrong}"
    return found


def test_after_a_service_run_every_file_is_0600_and_every_directory_0700(tmp_path):
    data = tmp_path / "data"
    with Server(data, "--seg-bits", "4", "--unsafe-no-fsync") as srv:
        url = srv.url
        assert httpx.put(url + "/v1/sessions/s").status_code == 201
        added = [
            httpx.post(url + "/v1/sessions/s/sections/findings/items", json={"content": f"f {i}"})
            for i in range(40)
        ]
        assert {a.status_code for a in added} == {201}
        # A read from inside a full segment saves its seek index under DATA/index/.
        assert httpx.get(url + "/v1/events", params={"after": 5}).status_code == 200
        assert httpx.get(url + "/v1/search", params={"q": "f"}).status_code == 200
        erased = httpx.post(
            url + "/v1/sessions/s/erase",
            json={"ids": [added[0].json()["item"]["id"]], "reason": "test"},
        )
        assert erased.status_code == 200, erased.text  # rewrites a segment, purges snapshots
        assert srv.stop() == 0  # the final snapshot and checkpoint
    found = assert_private(data)
    for expected in ("keys/signing.key", "keys/origin", "log/LOCK", "log/checkpoint"):
        assert expected in found
    kinds = {name.split("/")[0] + "/" + Path(name).suffix for name in found}
    for kind in ("log/.jsonl", "index/.idx", "snapshots/.json", "snapshots/.db"):
        assert kind in kinds, (kind, sorted(found))

    out = tmp_path / "copy"
    copied = ledgermem("backup", "--data", data, out)
    assert copied.returncode == 0, copied.stderr
    assert "keys/signing.key" in assert_private(out)


def test_a_quarantined_crash_leftover_is_private(tmp_path):
    key = SigningKey.generate("modes.example/log")
    log = LogWriter.open(tmp_path / "log", key, durability=Durability.UNSAFE_NO_FSYNC)
    log.append("t", "s", "x", "a", {"n": 1})
    log.close()
    last = layout.list_segments(tmp_path / "log")[-1][1]
    with open(last, "ab") as f:
        f.write(b'{"v":1,"seq":99,"ts"')  # a torn write: bytes after the last newline
    LogWriter.open(tmp_path / "log", key, durability=Durability.UNSAFE_NO_FSYNC).close()
    quarantined = tmp_path / "log" / layout.QUARANTINE
    assert quarantined.is_dir() and any(quarantined.iterdir())
    assert_private(tmp_path / "log")


def test_an_atomic_file_is_private_even_over_a_leftover_tmp_with_open_modes(tmp_path):
    target = tmp_path / "file"
    leftover = temporary_path(target)
    leftover.write_bytes(b"half")
    os.chmod(leftover, 0o644)
    write_atomically(target, b"whole")
    assert target.read_bytes() == b"whole" and mode(target) == FILE_MODE
    assert not leftover.exists()


def test_the_key_is_created_whole_private_and_never_replaced(tmp_path):
    path = tmp_path / "keys" / "signing.key"
    path.parent.mkdir(mode=0o700)
    temporary_path(path).write_bytes(b"a torn key from a crash")
    key = SigningKey.generate("modes.example/log")
    key.save(path)
    assert mode(path) == FILE_MODE and not temporary_path(path).exists()
    assert SigningKey.load(path, key.origin).vkey == key.vkey
    with pytest.raises(FileExistsError):
        SigningKey.generate("modes.example/log").save(path)
    assert SigningKey.load(path, key.origin).vkey == key.vkey


def test_an_older_data_directory_with_open_modes_still_opens(tmp_path, caplog):
    data = tmp_path / "data"
    with Memory.open(data, durability=Durability.UNSAFE_NO_FSYNC) as m:
        m.session("s").add("findings", "before")
    # What an earlier version left: 0755 directories, 0644 files (the key was always 0600).
    for name, _ in modes_under(data).items():
        path = data / name
        if path.is_dir():
            os.chmod(path, 0o755)
        elif path.name != "signing.key":
            os.chmod(path, 0o644)
    segment = data / "log" / layout.segment_name(0)
    caplog.set_level(logging.WARNING, logger="eventstore.store")
    with Memory.open(data, durability=Durability.UNSAFE_NO_FSYNC) as m:
        s = m.session("s")
        s.add("findings", "after")
        assert [i.content for i in s.get("findings")] == ["before", "after"]
        snapshot = m.snapshot()
    # Existing files and directories keep their modes (docs/service.md); what is written from
    # now on is private: the replaced checkpoint, the new snapshot and its attachment.
    assert mode(segment) == 0o644 and mode(data / "log") == 0o755
    assert f"chmod -R go= {data}" in caplog.text  # and the operator is told how to change that
    assert mode(data / "log" / layout.CHECKPOINT) == FILE_MODE
    assert mode(snapshot) == FILE_MODE
    assert {mode(p) for p in snapshot.parent.glob(snapshot.stem + ".*")} == {FILE_MODE}


def test_a_mirror_is_private(tmp_path):
    writer, _ = open_log(tmp_path / "source", seg_bits=3)
    for k in range(20):
        writer.append("default", "s", "notes", "x.y", {"k": k})
    writer.close()
    log_dir = tmp_path / "source" / "log"
    lines = b"".join(path.read_bytes() for _, path in layout.list_segments(log_dir)).splitlines()
    mirror = Mirror.open(tmp_path / "mirror")
    mirror.append(lines)
    assert mirror.install_checkpoint((log_dir / layout.CHECKPOINT).read_text())
    mirror.close()
    found = assert_private(tmp_path / "mirror")
    assert layout.CHECKPOINT in found and layout.segment_name(2) in found
