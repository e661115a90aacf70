"""Issue 13, items 1 and 3: a transient I/O error stops writes only while its cause lasts.

The faults are the kernel's, not mocks: a real `ledgermem serve` whose RLIMIT_NOFILE is lowered
with prlimit(2) runs out of file descriptors (EMFILE) when 400 half-sent connections pin them;
a data directory on a 2 MiB tmpfs fills up (ENOSPC) through the API. After the cause goes away,
writes must be taken again within about a second, every acknowledged record must be in the files,
and the live state must equal the state rebuilt from the log.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from server import Server

from eventstore.reader import LogReader
from sections import reads
from sections.history import History
from sections.memory import Memory

S = "heal"
ITEMS = f"/v1/sessions/{S}/sections/documents/items"
HEALED_WITHIN = 1.5  # seconds after the cause goes: 1 s wanted, slack for a loaded machine


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "2m"):
    """A real small file system, so that a full disk is the kernel's ENOSPC."""
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        why = f"cannot mount a tmpfs here: {done.stderr.decode().strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _post(client: httpx.Client, content: str) -> httpx.Response:
    return client.post(ITEMS, json={"content": content})


def _acknowledged(response: httpx.Response, acked: dict[int, dict]) -> None:
    record = response.json()["record"]
    acked[record["seq"]] = record["payload"]


def _wait_until_written(client: httpx.Client, acked: dict, label: str) -> float:
    """POST until one is taken; the seconds it took."""
    started = time.monotonic()
    while True:
        response = _post(client, f"after {label}")
        if response.status_code == 201:
            _acknowledged(response, acked)
            return time.monotonic() - started
        assert response.status_code in (503, 507), response.text
        assert time.monotonic() - started < 30, f"writes never came back: {response.text}"
        time.sleep(0.05)


def _assert_log_holds(data: Path, acked: dict[int, dict], live_stats: dict) -> None:
    """Every acknowledged record is in the files, and the live state is the log's."""
    reader = LogReader(data / "log")
    by_seq = {record.seq: record for record in reader.records(after=-1)}
    for seq, payload in acked.items():
        assert seq in by_seq, f"acknowledged seq {seq} is missing from the log"
        assert by_seq[seq].payload == payload, f"seq {seq} holds another record"
    state = History(reader).state_at(max(by_seq))
    assert live_stats == reads.stats(state, "default", None)


def test_running_out_of_file_descriptors_stops_writes_only_while_it_lasts(tmp_path):
    data = tmp_path / "d"
    with Server(data, "--seg-bits", "4") as server:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE, (256, hard))
        host, port = server.url.removeprefix("http://").split(":")
        acked: dict[int, dict] = {}
        # A connection opened before the flood: the one the service can still answer on.
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.put(f"/v1/sessions/{S}", json={}).status_code in (200, 201)
            flood = []
            for _ in range(400):
                sock = socket.create_connection((host, int(port)))
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never finished
                flood.append(sock)
            try:
                refused = None
                deadline = time.monotonic() + 3
                while time.monotonic() < deadline:
                    response = _post(client, "during the flood")
                    if response.status_code == 201:
                        _acknowledged(response, acked)
                    else:
                        refused = response
                    time.sleep(0.2)
                assert refused is not None, "the writer never ran out of file descriptors"
                assert refused.status_code == 503
                assert refused.json()["error"]["code"] == "too_many_open_files"
                ready = client.get("/readyz")
                assert ready.status_code == 503
                assert "writes are refused" in ready.json()["error"]["message"]
                assert client.get("/healthz").status_code == 200, "healthz stays liveness"
            finally:
                for sock in flood:
                    sock.close()
            took = _wait_until_written(client, acked, "the flood")
            assert took < HEALED_WITHIN, f"writes came back {took:.2f} s after the cause went"
            for n in range(5):
                response = _post(client, f"later {n}")
                assert response.status_code == 201, response.text
                _acknowledged(response, acked)
            assert client.get("/readyz").status_code == 200
            metrics = client.get("/metrics").text
            assert _sample(metrics, "ledgermem_write_failures_total") >= 1
            assert _sample(metrics, "ledgermem_log_reopens_total") >= 1
            live_stats = client.get("/v1/stats").json()
        assert server.stop() == 0
    _assert_log_holds(data, acked, live_stats)


def test_a_full_disk_answers_507_disk_full_and_writes_resume_once_space_is_freed(tmp_path):
    disk = tmp_path / "disk"
    with small_tmpfs(disk):
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (512 * 1024))
        data = disk / "d"
        acked: dict[int, dict] = {}
        with Server(data) as server, httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.put(f"/v1/sessions/{S}", json={}).status_code in (200, 201)
            filler = "x" * 30_000
            for n in range(200):
                response = _post(client, f"{n} {filler}")
                if response.status_code != 201:
                    break
                _acknowledged(response, acked)
            else:
                pytest.fail("the disk never filled up")
            assert response.status_code == 507, response.text
            assert response.json()["error"]["code"] == "disk_full"
            time.sleep(0.5)  # the service keeps trying to reopen: it must keep refusing
            again = _post(client, "still full")
            assert again.status_code == 507 and again.json()["error"]["code"] == "disk_full"
            ready = client.get("/readyz")
            assert ready.status_code == 503 and ready.json()["error"]["code"] == "disk_full"

            ballast.unlink()
            took = _wait_until_written(client, acked, "the disk was freed")
            assert took < HEALED_WITHIN, f"writes came back {took:.2f} s after space was freed"
            assert client.get("/readyz").status_code == 200
            live_stats = client.get("/v1/stats").json()
            assert server.stop() == 0
        _assert_log_holds(data, acked, live_stats)


def test_memory_heal_rebuilds_the_state_from_the_log_and_listeners_see_no_gap(tmp_path):
    disk = tmp_path / "disk"
    with small_tmpfs(disk):
        ballast = disk / "ballast"
        ballast.write_bytes(b"\0" * (512 * 1024))
        memory = Memory.open(disk / "d")
        published: list[int] = []
        memory.writer.add_listener(lambda records: published.extend(r.seq for r in records))
        try:
            session = memory.session("s")
            acked = 0
            with pytest.raises(Exception) as failed:
                for n in range(500):
                    session.add("documents", f"{n} " + "y" * 30_000)
                    acked += 1
            assert type(failed.value).__name__ == "WriterClosed"
            assert isinstance(failed.value.cause, OSError) and failed.value.cause.errno == 28
            # Live state held the record the log dropped: no read may answer from it now.
            with pytest.raises(Exception, match="failed write"):
                memory.stats()
            with pytest.raises(OSError):
                memory.heal()  # the disk is still full
            ballast.unlink()
            assert memory.heal() is True
            assert memory.failure is None
            assert memory.stats()["items"] == acked, "no item the log lost is counted"
            rebuilt = memory.rebuild()
            assert memory.read(lambda state: state.state_hash()) == rebuilt.state_hash()
            session.add("documents", "after the heal")
            memory.writer.wait_for(memory.writer.size - 1)
            time.sleep(0.1)
            in_log = [r.seq for r in memory.reader.records(after=-1)]
            first = published[0]
            assert published == in_log[in_log.index(first) :], "no gap and no duplicate"
        finally:
            with contextlib.suppress(OSError):  # the final snapshot may not fit on the disk
                memory.close()


def _sample(exposition: str, name: str) -> float:
    for line in exposition.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in /metrics")
