"""`ledgermem tail URL` against a real server: resumes after kill -9 and restarts without loss or
duplicates, passes filters and credentials through, and writes a mirror that `verify` anchors."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest
from helpers.cli import ledgermem
from server import ROOT, Server

from eventstore import layout
from eventstore.errors import LockHeld
from eventstore.store import open_log
from replay.mirror import Mirror, MirrorError

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
TOKEN = "tok-tail"
TOKENS = {"LEDGERMEM_TOKENS": f"{TOKEN}:default:read+write+admin"}


def spawn_tail(*args: str, stdout=subprocess.DEVNULL) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ledgermem_cli", "tail", *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        env=ENV,
    )


def stop(proc: subprocess.Popen) -> bytes:
    """SIGTERM: the tail flushes, fetches a last checkpoint and exits 0; returns its stderr."""
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def log_bytes(log_dir: Path) -> bytes:
    """Every record line of the files, in seq order, each with its newline."""
    return b"".join(path.read_bytes() for _, path in layout.list_segments(log_dir))


def wait_until(condition, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Writers:
    """Threads adding items to their own sessions, riding out server restarts."""

    def __init__(self, url_of, count: int = 3, headers: dict | None = None) -> None:
        self.url_of = url_of  # the server's URL can change between restarts
        self.headers = headers or {}
        self.stopping = threading.Event()
        self.added = 0
        self.threads = [threading.Thread(target=self._run, args=(k,)) for k in range(count)]

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(30)

    def _run(self, k: int) -> None:
        n = 0
        while not self.stopping.is_set():
            try:
                with httpx.Client(base_url=self.url_of(), timeout=5, headers=self.headers) as c:
                    c.put(f"/v1/sessions/w{k}").raise_for_status()
                    while not self.stopping.is_set():
                        item = {"content": f"writer {k} item {n}", "tags": ["t"]}
                        c.post(f"/v1/sessions/w{k}/sections/findings/items", json=item)
                        n += 1
                        self.added += 1
            except (httpx.HTTPError, OSError):
                time.sleep(0.05)  # the server is restarting


def status(url: str, headers: dict | None = None) -> dict:
    return httpx.get(f"{url}/v1/log/status", headers=headers or {}, timeout=10).json()


def test_tail_survives_kill_9_and_restarts_without_loss_or_duplicates(tmp_path):
    data = tmp_path / "data"
    server = Server(data, "--seg-bits", "3").start()
    port = server.url.rsplit(":", 1)[1]
    vkey = status(server.url)["vkey"]
    out_path, mirror = tmp_path / "tail.jsonl", tmp_path / "mirror"
    with open(out_path, "wb") as out:
        tail = spawn_tail(server.url, stdout=out)
        mirrored = spawn_tail(server.url, "--mirror", mirror, "--checkpoint-every", "0.2")
        try:
            with Writers(lambda: server.url) as writers:
                wait_until(lambda: writers.added > 40, what="writes")
                server.kill()  # kill -9 mid-stream
                server = Server(data, "--seg-bits", "3", "--port", port).start()
                wait_until(lambda: writers.added > 80, what="writes after kill -9")
                mirrored.kill()  # the mirror continues from its last complete record
                mirrored.wait()
                mirrored = spawn_tail(server.url, "--mirror", mirror, "--checkpoint-every", "0.2")
                wait_until(lambda: writers.added > 120, what="writes after the mirror restart")
                server.stop()  # a graceful stop ends the streams cleanly
                server = Server(data, "--seg-bits", "3", "--port", port).start()
                wait_until(lambda: writers.added > 160, what="writes after the restart")
            head = status(server.url)["head"]
            wait_until(lambda: out_path.read_bytes().count(b"\n") > head, what="the tail")
            wait_until(
                lambda: (
                    (mirror / "checkpoint").exists()
                    # >=: the tails' own reconnections append stream traces (issue 13, item 14)
                    and int((mirror / "checkpoint").read_text().split("\n")[1]) >= head + 1
                ),
                what="the mirror's checkpoint",
            )
            stop(tail)
            stop(mirrored)
        finally:
            for proc in (tail, mirrored):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            server.stop()
    printed = out_path.read_bytes()
    files = log_bytes(data / "log")
    seqs = [orjson.loads(line)["seq"] for line in printed.splitlines()]
    assert seqs == list(range(len(seqs))), "every seq once, in order"
    assert printed == files[: len(printed)], "the exact bytes of the segment files"
    assert len(seqs) >= head + 1  # and maybe the stream traces of the tails' last reconnection
    restarts = [r for r in map(orjson.loads, printed.splitlines()) if r["type"] == "log.resume"]
    assert [r["payload"]["clean"] for r in restarts] == [False, True]
    assert len(layout.list_segments(data / "log")) >= 3

    assert log_bytes(mirror) == files[: len(log_bytes(mirror))]
    assert [n for n, _ in layout.list_segments(mirror)][-1] >= head >> 3
    report = orjson.loads(ledgermem("verify", mirror, "--vkey", vkey, "--json").stdout)
    assert report["verdict"] == "VALID-LOCAL"
    assert report["records"] >= head + 1 and report["unanchored_records"] == 0


@pytest.fixture(scope="module")
def quiet_server(tmp_path_factory):
    """A server with credentials and a finished history of two sessions (3+ segments)."""
    data = tmp_path_factory.mktemp("tail") / "data"
    with Server(data, "--seg-bits", "3", env=TOKENS) as server:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=server.url, headers=auth, timeout=10) as c:
            for s in ("a", "b"):
                c.put(f"/v1/sessions/{s}").raise_for_status()
            for k in range(12):
                c.post(
                    f"/v1/sessions/{'ab'[k % 2]}/sections/messages/items", json={"content": k}
                ).raise_for_status()
        server.head = status(server.url, auth)["head"]
        yield server


def tenant_lines(server: Server) -> list[bytes]:
    """The file lines a token of tenant `default` may see: never the control records."""
    lines = log_bytes(server.data_dir / "log").splitlines()
    return [line for line in lines if orjson.loads(line)["tenant"] == "default"]


def test_tail_exits_at_head_with_exactly_the_tenants_records(quiet_server):
    result = ledgermem("tail", quiet_server.url, "--exit-at-head", env={"LEDGERMEM_TOKEN": TOKEN})
    assert result.returncode == 0, result.stderr
    printed, lines = result.stdout.splitlines(), tenant_lines(quiet_server)
    assert printed == lines[: len(printed)]
    # What follows is the tail's own stream, traced when it opened and closed (issue 13, item 14).
    assert {orjson.loads(line)["session"] for line in lines[len(printed) :]} == {"_tenant"}


def test_tail_passes_filters_through(quiet_server):
    result = ledgermem(
        "tail", quiet_server.url, "--token", TOKEN, "--exit-at-head",
        "--session", "b", "--type", "item.added", "--type", "session.created",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert {r["session"] for r in records} == {"b"}
    assert [r["type"] for r in records] == ["session.created"] + ["item.added"] * 6
    assert all(line in tenant_lines(quiet_server) for line in result.stdout.splitlines())


def test_tail_from_a_cursor_to_a_seq(quiet_server):
    result = ledgermem("tail", quiet_server.url, "--token", TOKEN, "--after", 4, "--to-seq", 9)
    assert result.returncode == 0, result.stderr
    wanted = [line for line in tenant_lines(quiet_server) if 4 < orjson.loads(line)["seq"] <= 9]
    assert result.stdout.splitlines() == wanted


def test_tail_refusals_are_one_line_with_exit_2(quiet_server, tmp_path):
    unauthorized = ledgermem("tail", quiet_server.url, "--exit-at-head")
    assert unauthorized.returncode == 2
    assert unauthorized.stderr.decode().count("\n") == 1
    assert "HTTP 401" in unauthorized.stderr.decode()
    filtered = ledgermem("tail", quiet_server.url, "--mirror", tmp_path / "m", "--session", "a")
    assert filtered.returncode == 2 and b"takes no filters" in filtered.stderr
    scoped = ledgermem("tail", quiet_server.url, "--mirror", tmp_path / "m", "--token", TOKEN)
    assert scoped.returncode == 2 and scoped.stderr.decode().count("\n") == 1
    assert b"jumped from seq -1 to seq 1" in scoped.stderr


def test_a_mirror_keeps_redacted_payloads_unless_told_to_apply_redactions(tmp_path):
    data = tmp_path / "data"
    keep, apply = tmp_path / "keep", tmp_path / "apply"
    with Server(data, "--seg-bits", "3") as server, httpx.Client(base_url=server.url) as c:
        c.put("/v1/sessions/p").raise_for_status()
        for k in range(6):
            c.post(
                "/v1/sessions/p/sections/messages/items", json={"content": f"SECRET-{k}"}
            ).raise_for_status()
        for mirror in (keep, apply):
            assert (
                ledgermem("tail", server.url, "--mirror", mirror, "--exit-at-head").returncode == 0
            )
        c.post("/v1/sessions/p/erase", json={"all": True, "reason": "gdpr"}).raise_for_status()
        vkey = status(server.url)["vkey"]
        for mirror, extra in ((keep, ()), (apply, ("--apply-redactions",))):
            result = ledgermem("tail", server.url, "--mirror", mirror, "--exit-at-head", *extra)
            assert result.returncode == 0, result.stderr
        files = log_bytes(data / "log")
    assert b"SECRET-" in log_bytes(keep) and b"SECRET-" not in files
    assert log_bytes(apply) == files[: len(log_bytes(apply))]  # byte for byte, redacted too
    for mirror in (keep, apply):
        report = orjson.loads(ledgermem("verify", mirror, "--vkey", vkey, "--json").stdout)
        assert report["verdict"] == "VALID-LOCAL"
        pending = [r for r in report["redactions"] if r["pending"]]
        assert bool(pending) == (mirror == keep)


def test_a_mirror_takes_only_records_that_continue_it(tmp_path):
    lines = {}
    for name in ("a", "b"):
        writer, _ = open_log(tmp_path / name, seg_bits=3)
        for k in range(10):
            writer.append("default", "s", "notes", "x.y", {"k": k})
        writer.close()
        lines[name] = log_bytes(tmp_path / name / "log").splitlines()
    mirror = Mirror.open(tmp_path / "m")
    with pytest.raises(LockHeld):  # one tail per mirror
        Mirror.open(tmp_path / "m")
    mirror.append(lines["a"][:6])
    for wrong in (lines["b"][6], lines["a"][7], lines["a"][5]):  # another log, a gap, a repeat
        with pytest.raises(MirrorError, match="seq"):
            mirror.append([wrong])
    mirror.close()
    again = Mirror.open(tmp_path / "m")
    assert again.size == 6
    again.append(lines["a"][6:])
    again.close()
    assert log_bytes(tmp_path / "m") == log_bytes(tmp_path / "a" / "log")
