"""One replica per data directory, and /readyz saying when the background verifier failed
(issue 30, item 6).

Two `ledgermem serve --store` processes on one `--data` both ran and both fed the same mirror
files: every line twice, streams serving duplicates, the background verifier failed while
/readyz said ready. A replica now holds each mirror's LOCK as a file-mode writer holds its log's,
so the second one refuses to start (one line, exit 2); and /readyz answers 503 naming a failed
verifier. Real `ledgermem serve` processes, one fresh database per test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from eventstore import layout
from tests.helpers.pg import pg_url  # noqa: F401  (the fixture)
from tests.helpers.replicas import leading, make_replicas, replica, wait_until
from tests.server import ROOT, Server


def serve_alone(data, url: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`ledgermem serve --store` on `data`, expected to refuse: its exit code and output.
    A replica that starts anyway is killed once the timeout passes (its run is then returned
    with exit code None in `returncode`'s place: -9)."""
    command = [sys.executable, "-m", "ledgermem_cli", "serve", "--data", str(data), "--port",
               "0", "--store", url, "--lease-seconds", "1"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def session_puts(server, prefix: str, n: int) -> None:
    with httpx.Client(timeout=10) as client:
        for i in range(n):
            response = client.put(f"{server.url}/v1/sessions/{prefix}{i}")
            assert response.status_code in (200, 201), response.text


def mirror_lines(data) -> list[bytes]:
    log_dir = data / "partitions" / "p0" / "log"
    return [
        line for _, path in layout.list_segments(log_dir) for line in path.read_bytes().splitlines()
    ]


def test_a_second_replica_on_one_data_directory_refuses_to_start(pg_url, tmp_path):  # noqa: F811
    _, (data,) = make_replicas(pg_url, tmp_path, 1)
    with replica(data, pg_url, 1.0) as first:
        wait_until(lambda: leading(first) == {0}, what="the first replica to lead p0")
        session_puts(first, "a", 3)
        second = serve_alone(data, pg_url, timeout=20)
        assert second.returncode == 2, (second.returncode, second.stdout, second.stderr)
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert lines[0].startswith("ledgermem serve: "), lines
        assert str(data) in lines[0] and "another replica" in lines[0], lines
        assert f"pid={first.proc.pid}" in lines[0], lines  # names the holder
        assert "listening on" not in second.stdout
        # The first replica is untouched: it writes on, its mirror holds each record once and
        # its verifier follows it.
        session_puts(first, "b", 3)

        def verified() -> bool:
            status = httpx.get(first.url + "/v1/log/status", timeout=5).json()
            partition = status["partitions"][0]
            verifier = partition["verifier"]
            head = partition["head"]
            return verifier["state"] == "ok" and verifier["verified_through"] == head >= 6

        wait_until(verified, 30, "the first replica's verifier to pass its records")
        seqs = [line.split(b'"seq":')[1].split(b",")[0] for line in mirror_lines(data)[1:]]
        assert len(seqs) == len(set(seqs)), "a record is in the mirror twice"
        assert httpx.get(first.url + "/readyz", timeout=5).status_code == 200
    # Once the first one stopped, the directory is free again.
    with replica(data, pg_url, 1.0) as again:
        wait_until(lambda: leading(again) == {0}, what="the restarted replica to lead p0")


def test_readyz_answers_503_when_the_background_verifier_failed(pg_url, tmp_path):  # noqa: F811
    # Segments of 8 records, so that the mirror's first segment is full and not re-checked when
    # the replica opens its mirror (only the last segment is: it is a cache).
    _, (data,) = make_replicas(pg_url, tmp_path, 1, seg_bits=3)
    with replica(data, pg_url, 1.0) as first:
        wait_until(lambda: leading(first) == {0}, what="the replica to lead p0")
        session_puts(first, "s", 12)
        assert httpx.get(first.url + "/readyz", timeout=5).status_code == 200
    # Damage a record of the mirror's first (full) segment while the replica is down: the
    # background verifier, which walks the mirror from seq 0, meets it.
    first_segment = data / "partitions" / "p0" / "log" / layout.segment_name(0)
    body = first_segment.read_bytes()
    assert b'"s1"' in body
    first_segment.write_bytes(body.replace(b'"s1"', b'"x1"', 1))
    with replica(data, pg_url, 1.0) as again:

        def refused() -> httpx.Response | None:
            response = httpx.get(again.url + "/readyz", timeout=5)
            return response if response.status_code == 503 else None

        response = wait_until(refused, 30, "/readyz to answer 503")
        assert isinstance(response, httpx.Response)
        error = response.json()["error"]
        assert error["code"] == "verifier_failed", error
        assert "partition 0" in error["message"] and "seq" in error["message"], error
        # The status names it too.
        status = httpx.get(again.url + "/v1/log/status", timeout=5).json()
        assert status["partitions"][0]["verifier"]["state"] == "failed", status


def test_readyz_answers_503_when_the_file_logs_verifier_failed(tmp_path):
    """The same on a file log: a checkpoint file that does not parse under the log's key."""
    data = tmp_path / "data"
    with Server(data) as server:
        session_puts(server, "s", 3)
        assert httpx.get(server.url + "/readyz", timeout=5).status_code == 200

        def checked() -> bool:  # the writer's last checkpoint written and verified
            verdict = httpx.get(server.url + "/v1/log/status", timeout=5).json()["verifier"]
            return verdict["state"] == "ok" and verdict["checkpoint_verified"] == 4

        wait_until(checked, 30, "the verifier to check the newest checkpoint")
        (data / "log" / layout.CHECKPOINT).write_text("not a checkpoint\n")

        def refused() -> httpx.Response | None:
            response = httpx.get(server.url + "/readyz", timeout=5)
            return response if response.status_code == 503 else None

        response = wait_until(refused, 30, "/readyz to answer 503")
        assert isinstance(response, httpx.Response)
        error = response.json()["error"]
        assert error["code"] == "verifier_failed", error
        assert "not a signed note" in error["message"], error
