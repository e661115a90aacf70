"""The Redis store's own promises (eventstore/redis/), beside the contract and replica tests
it shares with PostgreSQL: a server that could lose an acknowledged write is refused, bad URLs
get one line and exit 2, a deposed writer is fenced, and a redis-server killed with SIGKILL and
restarted from its append-only file has every acknowledged record."""

from __future__ import annotations

import subprocess
import sys
import threading

import orjson
import pytest

import ledgermem_cli
from eventstore.errors import WriterClosed
from eventstore.redis import keys
from eventstore.redis import lease as leases
from eventstore.redis.leadership import open_partition_writer
from eventstore.redis.schema import connect
from eventstore.sink import CommitRefused
from tests.helpers.redis_server import RedisServer, redis_server, require_redis  # noqa: F401
from tests.helpers.redislog import make_store, take
from tests.helpers.stores import export_and_verify, stored_lines
from tests.server import ROOT


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """A command in a process of its own (serve: what an operator sees at start-up)."""
    return subprocess.run(
        [sys.executable, "-m", "ledgermem_cli", *args],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip


@pytest.fixture
def cli(capsys):
    """A short command in this process (init-store, export-log): main() and what it printed."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        code = ledgermem_cli.main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out, err)

    return run


def _refused(done: subprocess.CompletedProcess[str], *words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_server_that_does_not_fsync_every_write_is_refused_in_one_line(tmp_path, cli):
    require_redis()
    server = RedisServer(tmp_path / "lossy", durable=False).start()
    try:
        _refused(
            cli("init-store", server.url, "--partitions", "1", "--data", str(tmp_path / "d")),
            "appendonly no",
            "appendfsync always",
        )
        _refused(
            _cli("serve", "--store", server.url, "--data", str(tmp_path / "d"), "--port", "0"),
            "appendfsync always",
        )
        client = server_client(server)
        assert client.dbsize() == 0, "nothing was written on a refusal"
    finally:
        server.stop()


def test_a_server_hiding_config_is_refused_unless_the_url_asserts_fsync_always(tmp_path, cli):
    require_redis()
    server = RedisServer(tmp_path / "managed", extra=("--rename-command", "CONFIG", "")).start()
    data = str(tmp_path / "d")
    try:
        _refused(
            cli("init-store", server.url, "--partitions", "1", "--data", data),
            "CONFIG GET",
            "?fsync=always",
        )
        done = cli("init-store", server.url + "?fsync=always", "--partitions", "1", "--data", data)
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()


@pytest.mark.parametrize(
    "url", ["redis:///0", "mysql://db/ledgermem", "redis://127.0.0.1:1/0", "redis://h/0?fsync=no"]
)
def test_a_bad_store_url_gets_one_line_and_exit_2(tmp_path, cli, url):
    _refused(cli("init-store", url, "--partitions", "1", "--data", str(tmp_path / "d")))
    _refused(cli("export-log", "--store", url, str(tmp_path / "out")))
    _refused(cli("vkey", "--store", url))


def test_a_deposed_writer_gets_commit_refused_and_writes_nothing(tmp_path, redis_server):  # noqa: F811
    url = redis_server.url
    info, key = make_store(url, tmp_path / "data")
    old = open_partition_writer(url, info, key, 0, take(url, 0, "old"))
    old.append("acme", "s-1", "messages", "item.added", {"n": 0})
    client = connect(url)
    client.hset(keys.head(0), "lease_until", 0)  # the old lease ran out by the server's clock
    new_lease = leases.take(client, 0, "new", 10.0)
    assert new_lease is not None and new_lease.epoch == 2
    held = stored_lines(url, 0)
    with pytest.raises(CommitRefused, match="new"):
        old.append("acme", "s-1", "messages", "item.added", {"n": 1})
    assert stored_lines(url, 0) == held
    new = open_partition_writer(url, info, key, 0, new_lease)
    new.append("acme", "s-1", "messages", "item.added", {"n": 2})
    new.close()
    old.close()
    exported = export_and_verify(url, 0, tmp_path / "export")
    assert exported == [line for _, line in stored_lines(url, 0)]


def test_a_redis_server_killed_mid_load_loses_no_acknowledged_record(tmp_path, redis_server):  # noqa: F811
    url = redis_server.url
    info, key = make_store(url, tmp_path / "data")
    writer = open_partition_writer(url, info, key, 0, take(url, 0, "leader", seconds=1.0))
    acked: dict[int, dict] = {}  # seq -> the payload acknowledged there
    lock = threading.Lock()
    enough = threading.Event()

    def write(n: int) -> None:
        i = 0
        while True:
            i += 1
            try:
                record = writer.append("acme", "s-1", "messages", "item.added", {"w": n, "i": i})
            except WriterClosed:
                return
            with lock:
                acked[record.seq] = {"w": n, "i": i}
                if len(acked) >= 200:
                    enough.set()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    assert enough.wait(60)
    redis_server.kill9()  # mid-load: appends in flight
    for thread in threads:
        thread.join(30)
    redis_server.start()  # from its append-only file
    held = dict(stored_lines(url, 0))
    assert sorted(held) == list(range(len(held))), "gap-free"
    lost = sorted(
        seq for seq, payload in acked.items()
        if seq not in held or orjson.loads(held[seq])["payload"] != payload
    )  # fmt: skip
    assert not lost, f"acknowledged and lost: {lost[:10]}"
    with pytest.raises(WriterClosed):
        writer.append("acme", "s-1", "messages", "item.added", {"after": True})
    writer.close()
    # A new leader (the lease ran out) recovers from what the server kept, and goes on.
    client = connect(url)
    while (lease := leases.take(client, 0, "next", 5.0)) is None:
        threading.Event().wait(0.1)
    successor = open_partition_writer(url, info, key, 0, lease)
    successor.append("acme", "s-1", "messages", "item.added", {"after": True})
    successor.close()
    export_and_verify(url, 0, tmp_path / "export")


def server_client(server: RedisServer):
    import redis

    return redis.Redis(port=server.port)


def test_an_erased_record_reads_back_redacted_everywhere_and_every_copy_verifies(
    tmp_path,
    redis_server,  # noqa: F811
):
    """A redaction deletes the target's stream entry and keeps its redacted line: a mirror fed
    from zero (a new replica), an export taken before the erasure and continued after, and a
    takeover all see every seq, the target without its payload, and verify."""
    from eventstore.mirror import Mirror
    from eventstore.partitions import partition_origin
    from eventstore.redis.tail import StoreTail

    url = redis_server.url
    info, key = make_store(url, tmp_path / "data")
    writer = open_partition_writer(url, info, key, 0, take(url, 0, "leader", seconds=5.0))
    secret = writer.append("acme", "s-1", "messages", "item.added", {"text": "erase me"})
    for n in range(12):  # past a segment boundary (seg_bits 3)
        writer.append("acme", "s-1", "messages", "item.added", {"n": n})
    export = tmp_path / "export"
    export_and_verify(url, 0, export)  # before the erasure: the payload is there
    writer.redact([secret.seq], "user request")
    writer.append("acme", "s-1", "messages", "item.added", {"after": True})
    writer.close()

    held = dict(stored_lines(url, 0))
    assert (
        b"erase me" not in held[secret.seq] and orjson.loads(held[secret.seq]).get("salt") is None
    )
    exported = export_and_verify(url, 0, export)  # continued: the target copied again
    assert exported == [held[seq] for seq in sorted(held)]
    assert not any(b"erase me" in line for line in exported)

    mirror = Mirror.open(tmp_path / "mirror", partition_origin(info.origin, 0), info.seg_bits)
    tail = StoreTail(url, {0: mirror})
    assert tail.sync(0) == len(held)
    tail.stop()
    mirror.close()
    done = subprocess.run(
        [sys.executable, "-m", "ledgermem_cli", "verify", str(tmp_path / "mirror"),
         "--vkey", info.vkeys[0]],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # The next leader recovers across the erased entry and goes on.
    client = connect(url)
    client.hset(keys.head(0), "lease_until", 0)
    successor = open_partition_writer(url, info, key, 0, leases.take(client, 0, "next", 5.0))
    successor.append("acme", "s-1", "messages", "item.added", {"next": True})
    successor.close()
